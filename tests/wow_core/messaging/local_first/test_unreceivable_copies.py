"""Copies nobody could process are not sent, in their turn (the distributed bus's ``delivers``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.wow_core.messaging.local_first.local_first_doubles import (
    ControlledLocalBus,
    RecordingDistributedBus,
    command,
)
from wow_core.messaging.contract import BusClosedError
from wow_core.messaging.local_first import LocalFirstCommandBus, LocalFirstDistributedCopies
from wow_core.model import CommandMessage


class Deaf(RecordingDistributedBus):
    """A distributed bus that says who could process a copy: nobody for ``deaf`` ids,
    and nobody for a copy handled locally when ``drops_handled_locally``."""

    def __init__(self) -> None:
        super().__init__()
        self.deaf: set[str] = set()
        self.drops_handled_locally = False
        self.asked: list[tuple[str, bool]] = []

    def delivers(self, message: CommandMessage[Any], *, handled_locally: bool) -> bool:
        self.asked.append((message.aggregate_id.id, handled_locally))
        if message.aggregate_id.id in self.deaf:
            return False
        return not (handled_locally and self.drops_handled_locally)


def copies_over(bus: Deaf) -> LocalFirstDistributedCopies[Any]:
    return LocalFirstDistributedCopies(bus, bus_name="command")  # type: ignore[arg-type]


async def test_a_refused_copy_nobody_could_get_completes_at_once_without_a_send() -> None:
    bus = Deaf()
    bus.deaf.add("a1")
    copies = copies_over(bus)
    entry = copies.queue(command("a1"), start=False)
    done = entry.completion()
    tasks = len(asyncio.all_tasks())
    copies.start(entry)
    assert done is not None
    assert done.done(), "its turn was now, and there was nothing to send"
    assert len(asyncio.all_tasks()) == tasks, "and no task to send it"
    assert copies.backlog() == 0
    await copies.join()
    assert bus.arrivals == []
    await copies.flush(1)


async def test_a_refused_copy_nobody_could_get_still_waits_for_the_earlier_copies() -> None:
    bus = Deaf()
    copies = copies_over(bus)
    loop = asyncio.get_running_loop()
    admission: asyncio.Future[bool] = loop.create_future()
    first = copies.queue(command("a1", n=1), start=False)
    first.handed_off_with(admission, loop.time() + 60)
    copies.start(first)
    bus.deaf.add("a1")  # the topic loses its last group while the first copy waits
    behind = copies.queue(command("a1", n=2), start=False)
    done = behind.completion()
    copies.start(behind)
    assert done is not None
    assert not done.done(), "in its turn, behind the first"
    assert copies.backlog() == 2
    admission.set_result(False)
    await asyncio.wait_for(done, 5)
    await copies.join()
    assert bus.arrivals == [], "both decided when their turn came: nobody could get them"
    await copies.flush(1)


async def test_a_copy_handled_locally_that_every_receiver_would_drop_is_not_sent() -> None:
    bus = Deaf()
    bus.drops_handled_locally = True
    copies = copies_over(bus)
    loop = asyncio.get_running_loop()
    admitted: asyncio.Future[bool] = loop.create_future()
    rejected: asyncio.Future[bool] = loop.create_future()
    for aggregate, admission in (("a1", admitted), ("a2", rejected)):
        entry = copies.queue(command(aggregate), start=False)
        entry.handed_off_with(admission, loop.time() + 60)
        copies.start(entry)
    admitted.set_result(True)
    rejected.set_result(False)
    await asyncio.wait_for(copies.join(), 5)
    # the rejected one goes out marked false: the transport delivers it again
    assert [(a.message.aggregate_id.id, a.message.header.local_first) for a in bus.arrivals] == [
        ("a2", False)
    ]
    assert ("a1", True) in bus.asked
    await copies.flush(1)


async def test_an_admitted_copy_every_receiver_would_drop_settles_in_its_callback_without_a_worker() -> None:
    bus = Deaf()
    bus.drops_handled_locally = True
    copies = copies_over(bus)
    loop = asyncio.get_running_loop()
    first_admission: asyncio.Future[bool] = loop.create_future()
    second_admission: asyncio.Future[bool] = loop.create_future()
    first = copies.queue(command("a1", n=1), start=False)
    first.handed_off_with(first_admission, loop.time() + 60)
    first_done = first.completion()
    copies.start(first)
    second = copies.queue(command("a1", n=2), start=False)
    second.handed_off_with(second_admission, loop.time() + 60)
    second_done = second.completion()
    copies.start(second)
    first_admission.set_result(True)
    await asyncio.sleep(0)  # the admission's callbacks run
    assert first_done is not None
    assert first_done.done(), "settled when its result came"
    assert copies.workers == 0, "no worker's turn for a copy that goes nowhere"
    assert second_done is not None
    assert not second_done.done(), "the next waits for its own result"
    assert copies.backlog() == 1
    second_admission.set_result(False)  # rejected locally: its copy must still go out
    await asyncio.wait_for(second_done, 5)
    sent = [(a.message.id, a.message.header.local_first) for a in bus.arrivals]
    assert sent == [(second.message.id, False)]
    assert copies.backlog() == 0
    await copies.flush(1)


class Observed:
    """What a local-first observer heard: routes of sends and backlog changes."""

    def __init__(self) -> None:
        self.routes: list[str] = []
        self.backlog: list[int] = []

    def __getattr__(self, name: str) -> Any:
        def ignore(*args: Any, **kwargs: Any) -> None:
            return None

        return ignore

    def on_send(self, message: Any, route: Any) -> None:
        self.routes.append(route.value)

    def on_backlog(self, named: Any, value: int) -> None:
        self.backlog.append(value)


def bus_over(deaf: Deaf, observer: Observed | None = None) -> tuple[Any, Any]:
    local = ControlledLocalBus()
    return local, LocalFirstCommandBus(local, deaf, observer=observer)  # type: ignore[arg-type]


async def test_a_send_whose_copy_would_reach_nobody_queues_nothing_and_still_hands_off() -> None:
    deaf = Deaf()
    deaf.deaf.update({"a1", "a2"})
    observed = Observed()
    local, bus = bus_over(deaf, observed)
    local.route(command("a1").aggregate_id.named_aggregate).mode = "accept"
    await bus.send(command("a1"))  # handed off
    assert len(local.deliveries) == 1
    local.route(command("a2").aggregate_id.named_aggregate).mode = "refuse"
    await bus.send(command("a2"))  # refused: completes at once, there is nothing to send
    assert observed.routes == ["handed_off", "refused"]
    assert observed.backlog == [], "no copy was ever queued"
    assert bus.copies.backlog() == 0
    assert bus.copies._deadlines.waiting == 0, "no deadline for the pending admission"
    assert not local.deliveries[0].admission._callbacks, "no callback on the admission"
    local.admit(local.deliveries[0])
    await bus.copies.join()
    assert deaf.arrivals == []
    await bus.close()


async def test_a_send_behind_a_queued_copy_of_its_aggregate_takes_its_turn_even_to_nobody() -> None:
    deaf = Deaf()
    observed = Observed()
    local, bus = bus_over(deaf, observed)
    local.route(command("a1").aggregate_id.named_aggregate).mode = "accept"
    await bus.send(command("a1", n=1))  # its copy waits for the admission
    deaf.deaf.add("a1")  # the topic loses its last group
    await bus.send(command("a1", n=2))
    assert bus.copies.backlog() == 2, "queued behind the first: the order per aggregate is kept"
    for delivery in local.deliveries:
        local.admit(delivery)
    await asyncio.wait_for(bus.copies.join(), 5)
    assert deaf.arrivals == []
    await bus.close()


async def test_a_send_after_the_copies_closed_fails_even_when_it_would_reach_nobody() -> None:
    deaf = Deaf()
    deaf.deaf.add("a1")
    _, bus = bus_over(deaf)
    await bus.copies.flush(1)
    with pytest.raises(BusClosedError):
        await bus.send(command("a1"))
