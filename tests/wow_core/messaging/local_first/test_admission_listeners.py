"""The in-memory bus's admission tells a copy queue its result in the deciding call."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.wow_core.messaging.local_first.local_first_doubles import RecordingDistributedBus
from wow_core.messaging import MessageSubscription
from wow_core.messaging.in_memory import AdmissionFuture, InMemoryDomainEventBus
from wow_core.messaging.local_first import LocalFirstDistributedCopies
from wow_core.model import AggregateId, DomainEvent, DomainEventStream, NamedAggregate

ORDER = NamedAggregate("shop", "order")


def stream(version: int = 1) -> DomainEventStream:
    target = AggregateId(ORDER, "a-1")
    event = DomainEvent(target, {"n": version}, "happened", version)
    return DomainEventStream(target, version, (event,), "c", f"r-{version}")


class Dropping(RecordingDistributedBus):
    """Every receiver would drop a copy handled locally; a rejected one goes out."""

    def delivers(self, message: Any, *, handled_locally: bool) -> bool:
        return not handled_locally


async def test_an_acknowledgement_settles_the_copy_it_admits_before_it_returns() -> None:
    bus = InMemoryDomainEventBus()
    receiver = bus.receiver(MessageSubscription.of("g", [ORDER], runtime_owned=True))
    receiver.open_processing()
    copies: LocalFirstDistributedCopies[Any] = LocalFirstDistributedCopies(Dropping(), bus_name="event")  # type: ignore[arg-type]
    message = stream()
    entry = copies.queue(message.copy(), start=False)
    receipt = bus.hand_off(message)
    assert isinstance(receipt.admission, AdmissionFuture)
    entry.handed_off_with(receipt.admission, asyncio.get_running_loop().time() + 60)
    done = entry.completion()
    copies.start(entry)
    exchange = await asyncio.wait_for(receiver.__anext__(), 2)
    assert not done.done()
    await exchange.ack()
    assert done.done(), "settled in the acknowledgement, not in a later loop turn"
    assert copies.backlog() == 0
    await copies.flush(1)
    await bus.close()


async def test_a_listener_forgotten_at_its_deadline_cannot_decide_the_next_copy() -> None:
    distributed = Dropping()
    copies: LocalFirstDistributedCopies[Any] = LocalFirstDistributedCopies(distributed, bus_name="event")  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    late = AdmissionFuture(loop=loop)
    pending = AdmissionFuture(loop=loop)
    first = copies.queue(stream(1), start=False)
    first.handed_off_with(late, loop.time() + 0.05)  # its result will come too late
    copies.start(first)
    second = copies.queue(stream(2), start=False)
    second.handed_off_with(pending, loop.time() + 60)
    second_done = second.completion()
    copies.start(second)
    await asyncio.wait_for(first.completion(), 2)  # the deadline: out unmarked
    await asyncio.sleep(0)
    late.decide(True)  # the first's listener was forgotten: the second still waits
    await asyncio.sleep(0)
    assert not second_done.done()
    assert [a.message.version for a in distributed.arrivals] == [1]
    pending.decide(False)
    await asyncio.wait_for(second_done, 2)
    assert [(a.message.version, a.message.header.local_first) for a in distributed.arrivals] == [
        (1, False),
        (2, False),
    ]
    await copies.flush(1)


async def test_a_listener_that_raises_is_logged_and_the_others_still_run(caplog: Any) -> None:
    admission = AdmissionFuture(loop=asyncio.get_running_loop())
    heard: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    admission.listen(boom)
    admission.listen(lambda: heard.append("second"))
    admission.decide(True)
    assert heard == ["second"]
    assert admission.result() is True
    assert "a listener of an admission failed" in caplog.text
