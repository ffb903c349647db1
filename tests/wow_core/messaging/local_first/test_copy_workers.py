"""The copy queues' worker pool: lanes waiting for a hand-off result hold no task, ready
lanes are drained by a few long-lived workers, in order per aggregate, once per copy."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import random
import weakref
from collections.abc import Callable

import pytest

from tests.wow_core.messaging.local_first.local_first_doubles import (
    CARTS,
    ORDERS,
    ControlledLocalBus,
    RecordingDistributedBus,
    command,
)
from wow_core.messaging.local_first import CopyCancelledError, LocalFirstCommandBus
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import MetricsMiddleware
from wow_core.middleware.metrics import COPIES_CANCELLED, COPIES_SENT
from wow_core.model import CommandMessage, TopicKind
from wow_core.runtime.settings import LocalFirstSettings


def copy_tasks() -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task.get_name().startswith("local-first command copies")]


class Arrivals:
    """Wakes the test whenever a send reaches the distributed bus (started, not done)."""

    def __init__(self, distributed: RecordingDistributedBus) -> None:
        self.distributed = distributed
        self.event = asyncio.Event()
        send = distributed.send

        async def signalling(message: CommandMessage[object]) -> None:
            self.event.set()
            await send(message)

        distributed.send = signalling  # type: ignore[method-assign]

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not predicate():
                self.event.clear()
                await self.event.wait()


async def until_completed(distributed: RecordingDistributedBus, message_id: str) -> None:
    async with asyncio.timeout(5):
        while message_id not in distributed.completed:
            distributed.sent_event.clear()
            await distributed.sent_event.wait()


async def test_copies_waiting_for_their_hand_off_result_hold_no_task(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    tasks_before = len(asyncio.all_tasks())
    for n in range(200):
        await bus.send(command(f"a{n}"))
    assert bus.copies.backlog() == 200
    assert bus.copies.workers == 0  # no task per aggregate (nor per copy)
    assert len(asyncio.all_tasks()) == tasks_before

    for delivery in local.deliveries:
        local.admit(delivery)
    async with asyncio.timeout(5):
        await bus.copies.join()
    assert sorted(distributed.completed) == sorted(d.message.id for d in local.deliveries)
    assert set(distributed.marks().values()) == {"true"}
    assert bus.copies.workers <= bus.copies.max_idle_workers


async def test_idle_workers_beyond_the_limit_end(
    local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    bus = LocalFirstCommandBus(local, distributed)  # type: ignore[arg-type]
    bus.copies.max_idle_workers = 2
    arrivals = Arrivals(distributed)
    gate = asyncio.Event()
    messages = [command(f"a{n}") for n in range(12)]
    for message in messages:
        distributed.gate[message.id] = gate  # every send suspends: helpers are woken
        await bus.send(message)
    for delivery in local.deliveries:
        local.admit(delivery)
    await arrivals.until(lambda: len(distributed.arrivals) == len(messages))
    assert bus.copies.workers >= 2  # suspended sends of different aggregates ran side by side
    gate.set()
    async with asyncio.timeout(5):
        await bus.copies.join()
        while len(alive := [task for task in copy_tasks() if not task.done()]) > 2:
            await asyncio.wait(alive, return_when=asyncio.FIRST_COMPLETED)
    assert bus.copies.workers <= 2
    assert len(distributed.completed) == len(messages)


async def test_a_send_that_suspends_delays_neither_other_aggregates_nor_reorders_its_own(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    slow_first = command("slow", n=1)
    slow_second = command("slow", n=2)
    fast = command("fast")
    gate = asyncio.Event()
    distributed.gate[slow_first.id] = gate
    for message in (slow_first, slow_second, fast):
        await bus.send(message)
    for delivery in local.deliveries:
        local.admit(delivery)
    async with asyncio.timeout(5):
        await until_completed(distributed, fast.id)  # it went out past the stuck send
    assert slow_second.id not in distributed.ids()  # behind its aggregate's stuck copy
    gate.set()
    async with asyncio.timeout(5):
        await bus.copies.join()
    assert distributed.ids(slow_first.aggregate_id) == [slow_first.id, slow_second.id]
    assert distributed.overlaps == 0


async def test_a_refused_copy_with_nothing_ahead_is_sent_before_send_returns(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    local.route(ORDERS).mode = "refuse"
    message = command()
    await bus.send(message)
    assert distributed.completed == [message.id]
    assert bus.copies.backlog() == 0
    assert copy_tasks() == []


async def test_a_refused_copy_behind_a_waiting_one_is_sent_by_the_pool_in_its_turn(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    first = command("a1", n=1)
    await bus.send(first)  # handed off: waits for its admission
    local.route(ORDERS).mode = "refuse"
    second = command("a1", n=2)
    sending = asyncio.ensure_future(bus.send(second))
    await asyncio.sleep(0)
    assert not sending.done()  # a refused send completes only with its copy
    local.admit(local.deliveries[0])
    async with asyncio.timeout(5):
        await sending
    assert distributed.ids(first.aggregate_id) == [first.id, second.id]
    assert distributed.marks() == {first.id: "true", second.id: "false"}


async def test_many_aggregates_mixed_outcomes_each_copy_once_in_send_order(
    local: ControlledLocalBus, distributed: RecordingDistributedBus, metrics: InMemoryMetrics
) -> None:
    observer = MetricsMiddleware(metrics).observe_local_first(TopicKind.COMMAND)
    bus = LocalFirstCommandBus(local, distributed, observer=observer)  # type: ignore[arg-type]
    rng = random.Random(5)
    sent: list[CommandMessage[object]] = []
    senders: list[asyncio.Task[None]] = []
    for n in range(300):
        named = ORDERS if rng.random() < 0.5 else CARTS
        local.route(ORDERS).mode = rng.choice(["accept", "accept", "refuse"])
        local.route(CARTS).mode = rng.choice(["accept", "refuse"])
        message = command(f"a{rng.randrange(12)}", named=named, n=n)
        distributed.yields[message.id] = rng.randrange(3)
        sent.append(message)
        senders.append(asyncio.ensure_future(bus.send(message)))
        if rng.random() < 0.3:
            await asyncio.sleep(0)
        for delivery in local.pending():
            if rng.random() < 0.4:
                local.admit(delivery) if rng.random() < 0.8 else local.reject(delivery)
    async with asyncio.timeout(10):
        while local.pending() or not all(task.done() for task in senders):
            for delivery in local.pending():
                local.admit(delivery)
            await asyncio.sleep(0)
        await asyncio.gather(*senders)
        await bus.copies.join()
    assert sorted(distributed.completed) == sorted(message.id for message in sent)  # each once
    assert len(distributed.arrivals) == len(sent)
    for aggregate_id in {message.aggregate_id for message in sent}:
        in_send_order = [m.id for m in sent if m.aggregate_id == aggregate_id]
        assert distributed.ids(aggregate_id) == in_send_order
    assert distributed.overlaps == 0
    assert metrics.counter_value(COPIES_SENT) == len(sent)
    assert bus.copies.backlog() == 0


async def test_flush_cancels_a_copy_stuck_in_its_send_and_everything_left_and_counts_them(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
) -> None:
    stuck = command("a1", n=1)
    arrivals = Arrivals(distributed)
    distributed.gate[stuck.id] = asyncio.Event()  # never set
    await bus.send(stuck)
    behind = command("a1", n=2)
    await bus.send(behind)
    never_decided = command("a2")
    await bus.send(never_decided)
    local.route(ORDERS).mode = "refuse"
    waiting_sender = asyncio.ensure_future(bus.send(command("a1", n=3)))
    local.admit(local.deliveries[0])
    await arrivals.until(lambda: stuck.id in distributed.ids())

    result = await bus.copies.flush(timeout=0.05)

    assert result.cancelled == 4  # in the send, behind it (2), and the undecided one
    assert metrics.counter_value(COPIES_CANCELLED) == 4
    with pytest.raises(CopyCancelledError):
        await waiting_sender
    assert bus.copies.backlog() == 0
    assert bus.copies.workers == 0
    assert copy_tasks() == []
    # a hand-off result arriving after the flush sends nothing and fails nothing
    local.admit(local.deliveries[1])
    local.admit(local.deliveries[2])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert distributed.completed == []
    await bus.copies.join()  # nothing left to wait for


async def test_flush_counts_a_copy_queued_but_never_started(
    bus: LocalFirstCommandBus, distributed: RecordingDistributedBus, metrics: InMemoryMetrics
) -> None:
    bus.copies.queue(command("a1"), start=False)
    result = await bus.copies.flush(timeout=1)
    assert result.cancelled == 1
    assert metrics.counter_value(COPIES_CANCELLED) == 1
    assert distributed.arrivals == []


async def test_a_worker_cancelled_outside_a_flush_cancels_and_counts_its_lane_and_others_go_on(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
) -> None:
    stuck = command("a1", n=1)
    arrivals = Arrivals(distributed)
    distributed.gate[stuck.id] = asyncio.Event()
    await bus.send(stuck)
    await bus.send(command("a1", n=2))
    local.admit(local.deliveries[0])
    await arrivals.until(lambda: stuck.id in distributed.ids())
    (worker,) = [task for task in copy_tasks() if not task.done()]
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    assert metrics.counter_value(COPIES_CANCELLED) == 2
    assert bus.copies.backlog() == 0
    async with asyncio.timeout(5):
        await bus.copies.join()
    other = command("a3")
    await bus.send(other)
    local.admit(local.deliveries[-1])
    async with asyncio.timeout(5):
        await bus.copies.join()
    assert other.id in distributed.completed


async def test_a_late_hand_off_result_after_the_deadline_is_ignored(
    local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    bus = LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        settings=LocalFirstSettings(hand_off_timeout=0.01),
    )
    message = command()
    await bus.send(message)
    async with asyncio.timeout(5):
        await bus.copies.join()
    assert distributed.marks() == {message.id: "false"}
    local.admit(local.deliveries[0])  # too late: nothing is sent again
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(distributed.arrivals) == 1


async def test_a_copy_waiting_for_its_hand_off_result_keeps_nothing_of_the_senders_context(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    class Request:
        pass

    held: contextvars.ContextVar[Request | None] = contextvars.ContextVar("held", default=None)
    request = Request()
    alive = weakref.ref(request)
    context = contextvars.copy_context()
    context.run(held.set, request)  # the sender's context holds a web request
    sender = asyncio.get_running_loop().create_task(bus.send(command()), context=context)
    await sender
    del sender, context, request
    await asyncio.sleep(0)  # the loop's handle that resumed this test still holds the sender task
    gc.collect()
    assert bus.copies.backlog() == 1  # still waiting for the admission
    assert alive() is None  # the waiting copy did not keep the request
    local.admit(local.deliveries[0])
    async with asyncio.timeout(5):
        await bus.copies.join()
    assert len(distributed.completed) == 1


async def test_copies_waiting_for_their_hand_off_result_share_one_deadline_timer(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    timers: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback, *args, context=None):  # type: ignore[no-untyped-def]
        timers.append(when)
        return call_at(when, callback, *args, context=context)

    monkeypatch.setattr(loop, "call_at", counting)
    for n in range(200):
        await bus.send(command(f"a{n}"))
    assert bus.copies.backlog() == 200
    assert len(timers) == 1  # not one per waiting copy
    for delivery in local.deliveries:
        local.admit(delivery)
    async with asyncio.timeout(5):
        await bus.copies.join()
    assert set(distributed.marks().values()) == {"true"}
    assert bus.copies._deadlines.waiting == 0


async def test_a_copy_whose_result_never_comes_goes_out_unmarked_at_its_deadline_beside_decided_ones(
    local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    bus = LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        settings=LocalFirstSettings(hand_off_timeout=0.05),
    )
    stuck = command("stuck")
    await bus.send(stuck)
    decided = [command(f"d{n}") for n in range(20)]
    for message in decided:
        await bus.send(message)
    for delivery in local.deliveries[1:]:
        local.admit(delivery)
    async with asyncio.timeout(5):
        await bus.copies.join()
    marks = distributed.marks()
    assert marks[stuck.id] == "false"  # counted as refused at its deadline
    assert {marks[m.id] for m in decided} == {"true"}
    await bus.close()
