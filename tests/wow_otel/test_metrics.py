"""Metrics by the OpenTelemetry conventions, read back with the SDK's in-memory reader.

``WOW_METRICS=otel`` on the embedded default (local-first buses over the in-memory
transport): the buses count sends, hand-offs and receives (``messaging.*``), the
command handler, the event store and the gateway record their durations and outcomes,
the core's ``wow.*`` counters and the backlog gauge reach OpenTelemetry too. Attributes
are bounded: never an aggregate id.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dependency_injector import providers

from tests.accounts import ACCOUNT, Account, Deposit, Open, Withdraw
from tests.wow_core.messaging.local_first.local_first_doubles import (
    ControlledLocalBus,
    RecordingDistributedBus,
)
from tests.wow_core.messaging.local_first.local_first_doubles import command as local_command
from tests.wow_core.middleware.copies import keep_every_copy
from tests.wow_core.middleware.test_metric_counts import ConflictOnce
from tests.wow_otel.apps import Balances
from wow_core.command import CommandWait
from wow_core.messaging.local_first import LocalFirstCommandBus
from wow_core.messaging.local_first.observer import LocalFirstObserver, combine_observers
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import MetricCommandHandler, MetricsMiddleware, decorate_event_store, undecorated
from wow_core.model import NamedAggregate, TopicKind
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime, in_process_buses
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import LocalFirstSettings, WowSettings
from wow_core.testing import eventually
from wow_otel.metrics import OtelMetrics
from wow_otel.middleware import OtelMiddleware, TracingCommandHandler
from wow_otel.testing import OtelCapture

COMMANDS = "wow.bank.account.command"


def series(otel: OtelCapture, name: str) -> list[dict[str, Any]]:
    """The attribute set of every data point of ``name``."""
    return [dict(point.attributes) for point in otel.metric_points(name)]


def value(otel: OtelCapture, name: str, **attributes: Any) -> float:
    """The sum of the counts (counters) or the count (histograms) of the matching points."""
    total = 0.0
    for point in otel.metric_points(name):
        if attributes.items() <= dict(point.attributes).items():
            total += point.count if hasattr(point, "count") else point.value
    return total


async def test_ten_thousand_aggregate_ids_make_a_bounded_set_of_series(otel: OtelCapture) -> None:
    """Void commands (sent through the transport, received, dropped before the kernel)
    to 10,000 accounts, and 200 processed ones: the series stay a handful."""
    runtime = WowApp("bank", aggregates=[Account]).runtime(WowSettings(metrics="otel"))
    keep_every_copy(runtime)  # the copies go out and come back, as over a broker
    ids = [f"acc-{n}" for n in range(10_000)]
    async with runtime:
        for start in range(0, len(ids), 1000):
            await asyncio.gather(
                *(
                    runtime.gateway.send(runtime.aggregates.command(Deposit(1), key, is_void=True))
                    for key in ids[start : start + 1000]
                )
            )
        processed = await asyncio.gather(
            *(runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada"))) for _ in range(200))
        )

        async def all_dropped() -> bool:
            return runtime.command_dispatcher.void_dropped == len(ids)

        await eventually(all_dropped, timeout=30)
        await runtime.command_bus.copies.flush(10)
    ids += [r.aggregate_id.id for r in processed if r.aggregate_id is not None]
    assert len(set(ids)) == 10_200

    sent = series(otel, "messaging.client.sent.messages")
    assert value(otel, "messaging.client.sent.messages", **{"wow.message": "Deposit"}) == 10_000
    assert value(
        otel, "messaging.client.consumed.messages", **{"messaging.consumer.group.name": "bank.command"}
    ) == (10_000 + 2 * 200), "each Void command received once; each processed one locally and as its copy"
    assert {
        (s["messaging.system"], s["messaging.operation.name"], s["wow.message.kind"], s["wow.message"])
        for s in sent
    } == {
        ("in_memory", "send", "command", "Deposit"),  # Void: never handed off
        ("wow_local", "hand_off", "command", "Open"),
        ("in_memory", "send", "command", "Open"),  # its distributed copy
        ("wow_local", "hand_off", "state", "Opened"),
        ("in_memory", "send", "state", "Opened"),
        ("in_memory", "send", "event", "Opened"),  # no local receiver: sent distributed
    }
    names = [
        "messaging.client.sent.messages",
        "messaging.client.operation.duration",
        "messaging.client.consumed.messages",
        "messaging.process.duration",
        "wow.command.waits",
        "wow.command.wait.duration",
        "wow.eventstore.operation.duration",
        "wow.processing.outcomes",
        "wow.local_first.copies.sent",
    ]
    counts = {name: len(series(otel, name)) for name in names}
    assert all(0 < count <= 6 for count in counts.values()), counts
    values = {str(v) for name in names for attributes in series(otel, name) for v in attributes.values()}
    assert not values & set(ids), "an aggregate id became an attribute value"


async def test_the_handler_the_store_and_the_gateway_record_their_outcomes(otel: OtelCapture) -> None:
    container = create_container(WowSettings(metrics="otel"))
    store = decorate_event_store(container.middleware(), ConflictOnce(version=2))
    container.event_store.override(providers.Object(store))
    runtime = build_runtime(WowApp("bank", aggregates=[Account], components=[Balances]), container=container)
    async with runtime:
        gateway = runtime.gateway
        opened = await gateway.send_and_wait(runtime.aggregates.command(Open("ada")), CommandWait.projected())
        assert opened.aggregate_id is not None
        account = opened.aggregate_id.id
        await gateway.send_and_wait(
            runtime.aggregates.command(Deposit(1), account)
        )  # conflict, decided again
        rejected = await gateway.send_and_wait(runtime.aggregates.command(Withdraw(99), account))
        assert rejected.error_code == "INSUFFICIENT_FUNDS"
        await runtime.command_bus.copies.flush(5)

    process = {
        (s["wow.message"], s["wow.outcome"])
        for s in series(otel, "messaging.process.duration")
        if s["messaging.destination.name"] == COMMANDS
    }
    assert process == {("Open", "succeeded"), ("Deposit", "succeeded"), ("Withdraw", "INSUFFICIENT_FUNDS")}
    projected = [
        s for s in series(otel, "messaging.process.duration") if s.get("wow.processor") == "Balances"
    ]
    assert projected == [
        {
            "messaging.system": "in_memory",
            "messaging.destination.name": "wow.bank.account.event",
            "messaging.operation.name": "process",
            "wow.processor": "Balances",
            "wow.function": "on_opened",
            "wow.outcome": "HANDLED",
        }
    ], "the few attributes a duration needs (the SDK's histogram pays per attribute)"
    store = {
        (s["wow.eventstore.operation"], s["wow.outcome"])
        for s in series(otel, "wow.eventstore.operation.duration")
    }
    assert ("append", "ok") in store
    assert ("append", "conflict") in store
    assert ("load", "ok") in store
    assert value(otel, "wow.eventstore.conflicts") == 1
    assert value(otel, "wow.eventstore.operation.duration", **{"wow.outcome": "conflict"}) == 1

    waits = {
        (s["wow.message"], s["wow.command.wait.stage"], s["wow.command.stage"], s["wow.outcome"])
        for s in series(otel, "wow.command.waits")
    }
    assert waits == {
        ("Open", "PROJECTED", "PROJECTED", "succeeded"),
        ("Deposit", "PROCESSED", "PROCESSED", "succeeded"),
        ("Withdraw", "PROCESSED", "PROCESSED", "INSUFFICIENT_FUNDS"),
    }
    (duration,) = [
        p for p in otel.metric_points("wow.command.wait.duration") if p.attributes["wow.message"] == "Open"
    ]
    assert duration.count == 1
    assert 0 < duration.sum < 5

    # the core's wow.* metrics reach OpenTelemetry through the otel backend
    assert value(otel, "wow.command.rejections", code="INSUFFICIENT_FUNDS") == 1
    assert value(otel, "wow.command.version_conflicts") == 1
    outcomes = series(otel, "wow.processing.outcomes")
    assert {
        "component": "projection",
        "context": "bank",
        "aggregate": "account",
        "message": "Opened",
        "processor": "Balances",
        "outcome": "HANDLED",
    } in outcomes
    names = otel.metric_names()
    assert "wow.local_first.backlog" in names
    assert "wow.bus.sent" not in names, "counted once, as messaging.client.sent.messages"
    assert "wow.bus.received" not in names


async def test_the_backlog_is_an_observable_gauge_of_the_copies_waiting(otel: OtelCapture) -> None:
    metrics = OtelMetrics(otel.meter_provider.get_meter("test"), max_gauge_series=2)
    metrics.gauge("wow.local_first.backlog", 5, {"bus": "command", "aggregate": "bank.account"})
    metrics.gauge("wow.local_first.backlog", 2, {"bus": "command", "aggregate": "bank.account"})
    metrics.gauge("wow.local_first.backlog", 7, {"bus": "event", "aggregate": "bank.account"})
    metrics.gauge("wow.local_first.backlog", 9, {"bus": "state", "aggregate": "bank.account"})
    points = {
        tuple(sorted(p.attributes.items())): p.value for p in otel.metric_points("wow.local_first.backlog")
    }
    assert points == {
        (("aggregate", "bank.account"), ("bus", "command")): 2,
        (("aggregate", "bank.account"), ("bus", "event")): 7,
        (("otel.metric.overflow", "true"),): 9,
    }
    metrics.gauge("wow.local_first.backlog", 0, {"bus": "command", "aggregate": "bank.account"})
    assert [
        p.value for p in otel.metric_points("wow.local_first.backlog") if p.attributes.get("bus") == "command"
    ] == [0], "read at each collection"


async def test_in_process_buses_are_counted_and_traced_as_local_buses(
    otel: OtelCapture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOW_OTEL__TRACING", "true")
    container = create_container(WowSettings(metrics="otel"))
    in_process_buses(container)
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    async with runtime:
        await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada")))
    assert value(otel, "messaging.client.sent.messages", **{"messaging.system": "wow_local"}) == 3
    assert value(otel, "messaging.client.consumed.messages", **{"messaging.system": "wow_local"}) == 2
    (send,) = [s for s in otel.spans() if s.name == f"send {COMMANDS}"]
    (process,) = [s for s in otel.spans() if s.name == f"process {COMMANDS}"]
    assert process.parent is not None
    assert process.parent.span_id == send.get_span_context().span_id


def test_metrics_off_with_tracing_off_installs_no_middleware(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_OTEL__METRICS", "false")
    with OtelCapture():
        off = create_container(WowSettings(metrics="otel")).middleware()
        assert not [m for m in off if isinstance(m, OtelMiddleware)]
        assert not [m for m in create_container(WowSettings()).middleware() if isinstance(m, OtelMiddleware)]
        monkeypatch.setenv("WOW_OTEL__TRACING", "true")
        (on,) = [m for m in create_container(WowSettings()).middleware() if isinstance(m, OtelMiddleware)]
        assert on.tracer is not None
        assert on.instruments is None, "tracing only: the metrics backend is not otel"


async def test_the_cluster_intakes_counters_reach_opentelemetry(otel: OtelCapture) -> None:
    from wow_core.cluster import CommandReceipt, CommandWire, ReplyTo
    from wow_core.model import CommandMessage, now_ms
    from wow_core.transport import InMemoryTransport, TransportMessage

    settings = WowSettings(metrics="otel", cluster={"intake": {"enabled": True}})
    runtime = WowApp("bank", aggregates=[Account]).runtime(settings)
    [intake] = runtime.intakes
    transport = runtime.transport
    assert isinstance(transport, InMemoryTransport)
    async with runtime:
        reader = InMemoryTransport(broker=transport.broker)
        receipts = reader.open("orders", ["wow.orders.receipts"])
        receipts.open_processing()
        message = CommandMessage(runtime.aggregates.command(Open("ot")).aggregate_id, Open("ot"), "Open")
        payload = CommandWire(message, ReplyTo("orders", committed=True)).encode(intake.registry)
        await transport.send(TransportMessage(intake.topic, message.aggregate_id.id, payload, now_ms()))
        record = await asyncio.wait_for(anext(aiter(receipts)), 10)
        assert CommandReceipt.decode(record.payload).committed
        await reader.close()
    assert value(otel, "wow.intake.received", intake="bank.intake") == 1
    assert value(otel, "wow.intake.settled", intake="bank.intake", outcome="committed") == 1
    assert series(otel, "wow.intake.lane_depth") == [{"intake": "bank.intake"}]


async def test_counters_of_fresh_tag_dicts_are_counted_by_their_content(otel: OtelCapture) -> None:
    """The facade finds a kept dict's sorted tags by its identity; a dict made per call
    (``{"code": ...}``) is counted by its content, never under another dict's tags."""
    metrics = OtelMetrics(otel.meter_provider.get_meter("test"))
    kept = {"bus": "command", "aggregate": "bank.account"}
    for n in range(300):
        metrics.increment("wow.command.rejections", 1, {"code": f"E{n % 3}"})
        metrics.increment("wow.local_first.sends", 1, kept)
        metrics.increment("wow.local_first.sends", 1, {"aggregate": "bank.account", "bus": "command"})
    assert {p.attributes["code"]: p.value for p in otel.metric_points("wow.command.rejections")} == {
        "E0": 100,
        "E1": 100,
        "E2": 100,
    }
    (sends,) = otel.metric_points("wow.local_first.sends")
    assert sends.value == 600, "one set of tags in two orders is one series"


async def test_one_handler_decorator_counts_the_core_outcomes_too(otel: OtelCapture) -> None:
    """With the otel backend the core's metrics middleware leaves the command handler to
    the otel one: one decorator per command, each outcome counted once."""
    runtime = WowApp("bank", aggregates=[Account]).runtime(WowSettings(metrics="otel"))
    handler = runtime.kernel
    assert isinstance(handler, TracingCommandHandler)
    assert not isinstance(handler.inner, MetricCommandHandler)
    assert undecorated(handler) is handler.inner, "one decorator, over the kernel itself"
    async with runtime:
        opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada")))
        assert opened.aggregate_id is not None
        account = opened.aggregate_id.id
        for _ in range(2):
            rejected = await runtime.gateway.send_and_wait(runtime.aggregates.command(Withdraw(99), account))
            assert rejected.error_code == "INSUFFICIENT_FUNDS"
        for _ in range(3):
            await runtime.gateway.send(runtime.aggregates.command(Deposit(1), account, is_void=True))

        async def all_dropped() -> bool:
            return runtime.command_dispatcher.void_dropped == 3

        await eventually(all_dropped, timeout=10)
    assert value(otel, "wow.command.rejections", code="INSUFFICIENT_FUNDS") == 2
    assert value(otel, "wow.command.void_dropped") == 3
    assert "wow.command.duplicates" not in otel.metric_names(), "a series appears at its first count"


async def test_bound_series_appear_at_their_first_value_and_overflow_past_the_limit(
    otel: OtelCapture,
) -> None:
    metrics = OtelMetrics(otel.meter_provider.get_meter("test"), max_counter_series=2, max_gauge_series=1)
    sends = [
        metrics.bind_counter("wow.local_first.sends", {"bus": "command", "outcome": f"r{n}"})
        for n in range(3)
    ]
    backlogs = [metrics.bind_gauge("wow.local_first.backlog", {"aggregate": f"a{n}"}) for n in range(2)]
    assert otel.metric_points("wow.local_first.sends") == []
    assert otel.metric_points("wow.local_first.backlog") == []
    for n, add in enumerate(sends):
        add(n + 1.0)
    metrics.increment("wow.local_first.sends", 5, {"outcome": "r0", "bus": "command"})
    assert {
        p.attributes.get("outcome", "overflow"): p.value for p in otel.metric_points("wow.local_first.sends")
    } == {
        "r0": 6,
        "r1": 2,
        "overflow": 3,
    }
    backlogs[0](4)
    backlogs[1](7)
    backlogs[0](2)
    assert {
        tuple(sorted(p.attributes.items())): p.value for p in otel.metric_points("wow.local_first.backlog")
    } == {(("aggregate", "a0"),): 2, (("otel.metric.overflow", "true"),): 7}
    metrics.gauge("wow.local_first.backlog", 1, {"aggregate": "a0"})
    rebound = metrics.bind_gauge("wow.local_first.backlog", {"aggregate": "a0"})
    rebound(9)
    assert [
        p.value
        for p in otel.metric_points("wow.local_first.backlog")
        if p.attributes.get("aggregate") == "a0"
    ] == [9]


class _TellingObserver(LocalFirstObserver):
    """Told each backlog change (an observer that does not read the backlog itself)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, int]] = []

    def on_backlog(self, named_aggregate: NamedAggregate, backlog: int) -> None:
        self.told.append((str(named_aggregate), backlog))


async def test_the_backlog_gauge_is_read_at_collection_not_reported_per_change(otel: OtelCapture) -> None:
    """With the otel backend the local-first bus reports no backlog change: the gauge reads
    the copies waiting when the SDK collects (zero once they are sent, for an aggregate
    type met). Another observer of the same bus is still told each change."""
    metrics = OtelMetrics(otel.meter_provider.get_meter("test"))
    metric_observer = MetricsMiddleware(metrics).observe_local_first(TopicKind.COMMAND)
    assert metric_observer is not None
    telling = _TellingObserver()
    reported: list[int] = []
    metric_observer.on_backlog = lambda named, backlog: reported.append(backlog)  # type: ignore[method-assign]
    local, distributed = ControlledLocalBus(), RecordingDistributedBus()
    bus = LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        settings=LocalFirstSettings(),
        observer=combine_observers([metric_observer, telling]),
    )

    def backlog() -> dict[tuple[tuple[str, Any], ...], float]:
        points = otel.metric_points("wow.local_first.backlog")
        return {tuple(sorted(p.attributes.items())): p.value for p in points}

    for n in range(3):
        await bus.send(local_command(f"a{n}"))
    assert bus.copies.backlog() == 3
    assert backlog() == {(("aggregate", "shop.order"), ("bus", "command")): 3}
    assert reported == [], "the otel observer is not told each change"
    assert telling.told == [("shop.order", 1), ("shop.order", 2), ("shop.order", 3)]
    for delivery in list(local.deliveries):
        local.admit(delivery)
    await bus.copies.join()
    assert backlog() == {(("aggregate", "shop.order"), ("bus", "command")): 0}
    assert telling.told[-1] == ("shop.order", 0)
    await bus.close()


def test_another_backend_is_told_each_backlog_change() -> None:
    """A backend without ``observe_gauge`` (the in-memory one) is given each value."""
    metrics = InMemoryMetrics()
    observer = MetricsMiddleware(metrics).observe_local_first(TopicKind.COMMAND)
    assert observer is not None
    assert observer.reads_backlog(dict) is False
    observer.on_backlog(NamedAggregate("shop", "order"), 4)
    assert metrics.gauge_value("wow.local_first.backlog", bus="command", aggregate="shop.order") == 4


async def test_local_bus_hand_offs_and_receives_are_read_from_the_in_memory_bus(otel: OtelCapture) -> None:
    """Over the in-memory bus the decorator's ``hand_off`` is the bus's own (no frame of
    its own) and its receivers count themselves: the counts are read at collection, the
    same values as a decorator counting each one; over another bus it counts them."""
    from wow_core.messaging import MessageSubscription
    from wow_core.messaging.in_memory import InMemoryCommandBus
    from wow_core.model import AggregateId, CommandMessage
    from wow_otel.middleware import TracingLocalMessageBus

    middleware = OtelMiddleware(tracer=None, meter=otel.meter_provider.get_meter("test"))
    inner = InMemoryCommandBus()
    bus = TracingLocalMessageBus(inner, middleware, "wow_local", lambda: True)
    assert bus.hand_off == inner.hand_off
    assert inner.count_hand_offs() is None, "the decorator holds the bus's counter"
    receiver = bus.receiver(MessageSubscription.of("bank.command", (ACCOUNT,), runtime_owned=True))
    receiver.open_processing()
    for n in range(3):
        assert bus.hand_off(CommandMessage(AggregateId(ACCOUNT, f"a{n}"), Open("x"), "Open")).accepted
    for _ in range(3):
        await (await anext(receiver)).ack()
    attributes = {
        "messaging.operation.name": "hand_off",
        "wow.message": "Open",
        "messaging.system": "wow_local",
    }
    assert value(otel, "messaging.client.sent.messages", **attributes) == 3
    consumed = {"messaging.consumer.group.name": "bank.command", "messaging.system": "wow_local"}
    assert value(otel, "messaging.client.consumed.messages", **consumed) == 3
    # a bus whose counter was taken already: the decorator counts each hand-off itself
    taken = InMemoryCommandBus()
    assert taken.count_hand_offs() == {}
    second = TracingLocalMessageBus(taken, middleware, "other", lambda: True)
    assert second.hand_off != taken.hand_off
    other = taken.receiver(MessageSubscription.of("bank.command", (ACCOUNT,), runtime_owned=True))
    other.open_processing()
    assert second.hand_off(CommandMessage(AggregateId(ACCOUNT, "a9"), Open("x"), "Open")).accepted
    assert value(otel, "messaging.client.sent.messages", **{**attributes, "messaging.system": "other"}) == 1
    assert value(otel, "messaging.client.sent.messages", **attributes) == 3
    await taken.close()
    await inner.close()


async def test_local_first_sends_are_read_at_collection_with_the_otel_backend(otel: OtelCapture) -> None:
    """``wow.local_first.sends``: with the otel backend the observer keeps plain totals
    the counter reads when the SDK collects, added to what ``increment`` counted under the
    same tags; the in-memory backend is told each send."""
    from wow_core.messaging.local_first.observer import SendRoute

    metrics = OtelMetrics(otel.meter_provider.get_meter("test"))
    observer = MetricsMiddleware(metrics).observe_local_first(TopicKind.COMMAND)
    assert observer is not None
    for route in (SendRoute.HANDED_OFF, SendRoute.HANDED_OFF, SendRoute.REMOTE):
        observer.on_send(local_command(), route)
    metrics.increment("wow.local_first.sends", tags={"bus": "command", "outcome": "handed_off"})
    assert value(otel, "wow.local_first.sends", outcome="handed_off", bus="command") == 3
    assert value(otel, "wow.local_first.sends", outcome="remote") == 1
    assert {s["outcome"] for s in series(otel, "wow.local_first.sends")} == {"handed_off", "remote"}

    in_memory = InMemoryMetrics()
    told = MetricsMiddleware(in_memory).observe_local_first(TopicKind.COMMAND)
    assert told is not None
    told.on_send(local_command(), SendRoute.REFUSED)
    assert in_memory.counter_value("wow.local_first.sends", bus="command", outcome="refused") == 1
