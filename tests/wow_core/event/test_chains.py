"""The chains: Notifier -> RetryableFilter -> FunctionFilter, and the snapshot chain."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.accounts import ACCOUNT, Opened
from tests.wow_core.event.support import (
    QueueBus,
    RecordingNotifier,
    no_sleep,
    stream,
)
from wow_core.event import (
    ComponentKind,
    ErrorClassifier,
    FunctionExchange,
    Next,
    ProcessingStage,
    Recoverability,
    RecoverableError,
    on_event,
    order,
    projection,
)
from wow_core.event.declare import parse_component
from wow_core.event.filter import FilterChainBuilder
from wow_core.event.function import MessageFunction
from wow_core.event.function_filter import FunctionFilter
from wow_core.event.notifier import notifier_filters
from wow_core.event.retryable import RetryableFilter
from wow_core.event.snapshot import SnapshotFunctionFilter, snapshot_functions
from wow_core.messaging.contract import EventStreamExchange, StateEventExchange
from wow_core.model import StateEvent, TopicKind


class Flaky:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.calls = 0

    async def __call__(self, body: Any) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def function_of(invoker: Any, component: ComponentKind = ComponentKind.PROJECTION) -> MessageFunction:
    @projection(aggregates=["bank.account"])
    class P:
        @on_event
        async def on_opened(self, event: Opened) -> Any:
            return await invoker(event)

    [function] = parse_component(P(), default_context="bank")
    if component is not ComponentKind.PROJECTION:
        import dataclasses

        function = dataclasses.replace(function, component=component)
    return function


def exchange_of(
    function: MessageFunction, component: ComponentKind = ComponentKind.PROJECTION
) -> FunctionExchange:
    s = stream(ACCOUNT, "a1", 1, Opened("ann"))
    return FunctionExchange(component, EventStreamExchange(s), s.events[0], function)


def chain(
    kind: ComponentKind, *extra: Any, notifier: Any = None, sleep: Any = no_sleep, retries: int = 3
) -> Any:
    builder = FilterChainBuilder(notifier_filters(notifier or RecordingNotifier()))
    builder.add(RetryableFilter(retries, 2.0, sleep=sleep))
    builder.add(FunctionFilter())
    builder.add(SnapshotFunctionFilter())
    for item in extra:
        builder.add(item)
    return builder.build(kind, f"test.{kind.value}")


def test_the_critical_orders_of_the_four_chains() -> None:
    assert chain(ComponentKind.EVENT_PROCESSOR).names == [
        "EventHandledNotifierFilter",
        "RetryableFilter",
        "FunctionFilter",
    ]
    assert chain(ComponentKind.STATELESS_SAGA).names == [
        "SagaHandledNotifierFilter",
        "RetryableFilter",
        "FunctionFilter",
    ]
    assert chain(ComponentKind.PROJECTION).names == [
        "ProjectedNotifierFilter",
        "RetryableFilter",
        "FunctionFilter",
    ]
    assert chain(ComponentKind.SNAPSHOT).names == ["SnapshotNotifierFilter", "SnapshotFunctionFilter"]


async def test_filters_enter_left_to_right_and_observe_completion_right_to_left() -> None:
    trace: list[str] = []

    def tracer(label: str, value: int) -> Any:
        @order(value, after=["ProjectedNotifierFilter"], before=["FunctionFilter"])
        class Tracer:
            name = label

            async def filter(self, exchange: FunctionExchange, next: Next) -> None:
                trace.append(f"enter {label}")
                await next(exchange)
                trace.append(f"leave {label}")

        return Tracer()

    built = chain(ComponentKind.PROJECTION, tracer("T1", 1), tracer("T2", 2))
    flaky = Flaky([])
    await built.invoke(exchange_of(function_of(flaky)))
    assert trace == ["enter T1", "enter T2", "leave T2", "leave T1"]


@pytest.mark.parametrize(
    ("kind", "stage"),
    [
        (ComponentKind.EVENT_PROCESSOR, ProcessingStage.EVENT_HANDLED),
        (ComponentKind.STATELESS_SAGA, ProcessingStage.SAGA_HANDLED),
        (ComponentKind.PROJECTION, ProcessingStage.PROJECTED),
    ],
)
async def test_the_notifier_signals_its_stage_on_success_and_on_failure(
    kind: ComponentKind, stage: ProcessingStage
) -> None:
    notifier = RecordingNotifier()
    built = chain(kind, notifier=notifier)
    ok = exchange_of(function_of(Flaky([]), kind), kind)
    await built.invoke(ok)
    failing = exchange_of(function_of(Flaky([ValueError("no")]), kind), kind)
    with pytest.raises(ValueError, match="no"):
        await built.invoke(failing)
    [success, failure] = notifier.signals
    assert success.stage is stage
    assert success.succeeded
    assert success.result == "done"
    assert success.command_id == "cmd-a1-1"
    assert success.is_last
    assert success.aggregate_version == 1
    assert success.function.function_name == "on_opened"
    assert success.function.processor_name == "P"
    assert failure.stage is stage
    assert isinstance(failure.error, ValueError)


async def test_the_notifier_signals_only_after_retries_are_exhausted() -> None:
    notifier = RecordingNotifier()
    flaky = Flaky([TimeoutError("t1"), TimeoutError("t2"), TimeoutError("t3"), TimeoutError("t4")])
    with pytest.raises(TimeoutError, match="t4"):
        await chain(ComponentKind.PROJECTION, notifier=notifier).invoke(exchange_of(function_of(flaky)))
    assert flaky.calls == 4
    [signal] = notifier.signals
    assert str(signal.error) == "t4"


class BrokenNotifier:
    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.failed = asyncio.Event()

    def notify(self, signal: Any) -> Any:
        if self.sync:
            raise RuntimeError("coordinator down")

        async def deliver() -> None:
            self.failed.set()
            raise RuntimeError("coordinator down later")

        return deliver()


@pytest.mark.parametrize("sync", [True, False])
async def test_a_notification_failure_is_logged_and_changes_nothing(
    sync: bool, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = BrokenNotifier(sync)
    built = chain(ComponentKind.PROJECTION, notifier=notifier)
    exchange = exchange_of(function_of(Flaky([])))
    await built.invoke(exchange)
    assert exchange.result == "done"
    with pytest.raises(KeyError):
        await built.invoke(exchange_of(function_of(Flaky([KeyError("k")]))))
    if not sync:
        await asyncio.wait_for(notifier.failed.wait(), 5)
        await asyncio.sleep(0)
    assert "notification" in caplog.text
    assert "failed" in caplog.text


async def test_retry_retries_recoverable_errors_three_times_with_a_two_second_minimum_backoff() -> None:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    flaky = Flaky([ConnectionError("c1"), TimeoutError("t2"), RecoverableError("r3")])
    exchange = exchange_of(function_of(flaky))
    await chain(ComponentKind.PROJECTION, sleep=sleep).invoke(exchange)
    assert flaky.calls == 4
    assert exchange.attempts == 4
    assert exchange.result == "done"
    assert len(delays) == 3
    assert all(delay >= 2.0 for delay in delays)
    assert delays[1] >= 4.0
    assert delays[2] >= 8.0


async def test_retry_does_not_retry_unrecoverable_or_unknown_errors() -> None:
    flaky = Flaky([ValueError("bad input")])
    with pytest.raises(ValueError, match="bad input"):
        await chain(ComponentKind.PROJECTION).invoke(exchange_of(function_of(flaky)))
    assert flaky.calls == 1


async def test_the_last_error_goes_outward_unchanged() -> None:
    last = ConnectionError("last")
    flaky = Flaky([ConnectionError("1"), ConnectionError("2"), ConnectionError("3"), last])
    with pytest.raises(ConnectionError) as caught:
        await chain(ComponentKind.PROJECTION).invoke(exchange_of(function_of(flaky)))
    assert caught.value is last


async def test_the_classifier_is_extensible() -> None:
    class Throttled(Exception):
        pass

    classifier = ErrorClassifier().register(Throttled, Recoverability.RECOVERABLE)
    classifier.add_rule(lambda e: Recoverability.UNRECOVERABLE if "fatal" in str(e) else None)
    assert classifier.is_recoverable(Throttled())
    assert not classifier.is_recoverable(TimeoutError("fatal timeout"))
    assert classifier.classify(ValueError()) is Recoverability.UNKNOWN

    class Marked(Exception):
        recoverable = False

    assert classifier.classify(Marked()) is Recoverability.UNRECOVERABLE

    builder = FilterChainBuilder(
        [RetryableFilter(2, 0.0, classifier=classifier, sleep=no_sleep), FunctionFilter()]
    )
    flaky = Flaky([Throttled(), Throttled()])
    await builder.build(ComponentKind.PROJECTION, "p").invoke(exchange_of(function_of(flaky)))
    assert flaky.calls == 3


def test_retry_settings_are_validated_and_backoff_never_below_the_minimum() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RetryableFilter(-1)
    retry = RetryableFilter(10, 2.0, max_backoff=5.0)
    assert all(retry.backoff(n) >= 2.0 for n in range(1, 11))
    assert retry.backoff(10) <= 5.0 * 1.5


async def test_the_snapshot_chain_has_no_retry_and_acknowledges_its_own_state_event() -> None:
    bus = QueueBus(TopicKind.STATE)
    calls = 0

    async def saver(state_event: StateEvent[Any]) -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("repository down")

    [function] = snapshot_functions("bank", [ACCOUNT], saver)
    s = stream(ACCOUNT, "a1", 1, Opened("ann"))
    acked: list[str] = []

    async def on_ack() -> None:
        acked.append("ack")

    source = StateEventExchange(StateEvent(s, {}), on_ack)
    notifier = RecordingNotifier()
    built = chain(ComponentKind.SNAPSHOT, notifier=notifier)
    with pytest.raises(ConnectionError):
        await built.invoke(FunctionExchange(ComponentKind.SNAPSHOT, source, source.message, function))
    assert calls == 1
    assert source.acked
    assert acked == ["ack"]
    assert notifier.signals[0].stage is ProcessingStage.SNAPSHOT
    assert notifier.signals[0].error is not None
    assert bus.receivers == []
