"""The merged receiver: local + distributed exchanges, copies handled locally filtered."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.wow_core.messaging.local_first.local_first_doubles import (
    CARTS,
    ORDERS,
    ControlledLocalBus,
    QueueReceiver,
    RecordingDistributedBus,
    WatchableQueueReceiver,
    command,
)
from wow_core.messaging.contract import HandOffReceipt, MessageReceiver, MessageSubscription
from wow_core.messaging.in_memory import InMemoryCommandBus
from wow_core.messaging.local_first import LocalFirstCommandBus, LocalFirstReceiver, local_aggregates
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware.metrics import LOCAL_FIRST_FILTERED as FILTERED
from wow_core.model import CommandMessage, Header, NamedAggregate, TopicKind
from wow_core.runtime.settings import LocalFirstSettings
from wow_core.testing.support import eventually

SUBSCRIPTION = MessageSubscription.of("shop.processor", [ORDERS, CARTS], runtime_owned=True)


def marked(value: str, **kwargs: Any) -> Any:
    message = command(**kwargs)
    message.header[Header.LOCAL_FIRST] = value
    return message


async def next_of(receiver: Any) -> Any:
    async with asyncio.timeout(5):
        return await receiver.__anext__()


async def test_distributed_copies_handled_locally_are_acked_and_filtered(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
) -> None:
    receiver = bus.receiver(SUBSCRIPTION)
    await receiver.ready()
    receiver.open_processing()
    dist = distributed.receivers[0]
    handled = marked("true", n=1)
    unmarked = marked("false", n=2)
    dist.put(handled)
    dist.put(unmarked)

    exchange = await next_of(receiver)
    assert exchange.message.id == unmarked.id
    assert dist.acked == [handled.id]  # filtered *and* acknowledged
    assert metrics.counter_value(FILTERED) == 1
    await receiver.close()


async def test_local_exchanges_are_delivered(bus: LocalFirstCommandBus, local: ControlledLocalBus) -> None:
    receiver = bus.receiver(SUBSCRIPTION)
    receiver.open_processing()
    message = command()
    await bus.send(message)
    exchange = await next_of(receiver)
    assert exchange.message.id == message.id
    assert exchange.message.header[Header.LOCAL_FIRST] == "true"  # the local copy
    await receiver.close()


async def test_end_to_end_a_message_is_handled_once(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    receiver = bus.receiver(SUBSCRIPTION)
    receiver.open_processing()
    # the double admits when the dispatcher pulls, as a real local receiver does
    local.receivers[0].on_pull = lambda exchange: [
        local.admit(d) for d in local.deliveries if d.message.id == exchange.message.id
    ]
    refused = command("c9", named=CARTS, n=0)
    local.route(CARTS).mode = "refuse"
    await bus.send(refused)
    handed = command(n=1)
    await bus.send(handed)
    seen = [await next_of(receiver), await next_of(receiver)]
    await bus.copies.join()
    assert sorted(e.message.id for e in seen) == sorted([refused.id, handed.id])
    assert distributed.marks() == {refused.id: "false", handed.id: "true"}
    # the distributed copy of the handed-off message is filtered: the next one is a marker
    marker = marked("false", n=9)
    distributed.receivers[0].put(marker)
    assert (await next_of(receiver)).message.id == marker.id
    assert distributed.receivers[0].acked == [handed.id]
    await receiver.close()


async def test_copies_of_aggregates_this_service_does_not_own_are_not_filtered(
    local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    bus = LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        is_local=local_aggregates([CARTS]),
    )
    receiver = bus.receiver(SUBSCRIPTION)
    receiver.open_processing()
    foreign = marked("true", named=ORDERS)
    distributed.receivers[0].put(foreign)
    exchange = await next_of(receiver)
    assert exchange.message.id == foreign.id
    assert local.receivers[0].subscription.named_aggregates == frozenset({CARTS})
    await receiver.close()


async def test_no_local_receiver_when_the_subscription_names_no_local_aggregate(
    local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    bus = LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        is_local=local_aggregates([]),
    )
    receiver = bus.receiver(SUBSCRIPTION)
    assert local.receivers == []
    message = marked("true")
    distributed.receivers[0].put(message)
    assert (await next_of(receiver)).message.id == message.id
    await receiver.close()


@pytest.fixture(params=["pull-task", "call-when-pullable"])
def pair(request: pytest.FixtureRequest) -> tuple[QueueReceiver, QueueReceiver, LocalFirstReceiver[Any]]:
    """A merged receiver over a local receiver that can or cannot tell when it is pullable."""
    local = (
        QueueReceiver(SUBSCRIPTION) if request.param == "pull-task" else WatchableQueueReceiver(SUBSCRIPTION)
    )
    dist = QueueReceiver(SUBSCRIPTION)
    return local, dist, LocalFirstReceiver(local, dist, is_local=lambda _: True)


async def test_the_local_side_is_pulled_only_while_the_consumer_waits(pair: Any) -> None:
    local, dist, receiver = pair
    first = command(n=1)
    dist.put(first)
    assert (await next_of(receiver)).message.id == first.id
    # the consumer is busy now: a local message must not be pulled (that would admit it)
    late = command(n=2)
    local.put(late)
    for _ in range(5):
        await asyncio.sleep(0)
    assert local.pulled == []
    assert (await next_of(receiver)).message.id == late.id
    assert local.pulled == [late.id]
    await receiver.close()


async def test_a_cancelled_consumer_leaves_no_local_pull_behind(pair: Any) -> None:
    local, _, receiver = pair
    waiting = asyncio.ensure_future(receiver.__anext__())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    message = command()
    local.put(message)
    for _ in range(5):
        await asyncio.sleep(0)
    assert local.pulled == []
    assert (await next_of(receiver)).message.id == message.id
    await receiver.close()


async def test_both_sources_ready_deliver_both_in_turn(pair: Any) -> None:
    local, dist, receiver = pair
    a, b = command(n=1), marked("false", n=2)
    local.put(a)
    dist.put(b)
    got = {(await next_of(receiver)).message.id, (await next_of(receiver)).message.id}
    assert got == {a.id, b.id}
    await receiver.close()


async def test_close_releases_a_distributed_exchange_pulled_ahead(pair: Any) -> None:
    local, dist, receiver = pair
    a = command(n=1)
    local.put(a)
    assert (await next_of(receiver)).message.id == a.id
    ahead = marked("false", n=2)
    exchange = dist.put(ahead)
    for _ in range(5):
        await asyncio.sleep(0)  # the pending distributed pull takes it
    assert dist.pulled == [ahead.id]
    await receiver.close()
    assert exchange.acked is False
    assert dist.in_flight == 0  # released: the backend may redeliver it
    assert local.closed
    assert dist.closed


async def test_iteration_ends_when_both_sides_end(pair: Any) -> None:
    local, dist, receiver = pair
    message = command()
    dist.put(message)
    await local.close()
    assert (await next_of(receiver)).message.id == message.id
    await dist.close()
    with pytest.raises(StopAsyncIteration):
        await next_of(receiver)


async def test_lifecycle_is_forwarded_to_both_receivers(pair: Any) -> None:
    local, dist, receiver = pair
    assert not receiver.processing_open
    await receiver.ready()
    assert local.is_ready.is_set()
    assert dist.is_ready.is_set()
    receiver.open_processing()
    assert local.processing_open
    assert dist.processing_open
    assert receiver.processing_open
    local.put(command())
    await next_of(receiver)
    assert receiver.in_flight == 1
    assert await receiver.quiesce(0.1) is False
    await receiver.close()


# -- a local pull that completes as the receiver stops -------------------------------------


class LatePull:
    """A local receiver whose pull, once it took an exchange from ``inner``, hands it over
    only when ``finish`` is set, even if the pull was cancelled meanwhile: the merged
    receiver's cancellation of that pull comes too late. No ``call_when_pullable`` and no
    ``pending``, so the merged receiver pulls it with a task."""

    def __init__(self, inner: MessageReceiver[Any]) -> None:
        self.inner = inner
        self.took = asyncio.Event()
        self.finish = asyncio.Event()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        exchange = await self.inner.__aiter__().__anext__()
        self.took.set()
        while not self.finish.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await self.finish.wait()
        return exchange

    async def ready(self) -> None:
        await self.inner.ready()

    @property
    def processing_open(self) -> bool:
        return self.inner.processing_open

    def open_processing(self) -> None:
        self.inner.open_processing()

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight

    async def quiesce(self, timeout: float | None = None) -> bool:
        return await self.inner.quiesce(timeout)

    async def close(self) -> None:
        await self.inner.close()


async def stop(receiver: MessageReceiver[Any], how: str) -> None:
    if how == "close":
        await receiver.close()
    else:
        await receiver.quiesce(0)


@pytest.mark.parametrize("how", ["close", "quiesce"])
async def test_a_local_pull_completing_as_the_receiver_stops_is_released_not_kept(how: str) -> None:
    local = QueueReceiver(SUBSCRIPTION)
    late = LatePull(local)
    receiver: LocalFirstReceiver[Any] = LocalFirstReceiver(
        late, QueueReceiver(SUBSCRIPTION), is_local=lambda _: True
    )
    receiver.open_processing()
    consumer = asyncio.create_task(receiver.__anext__())
    exchange = local.put(command())
    await asyncio.wait_for(late.took.wait(), 5)  # taken locally; the consumer does not have it

    await stop(receiver, how)  # the close (or quiescence) at exactly this point
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(consumer, 5)
    late.finish.set()  # the pull hands its exchange over only now

    async def released() -> bool:
        return local.in_flight == 0

    await eventually(released, timeout=5, what="the late exchange to be released")
    assert exchange.acked is False
    assert local.acked == []
    with pytest.raises(StopAsyncIteration):
        await next_of(receiver)  # and it is not delivered after the stop either
    await receiver.close()


class LateLocalBus:
    """The in-memory command bus, its receivers seen through :class:`LatePull`."""

    topic_kind = TopicKind.COMMAND

    def __init__(self) -> None:
        self.inner = InMemoryCommandBus()
        self.late: list[LatePull] = []

    async def send(self, message: CommandMessage[Any]) -> None:
        await self.inner.send(message)

    def hand_off(self, message: CommandMessage[Any]) -> HandOffReceipt:
        return self.inner.hand_off(message)

    def subscriber_count(self, named_aggregate: NamedAggregate) -> int:
        return self.inner.subscriber_count(named_aggregate)

    def receiver(self, subscription: MessageSubscription) -> LatePull:
        late = LatePull(self.inner.receiver(subscription))
        self.late.append(late)
        return late

    async def close(self) -> None:
        await self.inner.close()


@pytest.mark.parametrize("how", ["close", "quiesce"])
async def test_a_receiver_stopping_just_after_its_local_side_took_a_message_sends_its_copy_unmarked(
    how: str,
) -> None:
    # The loss the wave-1 notes described: the local side has just taken the message, the
    # consumer never gets it, the receiver stops. Admission is the acknowledgement, so the
    # copy goes out false (the transport delivers it) and well before the hand-off timeout.
    local = LateLocalBus()
    distributed = RecordingDistributedBus()
    bus = LocalFirstCommandBus(local, distributed, settings=LocalFirstSettings(hand_off_timeout=30.0))
    receiver = bus.receiver(SUBSCRIPTION)
    await receiver.ready()
    receiver.open_processing()
    (late,) = local.late
    consumer = asyncio.ensure_future(receiver.__aiter__().__anext__())
    message = command()
    await bus.send(message)  # handed off
    await asyncio.wait_for(late.took.wait(), 5)

    await stop(receiver, how)
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(consumer, 5)
    late.finish.set()

    await distributed.wait_for(1, timeout=5)
    assert distributed.marks() == {message.id: "false"}
    await receiver.close()
    await bus.close()
