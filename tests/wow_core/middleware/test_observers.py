"""Decisions inside local-first, the event pipeline and the decode-failure policy, as
middleware sees them: observers a middleware contributes, and the policy it decorates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dependency_injector import providers

from tests.accounts import Account, Deposit, Deposited, Open
from tests.wow_core.middleware.copies import keep_every_copy
from wow_core.event import event_processor, on_event
from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import ProcessingOutcome
from wow_core.event.observer import EventProcessingObserver
from wow_core.messaging.contract import MessageExchange
from wow_core.messaging.local_first import LocalFirstMessageBus, LocalFirstObserver, SendRoute
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import Middleware, undecorated
from wow_core.middleware.metrics import DECODE_FAILURES
from wow_core.model import Message, NamedAggregate, TopicKind
from wow_core.plugins import hookimpl, load_plugins
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually
from wow_core.transport import TransportMessage
from wow_core.transport.decode_failure import DefaultDecodeFailureHandler
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport

ACCOUNT = NamedAggregate("bank", "account")


@event_processor(context="bank", aggregates=["bank.account"])
class Ledger:
    def __init__(self) -> None:
        self.amounts: list[int] = []

    @on_event
    def deposited(self, event: Deposited) -> None:
        self.amounts.append(event.amount)
        if event.amount == 13:
            raise ValueError("unlucky")


class SeeingLocalFirst(LocalFirstObserver):
    def __init__(self, kind: TopicKind, seen: list[tuple[Any, ...]]) -> None:
        self.kind, self.seen = kind.value, seen

    def on_send(self, message: Message, route: SendRoute) -> None:
        self.seen.append((self.kind, "send", message.name, route))

    def on_filtered(self, exchange: MessageExchange[Any]) -> None:
        self.seen.append((self.kind, "filtered", exchange.message.name))

    def on_copy_sent(self, message: Message, local_first: bool) -> None:
        self.seen.append((self.kind, "copy_sent", message.name, local_first))

    def on_backlog(self, named_aggregate: NamedAggregate, backlog: int) -> None:
        self.seen.append((self.kind, "backlog", str(named_aggregate), backlog))


@dataclass
class Outcome:
    component: str
    function: str
    message: str
    outcome: ProcessingOutcome
    error: BaseException | None
    duration: float


class SeeingProcessing(EventProcessingObserver):
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def on_outcome(
        self,
        component: str,
        exchange: FunctionExchange,
        outcome: ProcessingOutcome,
        error: BaseException | None,
        duration: float,
    ) -> None:
        function = exchange.function
        self.outcomes.append(
            Outcome(component, function.qualified_name, exchange.message.name, outcome, error, duration)
        )


class Observing(Middleware):
    def __init__(self) -> None:
        self.local_first: list[tuple[Any, ...]] = []
        self.processing = SeeingProcessing()

    def observe_local_first(self, kind: TopicKind) -> LocalFirstObserver:
        return SeeingLocalFirst(kind, self.local_first)

    def observe_event_processing(self) -> EventProcessingObserver:
        return self.processing


class ObservingPlugin:
    def __init__(self) -> None:
        self.middleware = Observing()

    @hookimpl
    def register_middleware(self, register: Any) -> None:
        register("observing", lambda settings, metrics: self.middleware)


async def test_a_plugin_middleware_observes_local_first_and_event_processing() -> None:
    plugin = ObservingPlugin()
    container = create_container(WowSettings(), plugins=load_plugins(extra=[("observing", plugin)]))
    ledger = Ledger()
    runtime = build_runtime(WowApp("bank", aggregates=[Account], components=[ledger]), container=container)
    keep_every_copy(runtime)  # the copies go out and come back, as over a broker
    seen = plugin.middleware.local_first
    async with runtime:
        opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 1)), timeout=5)
        assert opened.aggregate_id is not None
        for amount in (2, 13):
            deposit = runtime.aggregates.command(Deposit(amount), opened.aggregate_id.id)
            await runtime.gateway.send_and_wait(deposit, timeout=5)

        async def every_copy_filtered() -> bool:
            # the command and the state copies come back on their own topics, in any order
            return (
                [e for e in seen if e[:2] == ("command", "filtered")]
                == [("command", "filtered", name) for name in ("Open", "Deposit", "Deposit")]
                and len([e for e in seen if e[:2] == ("state", "filtered")]) == 3
                and len(plugin.middleware.processing.outcomes) == 5
            )

        await eventually(every_copy_filtered, timeout=10, what="every command copy filtered, every outcome")

    def of(kind: str, hook: str) -> list[tuple[Any, ...]]:
        return [e[2:] for e in seen if e[:2] == (kind, hook)]

    assert of("command", "send") == [
        ("Open", SendRoute.HANDED_OFF),
        ("Deposit", SendRoute.HANDED_OFF),
        ("Deposit", SendRoute.HANDED_OFF),
    ]
    assert of("command", "copy_sent") == [("Open", True), ("Deposit", True), ("Deposit", True)]
    assert of("event", "send") == [
        ("Opened", SendRoute.HANDED_OFF),
        ("Deposited", SendRoute.HANDED_OFF),
        ("Deposited", SendRoute.HANDED_OFF),
    ], "each bus has its own observer"
    assert of("state", "filtered") == [("Opened",), ("Deposited",), ("Deposited",)]
    backlog = of("command", "backlog")
    assert backlog[0] == ("bank.account", 1)
    assert backlog[-1] == ("bank.account", 0)
    assert len(backlog) == 6, "every change: three copies queued, three sent"
    outcomes = plugin.middleware.processing.outcomes
    ledger_outcomes = [o for o in outcomes if o.component == "event_processor"]
    assert [(o.message, o.outcome) for o in ledger_outcomes] == [
        ("Deposited", ProcessingOutcome.HANDLED),
        ("Deposited", ProcessingOutcome.FAILURE_UNRECORDED),
    ]
    assert ledger_outcomes[0].function.endswith("Ledger.deposited")
    assert ledger_outcomes[0].error is None
    assert isinstance(ledger_outcomes[1].error, ValueError), "a failure comes with its error"
    assert all(o.duration >= 0 for o in outcomes)
    assert {o.component for o in outcomes} == {"event_processor", "snapshot"}


def test_without_observers_nothing_is_observed_and_no_clock_is_read() -> None:
    ledger = Ledger()
    runtime = WowApp("bank", aggregates=[Account], components=[ledger]).runtime(WowSettings())
    for bus in (runtime.command_bus, runtime.domain_event_bus, runtime.state_event_bus):
        assert isinstance(bus, LocalFirstMessageBus)
        assert bus.observer is None
        assert bus.copies.observer is None
    assert runtime.event_dispatch is not None
    for dispatcher in runtime.event_dispatch.dispatchers:
        assert dispatcher.observer is None
        assert dispatcher.handler.observer is None


async def test_two_runtimes_sharing_one_decode_failure_policy_count_their_own_failures() -> None:
    """The policy is decorated, not patched: the first runtime's metrics never take the
    second runtime's failures."""
    shared = DefaultDecodeFailureHandler()
    runtimes, all_metrics = [], []
    for _ in range(2):
        container = create_container(WowSettings(metrics="in_memory"))
        container.decode_failure_handler.override(providers.Object(shared))
        container.transport.override(providers.Object(InMemoryTransport(broker=InMemoryBroker())))
        runtimes.append(build_runtime(WowApp("bank", aggregates=[Account]), container=container))
        metrics = container.metrics()
        assert isinstance(metrics, InMemoryMetrics)
        all_metrics.append(metrics)
    for runtime, metrics in zip(runtimes, all_metrics, strict=True):
        async with runtime:
            assert runtime.transport is not None
            topic = undecorated(runtime.command_bus).distributed_bus.topic(ACCOUNT)
            await runtime.transport.send(TransportMessage(topic, "a-1", b"not json", 0))

            async def counted(metrics: InMemoryMetrics = metrics) -> bool:
                return metrics.counter_value(DECODE_FAILURES) >= 1

            await eventually(counted, timeout=10, what="the decode failure to be counted")
    counts = [m.counter_value(DECODE_FAILURES, transport="in_memory", kind="not_json") for m in all_metrics]
    assert counts == [1, 1]
    assert not hasattr(shared, "metrics"), "the shared policy itself counts nothing"
