"""LocalFirstCommandBus.send against a local bus whose admissions the test decides."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.wow_core.messaging.local_first.local_first_doubles import (
    CARTS,
    ORDERS,
    ControlledLocalBus,
    RecordingDistributedBus,
    command,
    request_var,
)
from wow_core.messaging.contract import BusClosedError
from wow_core.messaging.local_first import (
    CopyCancelledError,
    LocalFirstCommandBus,
    local_aggregates,
)
from wow_core.metrics import InMemoryMetrics, metrics_source
from wow_core.middleware.metrics import BACKLOG_GAUGE, COPIES_CANCELLED, COPY_FAILED, HAND_OFF_TIMEOUTS
from wow_core.model import Header
from wow_core.runtime.settings import LocalFirstSettings

LOG = "wow_core.messaging.local_first"


async def started(coro: Any) -> asyncio.Task[None]:
    """Start a send and let it run up to its first real wait."""
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)
    return task


# -- the four rows of "When send completes" -------------------------------------------


async def test_handed_off_completes_at_once_and_its_copy_goes_out_marked_after_admission(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    message = command()
    await bus.send(message)  # returns although no receiver pulled the message

    assert len(local.deliveries) == 1
    assert local.deliveries[0].message.header[Header.LOCAL_FIRST] == "true"
    assert distributed.arrivals == []  # the copy waits for the receivers' decision
    assert bus.copies.backlog(ORDERS) == 1

    local.admit(local.deliveries[0])
    await bus.copies.join()
    assert distributed.marks() == {message.id: "true"}
    assert bus.copies.backlog(ORDERS) == 0


async def test_refused_send_completes_when_its_copy_was_sent_in_its_turn(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    first = command(n=1)
    await bus.send(first)  # handed off, admission pending
    local.route(ORDERS).mode = "refuse"
    second = command(n=2)
    sender = await started(bus.send(second))

    assert not sender.done()  # waits for its copy, which waits for the earlier copy
    assert distributed.arrivals == []
    local.admit(local.deliveries[0])
    await sender
    assert second.id in distributed.completed
    assert distributed.ids() == [first.id, second.id]
    assert distributed.marks() == {first.id: "true", second.id: "false"}


async def test_refused_send_fails_with_its_copy(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    local.route(ORDERS).mode = "refuse"
    message = command()
    distributed.failing.add(message.id)
    with pytest.raises(ConnectionError):
        await bus.send(message)


async def test_refused_because_no_receiver_is_routed(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    local.route(ORDERS).mode = "refuse"
    message = command()
    await bus.send(message)
    assert distributed.marks() == {message.id: "false"}
    assert message.id in distributed.completed


async def test_closed_route_refuses_without_waiting_for_demand(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    first = command(n=1)
    await bus.send(first)
    local.close_route(ORDERS)  # rejects the pending admission, then refuses
    second = command(n=2)
    async with asyncio.timeout(5):
        await bus.send(second)
    assert distributed.ids() == [first.id, second.id]
    assert distributed.marks() == {first.id: "false", second.id: "false"}


async def test_local_hand_off_error_is_a_refusal_and_is_logged(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = command(n=1)
    await bus.send(first)
    local.route(ORDERS).mode = "raise"
    second = command(n=2)
    with caplog.at_level(logging.ERROR, LOG):
        sender = await started(bus.send(second))
    assert any("sink terminated" in r.getMessage() for r in caplog.records)
    assert not sender.done()  # still waits for the earlier copy of the aggregate
    local.admit(local.deliveries[0])
    await sender
    assert distributed.ids() == [first.id, second.id]
    assert distributed.marks()[second.id] == "false"


async def test_rejected_after_the_hand_off_send_already_completed_copy_unmarked(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    message = command()
    await bus.send(message)
    local.reject(local.deliveries[0])  # a receiver closed
    await bus.copies.join()
    assert distributed.marks() == {message.id: "false"}


async def test_failed_admission_leaves_the_copy_eligible(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = command()
    await bus.send(message)
    with caplog.at_level(logging.ERROR, LOG):
        local.fail(local.deliveries[0], RuntimeError("dispatcher crashed"))
        await bus.copies.join()
    assert distributed.marks() == {message.id: "false"}
    assert any("dispatcher crashed" in r.getMessage() for r in caplog.records)


# -- ordering -------------------------------------------------------------------------


async def test_copies_of_one_aggregate_go_out_in_send_order_whatever_the_mix(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    sent = []
    senders = []
    for n, mode in enumerate(["accept", "refuse", "accept", "raise", "accept"]):
        local.route(ORDERS).mode = mode
        message = command(n=n)
        distributed.yields[message.id] = 5 - n  # later sends would overtake if run concurrently
        sent.append(message)
        senders.append(await started(bus.send(message)))
    # admissions decided in reverse order
    for delivery in reversed(local.deliveries):
        local.admit(delivery)
    await asyncio.gather(*senders)
    await bus.copies.join()
    assert distributed.ids() == [m.id for m in sent]
    assert distributed.overlaps == 0
    assert [distributed.marks()[m.id] for m in sent] == ["true", "false", "true", "false", "true"]


# -- a sender that stops waiting, the hand-off timeout -------------------------------


async def test_cancelled_sender_neither_duplicates_nor_loses_its_copy(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    first = command(n=1)
    await bus.send(first)
    local.route(ORDERS).mode = "refuse"
    second = command(n=2)
    sender = await started(bus.send(second))
    sender.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sender
    local.admit(local.deliveries[0])
    await bus.copies.join()
    assert distributed.ids() == [first.id, second.id]
    assert distributed.marks() == {first.id: "true", second.id: "false"}


async def test_cancelled_sender_of_a_failing_copy_gets_it_logged_not_lost_silently(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await bus.send(command(n=1))
    local.route(ORDERS).mode = "refuse"
    second = command(n=2)
    distributed.failing.add(second.id)
    sender = await started(bus.send(second))
    sender.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sender
    with caplog.at_level(logging.ERROR, LOG):
        local.admit(local.deliveries[0])
        await bus.copies.join()
    assert any(second.id in r.getMessage() for r in caplog.records)
    assert metrics.counter_value(COPY_FAILED) == 1


@pytest.mark.parametrize("settings", [LocalFirstSettings(hand_off_timeout=0.05)])
async def test_hand_off_result_missing_past_the_timeout_counts_as_refused(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = command()
    with caplog.at_level(logging.WARNING, LOG):
        await bus.send(message)
        await distributed.wait_for(1)  # nobody ever decides the admission
    assert distributed.marks() == {message.id: "false"}
    assert metrics.counter_value(HAND_OFF_TIMEOUTS) == 1
    assert any("within" in r.getMessage() for r in caplog.records)


async def test_hand_off_timeout_is_measured_from_the_hand_off(
    local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    bus = LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        settings=LocalFirstSettings(hand_off_timeout=30.0),
    )
    message = command()
    loop = asyncio.get_running_loop()
    before = loop.time()
    await bus.send(message)
    entry = bus.copies._lanes[message.aggregate_id].copies[0]
    assert before + 30.0 <= entry.deadline <= loop.time() + 30.0


# -- copy context ---------------------------------------------------------------------


async def test_queued_copy_keeps_only_captured_context(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    message = command()
    request_token = request_var.set("GET /orders (a web request)")
    source_token = metrics_source.set("saga:shipping")
    try:
        await bus.send(message)
    finally:
        request_var.reset(request_token)
        metrics_source.reset(source_token)
    local.admit(local.deliveries[0])
    await bus.copies.join()
    arrival = distributed.arrivals[0]
    assert arrival.source == "saga:shipping"
    assert arrival.request == ""  # the sender's whole context was not kept


# -- backlog --------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [LocalFirstSettings(backlog_high_water_mark=3)])
async def test_backlog_gauge_and_one_warning_per_crossing(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    metrics: InMemoryMetrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def warnings() -> int:
        return sum("high-water mark" in r.getMessage() for r in caplog.records)

    with caplog.at_level(logging.WARNING, LOG):
        for n in range(6):
            await bus.send(command(f"o{n}", n=n))
        await bus.send(command("c1", named=CARTS))
        assert metrics.gauge_value(BACKLOG_GAUGE, bus="command", aggregate="shop.order") == 6
        assert metrics.gauge_value(BACKLOG_GAUGE, bus="command", aggregate="shop.cart") == 1
        assert warnings() == 1  # not one per copy past the mark
        for delivery in list(local.deliveries):
            local.admit(delivery)
        await bus.copies.join()
        assert metrics.gauge_value(BACKLOG_GAUGE, bus="command", aggregate="shop.order") == 0
        for n in range(3):
            await bus.send(command(f"p{n}", n=n))
        assert warnings() == 2  # a new crossing warns again
    assert any(
        "WOW_COMMAND__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK" in r.getMessage() for r in caplog.records
    )


async def test_senders_never_wait_for_local_demand(
    bus: LocalFirstCommandBus, local: ControlledLocalBus
) -> None:
    async with asyncio.timeout(5):
        for n in range(2000):
            await bus.send(command(f"o{n % 7}", n=n))
    assert bus.copies.backlog(ORDERS) == 2000
    assert len(local.pending()) == 2000


# -- failures -------------------------------------------------------------------------


async def test_failed_copy_of_a_handed_off_message_is_logged_counted_and_does_not_fail_the_send(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = command(n=1), command(n=2)
    distributed.failing.add(first.id)
    await bus.send(first)  # completes: the failure cannot reach it
    await bus.send(second)
    with caplog.at_level(logging.ERROR, LOG):
        for delivery in local.deliveries:
            local.admit(delivery)
        await bus.copies.join()
    assert distributed.completed == [second.id]  # later copies still go out
    assert metrics.counter_value(COPY_FAILED, handed_off="true") == 1
    assert any(first.id in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


# -- shutdown -------------------------------------------------------------------------


async def test_flush_sends_what_it_can_and_cancels_and_counts_the_rest(
    bus: LocalFirstCommandBus,
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
) -> None:
    decided = command("a1", n=1)
    stuck = command("a2", n=2)
    await bus.send(decided)
    await bus.send(stuck)
    local.route(ORDERS).mode = "refuse"
    behind = command("a2", n=3)
    waiting = await started(bus.send(behind))
    local.admit(local.deliveries[0])

    result = await bus.copies.flush(timeout=0.05)

    assert result.cancelled == 2
    assert not result.completed
    assert distributed.completed == [decided.id]
    assert metrics.counter_value(COPIES_CANCELLED) == 2
    with pytest.raises(CopyCancelledError):
        await waiting
    assert bus.copies.backlog() == 0
    with pytest.raises(BusClosedError):
        await bus.send(command("a3"))


async def test_flush_completes_when_everything_was_sent(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    await bus.send(command())
    flushing = asyncio.ensure_future(bus.copies.flush(timeout=5))
    await asyncio.sleep(0)
    local.admit(local.deliveries[0])
    result = await flushing
    assert result.completed
    assert result.cancelled == 0
    assert len(distributed.completed) == 1


async def test_close_closes_local_routes_first_then_flushes_then_closes_distributed(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    message = command()
    await bus.send(message)
    async with asyncio.timeout(5):
        await bus.close()
    assert local.closed
    assert distributed.closed
    assert distributed.marks() == {message.id: "false"}  # rejected by the route's close
    with pytest.raises(BusClosedError):
        await bus.send(command())


# -- per-aggregate independence -------------------------------------------------------


async def test_an_aggregate_whose_receiver_never_pulls_does_not_delay_others(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    stuck = command("stuck")
    await bus.send(stuck)  # its admission is never decided
    local.route(CARTS).mode = "refuse"
    async with asyncio.timeout(5):
        other_id = command("other")  # same aggregate type, another aggregate
        await bus.send(other_id)
        local.admit(local.deliveries[1])
        cart = command("c1", named=CARTS)
        await bus.send(cart)  # refused: completes once its own copy was sent
        await distributed.wait_for(2)
    assert stuck.id not in distributed.ids()
    assert cart.id in distributed.completed
    assert other_id.id in distributed.completed


# -- Void, disabled, remote aggregates ------------------------------------------------


async def test_void_command_skips_local_first_and_is_forced_unmarked(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    void = command(is_void=True)
    void.header[Header.LOCAL_FIRST] = "true"  # whatever the sender wrote
    await bus.send(void)  # completes when the distributed send completed
    assert local.hand_off_calls == 0
    assert distributed.completed == [void.id]
    assert distributed.marks() == {void.id: "false"}
    assert void.header[Header.LOCAL_FIRST] == "true"  # the original is untouched


async def test_void_command_keeps_its_aggregate_order(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    first = command(n=1)
    await bus.send(first)
    void = command(n=2, is_void=True)
    sender = await started(bus.send(void))
    assert not sender.done()
    local.admit(local.deliveries[0])
    await sender
    assert distributed.ids() == [first.id, void.id]


async def test_header_can_disable_local_first(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    message = command()
    message.header[Header.LOCAL_FIRST_DISABLED] = "true"
    await bus.send(message)
    assert local.hand_off_calls == 0
    assert distributed.marks() == {message.id: "false"}


async def test_messages_of_aggregates_this_service_does_not_own_go_distributed_directly(
    local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    bus = LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        is_local=local_aggregates([CARTS]),
    )
    message = command(named=ORDERS)
    await bus.send(message)
    assert local.hand_off_calls == 0
    assert distributed.completed == [message.id]
    assert bus.copies.backlog() == 0


# -- independent headers --------------------------------------------------------------


async def test_original_and_both_copies_have_independent_headers(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    message = command()
    message.header["tenant"] = "t1"
    await bus.send(message)
    local_copy = local.deliveries[0].message
    message.header["tenant"] = "changed by the sender"  # after SENT: reaches no copy
    local.admit(local.deliveries[0])
    await bus.copies.join()
    distributed_copy = distributed.arrivals[0].message

    assert Header.LOCAL_FIRST not in message.header
    assert local_copy.header is not message.header
    assert distributed_copy.header is not message.header
    assert distributed_copy.header is not local_copy.header
    assert local_copy.header["tenant"] == "t1"
    assert distributed_copy.header["tenant"] == "t1"
    assert local_copy.header[Header.LOCAL_FIRST] == "true"
    assert local_copy.header.read_only  # emitted by the local bus; the distributed copy was still writable
    assert distributed_copy.header[Header.LOCAL_FIRST] == "true"


async def test_the_copy_of_a_rejected_hand_off_is_made_from_what_was_handed_off(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    message = command()
    message.header["tenant"] = "t1"
    await bus.send(message)
    local_copy = local.deliveries[0].message
    message.header["tenant"] = "changed by the sender"  # after SENT: reaches no copy
    local.reject(local.deliveries[0])
    await bus.copies.join()
    distributed_copy = distributed.arrivals[0].message

    assert distributed_copy.header is not local_copy.header
    assert distributed_copy.header is not message.header
    assert distributed_copy.header["tenant"] == "t1"
    assert distributed_copy.header[Header.LOCAL_FIRST] == "false"
    assert distributed_copy.id == message.id
    assert local_copy.header[Header.LOCAL_FIRST] == "true", "the emitted local copy is left as it was"
    assert Header.LOCAL_FIRST not in message.header


async def test_local_bus_and_distributed_bus_must_carry_the_same_kind(
    distributed: RecordingDistributedBus,
) -> None:
    class EventLocal(ControlledLocalBus):
        topic_kind = ControlledLocalBus.topic_kind.__class__("event")

    with pytest.raises(ValueError, match="event"):
        LocalFirstCommandBus(EventLocal(), distributed)  # type: ignore[arg-type]


# -- the copy queue's task runs its first step at once --------------------------------


async def test_a_refused_copy_is_sent_as_the_queue_task_in_its_own_context(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    local.route(ORDERS).mode = "refuse"
    seen: list[tuple[asyncio.Task[Any] | None, str, str]] = []
    send = distributed.send

    async def spying(message: Any) -> None:
        seen.append((asyncio.current_task(), request_var.get(), metrics_source.get()))
        await send(message)

    distributed.send = spying  # type: ignore[method-assign]
    request_token = request_var.set("GET /orders")
    source_token = metrics_source.set("gateway")
    try:
        await bus.send(command())
    finally:
        request_var.reset(request_token)
        metrics_source.reset(source_token)
    ((task, request, source),) = seen
    assert task is not asyncio.current_task()  # timeouts inside the send cancel the copy's task
    assert request == ""  # not the sender's context...
    assert source == "gateway"  # ...only what the captures took
    assert request_var.get() == ""


async def test_a_timeout_inside_the_distributed_send_fails_the_copy_not_the_sender(
    bus: LocalFirstCommandBus, local: ControlledLocalBus, distributed: RecordingDistributedBus
) -> None:
    local.route(ORDERS).mode = "refuse"
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def slow(message: Any) -> None:
        async with asyncio.timeout(0.05):
            await never

    distributed.send = slow  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(bus.send(command()), 5)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
