"""Dispatchers: subscriptions, selection, concurrency, outcomes and acknowledgement."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.accounts import ACCOUNT, Deposit, Deposited, Opened, Withdrawn
from tests.wow_core.event.support import (
    CUSTOMER,
    TRANSFER,
    QueueBus,
    RecordingNotifier,
    RecordingSender,
    Registered,
    ScriptedRecorder,
    stream,
    wait_until,
)
from wow_core.event import (
    CompensationTarget,
    ComponentKind,
    FunctionExchange,
    ProcessingStage,
    RecordResult,
    event_processor,
    on_event,
    on_state_event,
    projection,
    retry,
    stateless_saga,
)
from wow_core.event.failure import NONE_RECORDER, FailureRecorder
from wow_core.event.handler import ErrorHandler, suppressed
from wow_core.event.pipeline import EventDispatch, build_event_dispatch
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import MetricsMiddleware
from wow_core.middleware.metrics import PROCESSING_OUTCOMES as OUTCOMES_METRIC
from wow_core.model import AggregateId, CommandMessage, StateEvent, TopicKind
from wow_core.runtime.keyed_executor import KeyedExecutor
from wow_core.runtime.settings import EventSettings, RetrySettings


@dataclass
class Harness:
    dispatch: EventDispatch
    events: QueueBus
    states: QueueBus
    notifier: RecordingNotifier
    metrics: InMemoryMetrics
    executor: KeyedExecutor
    sender: RecordingSender

    async def settle(self, count: int, bus: QueueBus | None = None) -> None:
        target = bus or self.events
        await wait_until(lambda: target.settled() >= count)


async def start(
    *components: object,
    recorder: FailureRecorder = NONE_RECORDER,
    ack_on_unrecorded_failure: bool = True,
    error_handlers: dict[ComponentKind, ErrorHandler] | None = None,
    snapshot: Any = None,
) -> Harness:
    events, states = QueueBus(TopicKind.EVENT), QueueBus(TopicKind.STATE)
    notifier, metrics, executor, sender = (
        RecordingNotifier(),
        InMemoryMetrics(),
        KeyedExecutor(64),
        RecordingSender(),
    )
    dispatch = build_event_dispatch(
        components=components,
        settings=EventSettings(
            ack_on_unrecorded_failure=ack_on_unrecorded_failure,
            retry=RetrySettings(max_retries=1, min_backoff=0),
        ),
        service_name="svc",
        domain_event_bus=events,  # type: ignore[arg-type]
        state_event_bus=states,  # type: ignore[arg-type]
        executor=executor,
        notifier=notifier,
        command_sender=sender,
        recorder=recorder,
        observer=MetricsMiddleware(metrics).observe_event_processing(),
        error_handlers=error_handlers,
        snapshot_aggregates=[ACCOUNT] if snapshot else [],
        snapshot_saver=snapshot,
    )
    await dispatch.start()
    return Harness(dispatch, events, states, notifier, metrics, executor, sender)


@projection(context="reports", aggregates=["bank.account"])
class Ledger:
    def __init__(self) -> None:
        self.seen: list[str] = []

    @on_event
    async def opened(self, event: Opened) -> None:
        self.seen.append(f"opened:{event.owner}")

    @on_event
    async def deposited(self, event: Deposited) -> None:
        self.seen.append(f"deposited:{event.amount}")


@projection(context="crm", aggregates=["crm.customer"])
class Directory:
    def __init__(self) -> None:
        self.names: list[str] = []

    @on_event
    def registered(self, event: Registered) -> None:
        self.names.append(event.name)


async def test_one_receiver_per_bounded_context_only_for_supported_topics() -> None:
    h = await start(Ledger(), Directory())
    groups = {r.subscription.group: r.subscription for r in h.events.receivers}
    assert set(groups) == {"bank.svc.ProjectionDispatcher", "crm.svc.ProjectionDispatcher"}
    assert groups["bank.svc.ProjectionDispatcher"].named_aggregates == {ACCOUNT}
    assert groups["crm.svc.ProjectionDispatcher"].named_aggregates == {CUSTOMER}
    assert all(s.runtime_owned for s in groups.values())
    assert all(r.opened for r in h.events.receivers)
    # no STATE_EVENT function: no state receiver; bank.transfer has no function: no path
    assert h.states.receivers == []
    assert all(TRANSFER not in r.subscription.named_aggregates for r in h.events.receivers)
    await h.dispatch.stop(5)
    assert all(r.closed for r in h.events.receivers)


async def test_events_of_a_stream_in_order_then_the_source_is_acknowledged() -> None:
    ledger = Ledger()
    h = await start(ledger)
    s = stream(ACCOUNT, "a1", 1, Opened("ann"), Deposited(5), Withdrawn(1), Deposited(7))
    await h.events.send(s)
    await h.settle(1)
    assert ledger.seen == ["opened:ann", "deposited:5", "deposited:7"]
    assert h.events.acked == [s]
    # a signal per function exchange; "last" marks each function's last event of the stream
    lasts = [(sig.function.function_name, sig.is_last) for sig in h.notifier.signals]
    assert lasts == [("opened", True), ("deposited", False), ("deposited", True)]
    assert {sig.stage for sig in h.notifier.signals} == {ProcessingStage.PROJECTED}
    await h.dispatch.stop(5)


async def test_functions_matching_one_event_run_concurrently() -> None:
    started: list[str] = []
    both = asyncio.Event()

    @event_processor(aggregates=["bank.account"])
    class Pair:
        async def _meet(self, name: str) -> None:
            started.append(name)
            if len(started) == 2:
                both.set()
            await asyncio.wait_for(both.wait(), 5)  # deadlocks (times out) if run one after the other

        @on_event
        async def first(self, event: Opened) -> None:
            await self._meet("first")

        @on_event
        async def second(self, event: Opened) -> None:
            await self._meet("second")

    h = await start(Pair())
    await h.events.send(stream(ACCOUNT, "a1", 1, Opened("ann")))
    await h.settle(1)
    assert sorted(started) == ["first", "second"]
    assert h.metrics.counter_value(OUTCOMES_METRIC, outcome="HANDLED") == 2
    await h.dispatch.stop(5)


async def test_one_aggregate_is_serial_and_different_aggregates_run_in_parallel() -> None:
    gates: dict[str, asyncio.Event] = {"a1": asyncio.Event(), "a2": asyncio.Event()}
    trace: list[str] = []

    @projection(aggregates=["bank.account"])
    class Slow:
        @on_event
        async def deposited(self, event: Deposited) -> None:
            key = "a1" if event.amount < 100 else "a2"
            trace.append(f"start {key} {event.amount}")
            await asyncio.wait_for(gates[key].wait(), 5)
            trace.append(f"end {key} {event.amount}")

    h = await start(Slow())
    await h.events.send(stream(ACCOUNT, "a1", 1, Deposited(1)))
    await h.events.send(stream(ACCOUNT, "a1", 2, Deposited(2)))
    await h.events.send(stream(ACCOUNT, "a2", 1, Deposited(100)))
    await wait_until(lambda: len(trace) == 2)
    # a2 started although a1's first stream still runs; a1's second waits for its first
    assert sorted(trace) == ["start a1 1", "start a2 100"]
    gates["a1"].set()
    await wait_until(lambda: "end a1 2" in trace)
    assert trace.index("end a1 1") < trace.index("start a1 2")
    gates["a2"].set()
    await h.settle(3)
    await h.dispatch.stop(5)


@projection(context="reports", aggregates=["bank.account"])
class HalfBroken:
    def __init__(self) -> None:
        self.ran: list[str] = []

    @on_event
    async def fine(self, event: Opened) -> None:
        self.ran.append("fine")

    @on_event
    async def broken(self, event: Opened) -> None:
        self.ran.append("broken")
        raise ValueError("projection bug")

    @retry(enabled=False)
    @on_event
    async def best_effort(self, event: Deposited) -> None:
        raise ValueError("best effort failed")


@pytest.mark.parametrize(
    ("recorder", "ack_on_unrecorded", "outcome", "acked"),
    [
        (NONE_RECORDER, True, "FAILURE_UNRECORDED", True),
        (NONE_RECORDER, False, "FAILURE_UNRECORDED", False),
        (ScriptedRecorder(RecordResult.RECORDED), False, "FAILURE_RECORDED", True),
        (ScriptedRecorder(ConnectionError("ledger down")), True, "RECORDING_FAILED", False),
    ],
)
async def test_each_failure_outcome_and_its_acknowledgement(
    recorder: FailureRecorder, ack_on_unrecorded: bool, outcome: str, acked: bool
) -> None:
    projection_ = HalfBroken()
    h = await start(projection_, recorder=recorder, ack_on_unrecorded_failure=ack_on_unrecorded)
    s = stream(ACCOUNT, "a1", 1, Opened("ann"))
    await h.events.send(s)
    await h.settle(1)
    assert sorted(projection_.ran) == ["broken", "fine"]  # the other function still ran
    assert (h.events.acked == [s]) is acked
    assert h.events.exchanges[0]._settled  # released, not left in flight
    tags = {"component": "projection", "context": "bank", "aggregate": "account", "message": "Opened"}
    assert h.metrics.counter_value(OUTCOMES_METRIC, outcome=outcome, processor="HalfBroken", **tags) == 1
    assert h.metrics.counter_value(OUTCOMES_METRIC, outcome="HANDLED", **tags) == 1
    await h.dispatch.stop(5)


async def test_a_waived_failure_is_acknowledged() -> None:
    recorder = ScriptedRecorder(RecordResult.RECORDED)
    h = await start(HalfBroken(), recorder=recorder, ack_on_unrecorded_failure=False)
    s = stream(ACCOUNT, "a1", 1, Deposited(3))
    await h.events.send(s)
    await h.settle(1)
    assert h.events.acked == [s]
    assert h.metrics.counter_value(OUTCOMES_METRIC, outcome="FAILURE_WAIVED") == 1
    [failure] = recorder.failures
    assert not failure.retry_enabled
    assert failure.function.function_name == "best_effort"
    await h.dispatch.stop(5)


@dataclass
class CollectingErrorHandler:
    errors: list[tuple[FunctionExchange, BaseException]] = field(default_factory=list)

    async def handle(self, exchange: FunctionExchange, error: BaseException) -> None:
        self.errors.append((exchange, error))


async def test_the_error_handler_gets_the_last_error_with_the_recording_error_attached() -> None:
    handler = CollectingErrorHandler()
    recorder = ScriptedRecorder(ConnectionError("ledger down"))
    h = await start(HalfBroken(), recorder=recorder, error_handlers={ComponentKind.PROJECTION: handler})
    await h.events.send(stream(ACCOUNT, "a1", 1, Opened("ann")))
    await h.settle(1)
    [(exchange, error)] = handler.errors
    assert isinstance(error, ValueError)
    assert str(error) == "projection bug"
    assert exchange.function.function_name == "broken"
    [recording_error] = suppressed(error)
    assert str(recording_error) == "ledger down"
    assert recorder.calls == 3  # recording was retried before RECORDING_FAILED
    await h.dispatch.stop(5)


async def test_the_default_error_handler_logs_and_resumes(caplog: pytest.LogCaptureFixture) -> None:
    projection_ = HalfBroken()
    h = await start(projection_)
    with caplog.at_level(logging.ERROR, logger="wow.event.error"):
        await h.events.send(stream(ACCOUNT, "a1", 1, Opened("ann")))
        await h.events.send(stream(ACCOUNT, "a1", 2, Opened("bob")))
        await h.settle(2)
    assert projection_.ran.count("fine") == 2  # resumed with the next message
    assert "projection bug" in caplog.text
    await h.dispatch.stop(5)


async def test_the_recorder_sees_successes_and_the_compensation_id() -> None:
    recorder = ScriptedRecorder()
    ledger = Ledger()
    h = await start(ledger, recorder=recorder)
    target = CompensationTarget("reports", "Ledger", "deposited", "exec-1")
    await h.events.send(stream(ACCOUNT, "a1", 1, Opened("ann"), Deposited(4), header=target.to_header()))
    await h.settle(1)
    # a compensation message runs only the function named in its header
    assert ledger.seen == ["deposited:4"]
    [success] = recorder.successes
    assert success.compensation_id == "exec-1"
    assert success.function.function_name == "deposited"
    await h.dispatch.stop(5)


async def test_a_half_named_compensation_target_is_rejected_not_run_everywhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger = Ledger()
    h = await start(ledger)
    s = stream(ACCOUNT, "a1", 1, Opened("ann"), header={"compensation.function": "opened"})
    await h.events.send(s)
    await h.settle(1)
    assert ledger.seen == []
    assert h.events.acked == [s]
    assert h.metrics.counter_value("wow.processing.rejected", component="projection") == 1
    assert "compensation message must name" in caplog.text
    await h.dispatch.stop(5)


@stateless_saga(context="bank", aggregates=["bank.transfer"])
class TransferSaga:
    @on_event
    def on_withdrawn(self, event: Withdrawn) -> list[CommandMessage[Deposit]]:
        target = AggregateId(ACCOUNT, "to")
        return [
            CommandMessage(target, Deposit(event.amount), "Deposit"),
            CommandMessage(target, Deposit(0), "Deposit"),
        ]

    @on_event
    def on_opened(self, event: Opened) -> str:
        return "not a command"


async def test_a_saga_sends_its_commands_through_the_gateway_with_stable_request_ids() -> None:
    h = await start(TransferSaga())
    s = stream(TRANSFER, "t1", 1, Withdrawn(9))
    await h.events.send(s)
    await h.settle(1)
    first, second = h.sender.commands
    assert first.body == Deposit(9)
    assert first.request_id == f"{s.events[0].id}.on_withdrawn.0"
    assert second.request_id == f"{s.events[0].id}.on_withdrawn.1"
    assert h.notifier.signals[0].stage is ProcessingStage.SAGA_HANDLED
    await h.events.send(stream(TRANSFER, "t1", 2, Opened("x")))
    await h.settle(2)
    assert (
        h.metrics.counter_value(OUTCOMES_METRIC, outcome="FAILURE_UNRECORDED", component="stateless_saga")
        == 1
    )
    await h.dispatch.stop(5)


async def test_a_failed_saga_send_fails_the_function() -> None:
    h = await start(TransferSaga())
    h.sender.fail = ValueError("gateway refused")
    await h.events.send(stream(TRANSFER, "t1", 1, Withdrawn(9)))
    await h.settle(1)
    assert h.notifier.signals[0].error is not None
    assert h.metrics.counter_value(OUTCOMES_METRIC, outcome="FAILURE_UNRECORDED") == 1
    await h.dispatch.stop(5)


@event_processor(aggregates=["bank.account"])
class StateWatcher:
    def __init__(self) -> None:
        self.states: list[Any] = []

    @on_state_event(body=Deposited)
    async def on_deposit_state(self, state: StateEvent[dict[str, int]]) -> None:
        self.states.append(state.state)


async def test_state_event_functions_run_once_per_state_event_that_holds_their_body_type() -> None:
    watcher = StateWatcher()
    h = await start(watcher)
    assert h.events.receivers == []
    [receiver] = h.states.receivers
    assert receiver.subscription.group == "bank.svc.DomainEventDispatcher"
    await h.states.send(StateEvent(stream(ACCOUNT, "a1", 1, Opened("ann")), {"balance": 0}))
    await h.states.send(StateEvent(stream(ACCOUNT, "a1", 2, Deposited(1), Deposited(2)), {"balance": 3}))
    await h.settle(2, h.states)
    assert watcher.states == [{"balance": 3}]
    assert len(h.states.acked) == 2
    assert [s.stage for s in h.notifier.signals] == [ProcessingStage.EVENT_HANDLED]
    await h.dispatch.stop(5)


async def test_the_snapshot_function_writes_and_acknowledges_its_state_event_even_when_recording_fails() -> (
    None
):
    saved: list[StateEvent[Any]] = []
    fail = {"on": False}

    async def saver(state_event: StateEvent[Any]) -> None:
        if fail["on"]:
            raise ConnectionError("repository down")
        saved.append(state_event)

    recorder = ScriptedRecorder(ConnectionError("ledger down"))
    h = await start(snapshot=saver, recorder=recorder)
    [receiver] = h.states.receivers
    assert receiver.subscription.group == "bank.svc.SnapshotDispatcher"
    first = StateEvent(stream(ACCOUNT, "a1", 1, Opened("ann")), {"balance": 0})
    await h.states.send(first)
    await h.settle(1, h.states)
    assert saved == [first]
    fail["on"] = True
    second = StateEvent(stream(ACCOUNT, "a1", 2, Deposited(1)), {"balance": 1})
    await h.states.send(second)
    await h.settle(2, h.states)
    assert h.states.acked == [first, second]  # acknowledged although recording failed
    await wait_until(
        lambda: h.metrics.counter_value(OUTCOMES_METRIC, component="snapshot", outcome="RECORDING_FAILED") > 0
    )
    assert [s.stage for s in h.notifier.signals] == [ProcessingStage.SNAPSHOT, ProcessingStage.SNAPSHOT]
    assert recorder.calls == 3  # no retry layer: a single attempt, then recording (retried)
    await h.dispatch.stop(5)


async def test_a_snapshot_failure_with_ack_on_unrecorded_off_logs_that_its_state_event_was_acknowledged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FAILURE_UNRECORDED with ack-on-unrecorded off withholds acknowledgement elsewhere; the
    snapshot function acknowledged its own state event, and the log says so, not "left
    unacknowledged"."""

    async def saver(state_event: StateEvent[Any]) -> None:
        raise ConnectionError("repository down")

    h = await start(snapshot=saver, ack_on_unrecorded_failure=False)
    failed = StateEvent(stream(ACCOUNT, "a1", 1, Opened("ann")), {"balance": 0})
    with caplog.at_level(logging.INFO, logger="wow.event.dispatcher"):
        await h.states.send(failed)
        await h.settle(1, h.states)
        await wait_until(
            lambda: (
                h.metrics.counter_value(OUTCOMES_METRIC, component="snapshot", outcome="FAILURE_UNRECORDED")
                > 0
            )
        )
    assert h.states.acked == [failed]
    dispatcher_lines = [r.getMessage() for r in caplog.records if r.name == "wow.event.dispatcher"]
    assert not any("left unacknowledged" in line for line in dispatcher_lines), dispatcher_lines
    assert any(
        "was acknowledged" in line and "not be delivered again" in line for line in dispatcher_lines
    ), dispatcher_lines
    await h.dispatch.stop(5)


async def test_stop_lets_in_flight_work_finish_and_takes_no_new_messages() -> None:
    gate = asyncio.Event()
    done: list[int] = []

    @projection(aggregates=["bank.account"])
    class Gated:
        @on_event
        async def deposited(self, event: Deposited) -> None:
            await asyncio.wait_for(gate.wait(), 5)
            done.append(event.amount)

    h = await start(Gated())
    await h.events.send(stream(ACCOUNT, "a1", 1, Deposited(1)))
    await wait_until(lambda: h.events.exchanges != [])
    stopping = asyncio.create_task(h.dispatch.stop(5))
    await wait_until(lambda: h.events.receivers[0]._stop.is_set())
    await h.events.send(stream(ACCOUNT, "a2", 1, Deposited(2)))
    gate.set()
    assert await stopping
    assert done == [1]
    assert len(h.events.acked) == 1


async def test_an_ack_failure_is_logged_and_the_exchange_released(caplog: pytest.LogCaptureFixture) -> None:
    h = await start(Ledger())
    h.events.fail_ack = True
    await h.events.send(stream(ACCOUNT, "a1", 1, Opened("ann")))
    await h.settle(1)
    assert h.events.acked == []
    assert "acknowledging" in caplog.text
    await h.dispatch.stop(5)


def test_sagas_need_a_command_sender_and_snapshots_a_saver() -> None:
    with pytest.raises(ValueError, match="command_sender"):
        build_event_dispatch(
            components=[TransferSaga()],
            settings=EventSettings(),
            service_name="svc",
            domain_event_bus=QueueBus(TopicKind.EVENT),  # type: ignore[arg-type]
            state_event_bus=QueueBus(TopicKind.STATE),  # type: ignore[arg-type]
            executor=KeyedExecutor(),
        )
    with pytest.raises(ValueError, match="snapshot_saver"):
        build_event_dispatch(
            components=[],
            settings=EventSettings(),
            service_name="svc",
            domain_event_bus=QueueBus(TopicKind.EVENT),  # type: ignore[arg-type]
            state_event_bus=QueueBus(TopicKind.STATE),  # type: ignore[arg-type]
            executor=KeyedExecutor(),
            snapshot_aggregates=[ACCOUNT],
        )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WOW_EVENT__ACK_ON_UNRECORDED_FAILURE", "maybe"),
        ("WOW_EVENT__RETRY__MAX_RETRIES", "-1"),
        ("WOW_EVENT__RETRY__MIN_BACKOFF", "soon"),
    ],
)
def test_a_wrong_event_setting_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    from wow_core.runtime.settings import SettingsError, WowSettings

    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=variable):
        WowSettings.load()


def test_event_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from wow_core.runtime.settings import WowSettings

    monkeypatch.setenv("WOW_EVENT__ACK_ON_UNRECORDED_FAILURE", "false")
    monkeypatch.setenv("WOW_EVENT__RETRY__MAX_RETRIES", "5")
    monkeypatch.setenv("WOW_EVENT__RETRY__MIN_BACKOFF", "0.5")
    event = WowSettings.load().event
    assert event.ack_on_unrecorded_failure is False
    assert (event.retry.max_retries, event.retry.min_backoff) == (5, 0.5)


@projection(aggregates=["bank.account"])
class Flaky:
    def __init__(self) -> None:
        self.errors = [ConnectionError("first"), ConnectionError("second"), ConnectionError("last")]

    @retry(enabled=False)
    @on_event
    async def deposited(self, event: Deposited) -> None:
        raise self.errors.pop(0)


async def test_the_recorder_gets_the_last_attempts_error_after_the_signal_was_emitted() -> None:
    recorder = ScriptedRecorder(RecordResult.RECORDED)
    signals_at_record: list[int] = []
    original = recorder.record_failure

    async def record_failure(failure: Any) -> RecordResult:
        signals_at_record.append(len(h.notifier.signals))
        return await original(failure)

    recorder.record_failure = record_failure  # type: ignore[method-assign]
    flaky = Flaky()
    h = await start(flaky, recorder=recorder)
    await h.events.send(stream(ACCOUNT, "a1", 1, Deposited(1)))
    await h.settle(1)
    [failure] = recorder.failures
    # retry(enabled=False) does not switch off immediate retry: 1 retry was made (settings)
    assert str(failure.error) == "second"
    assert len(flaky.errors) == 1  # "last" was never raised
    assert failure.attributes["attempts"] == "2"
    # recording happened after the failure signal went out
    assert signals_at_record == [1]
    assert h.notifier.signals[0].error is failure.error
    await h.dispatch.stop(5)


async def test_a_failing_receiver_is_reported_not_silently_dropped(caplog: pytest.LogCaptureFixture) -> None:
    h = await start(Ledger())
    [receiver] = h.events.receivers
    receiver.queue.put_nowait(None)  # not a message: the receiver's iteration fails on it
    await wait_until(lambda: "takes no more messages" in caplog.text)
    assert "AttributeError" in caplog.text
    await h.dispatch.stop(5)


async def test_a_recorder_answering_nonsense_is_a_recording_failure() -> None:
    class Nonsense:
        records_failures = True

        async def record_failure(self, failure: Any) -> Any:
            return None

        async def record_success(self, success: Any) -> None:
            return None

    handler = CollectingErrorHandler()
    h = await start(HalfBroken(), recorder=Nonsense(), error_handlers={ComponentKind.PROJECTION: handler})
    s = stream(ACCOUNT, "a1", 1, Opened("ann"))
    await h.events.send(s)
    await h.settle(1)
    assert h.events.acked == []
    assert h.metrics.counter_value(OUTCOMES_METRIC, outcome="RECORDING_FAILED") == 1
    [(_, error)] = handler.errors
    assert "not a RecordResult" in str(suppressed(error)[0])
    await h.dispatch.stop(5)


class _StopsWhenTheOtherStops:
    """A child whose stop finishes only once its sibling's stop has begun."""

    def __init__(self, mine: asyncio.Event, other: asyncio.Event) -> None:
        self.mine, self.other = mine, other

    async def stop(self, timeout: float | None = None) -> bool:
        self.mine.set()
        await self.other.wait()
        return True


async def test_a_composite_dispatcher_stops_its_children_at_once_within_one_timeout() -> None:
    from wow_core.event.dispatcher import CompositeEventDispatcher
    from wow_core.event.function import ComponentKind

    class Two(CompositeEventDispatcher):
        component = ComponentKind.PROJECTION

        def __init__(self, children: list[Any]) -> None:
            self._two = children

        @property
        def children(self) -> list[Any]:
            return self._two

    first, second = asyncio.Event(), asyncio.Event()
    composite = Two([_StopsWhenTheOtherStops(first, second), _StopsWhenTheOtherStops(second, first)])
    # One child after the other, the first would wait forever for the second to begin.
    assert await asyncio.wait_for(composite.stop(1.0), 10) is True
