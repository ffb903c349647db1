"""End to end: the bank example's stages on the embedded runtime, and a failing
projection's outcomes and acknowledgements over transports with real acknowledgement
(the in-memory transport, and NATS JetStream on 127.0.0.1:4222 when it runs).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from dependency_injector import providers
from examples.bank.app import app as bank_app
from examples.bank.domain import (
    Account,
    AccountOpened,
    CompleteTransfer,
    Deposit,
    MoneyDeposited,
    OpenAccount,
    PrepareTransfer,
    Withdraw,
)
from examples.bank.processor import LargeMovementAudit
from examples.bank.projection import BankSummary
from examples.bank.saga import NOTICE

from tests.wow_core.event.support import ScriptedRecorder, wait_until
from wow_core.command import CommandWait
from wow_core.command.stages import ErrorCodes
from wow_core.event import EventDispatchOptions, RecordResult, on_event, projection
from wow_core.event.failure import NONE_RECORDER, FailureRecorder
from wow_core.eventsourcing import EventStore, InMemoryEventStore
from wow_core.messaging.in_memory import InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.messaging.local_first import LocalFirstDomainEventBus, LocalFirstStateEventBus
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import BusLayer, MetricsMiddleware
from wow_core.middleware.metrics import PROCESSING_OUTCOMES as OUTCOMES_METRIC
from wow_core.model import AggregateId, TopicKind
from wow_core.plugins import hookimpl, load_plugins
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import EventSettings, WowSettings
from wow_core.testing import eventually
from wow_core.transport import DefaultTopicNaming, Transport
from wow_core.transport.bus import TransportDomainEventBus, TransportStateEventBus
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport

# -- the bank example on the embedded runtime -------------------------------------------


async def _has_version(runtime: WowRuntime, aggregate_id: AggregateId, version: int) -> bool:
    return await runtime.event_store.last_version(aggregate_id) >= version


def _component(runtime: WowRuntime, kind: type[Any]) -> Any:
    assert runtime.event_dispatch is not None
    for composite in runtime.event_dispatch.composites:
        for function in composite.registrar:
            owner = getattr(function.invoker, "__self__", None)
            if isinstance(owner, kind):
                return owner
    raise LookupError(kind)


async def test_every_wait_stage_works_on_the_embedded_runtime() -> None:
    await _every_wait_stage(bank_app.runtime(WowSettings(service_name="bank-e2e")))


async def test_every_wait_stage_works_over_a_transport(kit: TransportKit) -> None:
    service = f"bank{uuid.uuid4().hex[:8]}"
    components = [c if isinstance(c, type) else type(c) for c in bank_app.components]
    app = WowApp(service, aggregates=bank_app.aggregates, components=components)
    transport = kit.make()
    runtime = transport_runtime(app, transport, service, NONE_RECORDER, True, _Shared())
    try:
        await _every_wait_stage(runtime)
    finally:
        await transport.close()


async def _every_wait_stage(runtime: WowRuntime) -> None:
    async with runtime:
        build = runtime.aggregates.command
        send = runtime.gateway.send_and_wait
        opened = await send(build(OpenAccount("ann", 100)), CommandWait.projected(), timeout=10)
        assert opened.succeeded
        assert opened.stage.value == "PROJECTED"
        assert (opened.processor_name, opened.function_name) == ("BankSummary", "opened")
        ann = opened.aggregate_id.id
        summary: BankSummary = _component(runtime, BankSummary)
        assert summary.balance(ann) == 100  # the read model reflects the command already

        snap = await send(build(Deposit(50), ann), CommandWait.snapshot(), timeout=10)
        assert snap.stage.value == "SNAPSHOT"
        assert snap.aggregate_version == 2
        assert snap.result == {"balance": 150}  # the command's result, reported at a later stage
        snapshot = await runtime.snapshot_repository.load(snap.aggregate_id)
        assert snapshot is not None
        assert snapshot.version >= 2

        handled = await send(build(Deposit(20_000), ann), CommandWait.event_handled(), timeout=10)
        assert handled.stage.value == "EVENT_HANDLED"
        audit: LargeMovementAudit = _component(runtime, LargeMovementAudit)
        assert (ann, "MoneyDeposited", 20_000) in audit.entries

        bob = (await send(build(OpenAccount("bob", 0)))).aggregate_id.id
        transfer = await send(build(PrepareTransfer(ann, bob, 70)))
        tid = transfer.aggregate_id.id
        await send(build(Withdraw(70, tid), ann))
        await send(build(Deposit(70, tid), bob))
        done = await send(build(CompleteTransfer(), tid), CommandWait.saga_handled(), timeout=10)
        assert done.stage.value == "SAGA_HANDLED"
        assert done.processor_name == "TransferNoticeSaga"
        # the saga's command was sent; the notice aggregate gets recorded
        notice = AggregateId(NOTICE, tid)
        await eventually(lambda: _has_version(runtime, notice, 1))
        # SAGA_HANDLED says nothing about the projection (another dispatcher): wait for it
        await wait_until(lambda: summary.transfers.get(tid) == "completed", 20)
        # a wait filtered on a function name completes only on that function
        filtered = await send(
            build(Deposit(1), ann),
            CommandWait.projected(processor_name="BankSummary", function_name="deposited"),
        )
        assert filtered.function_name == "deposited"


# -- a failing projection over transports -------------------------------------------------


@projection(context="bank", aggregates=["bank.account"])
@dataclass
class FragileSummary:
    """Projects openings; fails on deposits while ``broken``."""

    broken: bool = True
    opened: list[str] = field(default_factory=list)
    deposited: list[str] = field(default_factory=list)

    @on_event
    def on_opened(self, event: AccountOpened) -> None:
        self.opened.append(event.owner)

    @on_event
    def on_deposited(self, event: MoneyDeposited) -> None:
        if self.broken:
            raise ValueError("the read model's database is gone")
        self.deposited.append(event.reference)


@dataclass
class TransportKit:
    """Makes transports of one system (they share a broker or a server) and inspects acks."""

    make: Callable[[], Transport]
    backlog: Callable[[Transport, str, str], Awaitable[int]] | None
    """``await backlog(transport, group, topic)``: records the group has not acknowledged
    (None where the broker's bookkeeping is not read; redelivery order is checked instead)."""
    ordered_redelivery: bool = True
    """An unacknowledged record comes back before later records of the same key."""


def _unreachable(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required when CI=true")
    pytest.skip(f"{what} is not reachable")


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


async def _in_memory_kit() -> AsyncIterator[TransportKit]:
    broker = InMemoryBroker()

    async def backlog(transport: Transport, group: str, topic: str) -> int:
        return broker.backlog(group, topic)

    yield TransportKit(lambda: InMemoryTransport(broker=broker), backlog)


NATS_URL = os.environ.get("WOW_TEST_NATS_URL", "nats://127.0.0.1:4222")


async def _nats_kit() -> AsyncIterator[TransportKit]:
    if not _port_open(4222):
        _unreachable(f"NATS JetStream at {NATS_URL}")
    import nats

    from wow_nats import NatsSettings, NatsTransport
    from wow_nats.layout import StreamLayout

    ns = uuid.uuid4().hex[:10]
    settings = NatsSettings(servers=[NATS_URL], stream_prefix=f"wowe2e{ns}_", ack_wait=1.0, fetch_timeout=0.2)
    made: list[NatsTransport] = []

    def make() -> Transport:
        transport = NatsTransport(settings, naming=DefaultTopicNaming(f"e{ns}."), topic_prefix=f"e{ns}.")
        made.append(transport)
        return transport

    async def backlog(transport: Transport, group: str, topic: str) -> int:
        assert isinstance(transport, NatsTransport)
        nc = await nats.connect(NATS_URL)
        try:
            info = await nc.jetstream().consumer_info(
                transport.layout.stream(topic), StreamLayout.consumer(group, topic)
            )
            return int(info.num_ack_pending + info.num_pending)
        finally:
            await nc.close()

    # JetStream redelivers after ack_wait, not before the records that follow
    yield TransportKit(make, backlog, ordered_redelivery=False)
    for transport in made:
        await transport.close()
    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        for stream in await js.streams_info():
            if stream.config.name and settings.stream_prefix in stream.config.name:
                await js.delete_stream(stream.config.name)
    finally:
        await nc.close()


REDIS_URL = os.environ.get("WOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


async def _redis_kit() -> AsyncIterator[TransportKit]:
    if not _port_open(6379):
        _unreachable("Redis at 127.0.0.1:6379")
    from redis.asyncio import Redis

    from wow_redis import RedisSettings, RedisStreamTransport

    prefix = f"wowe2e:{uuid.uuid4().hex[:10]}:"
    # a stable consumer name: a restarted process re-reads its own pending entries
    settings = RedisSettings(
        url=REDIS_URL, key_prefix=prefix, consumer_name="e2e", block_time=0.2, ack_confirmed=True
    )
    client = Redis.from_url(REDIS_URL)
    made: list[RedisStreamTransport] = []

    def make() -> Transport:
        transport = RedisStreamTransport(settings)
        made.append(transport)
        return transport

    async def backlog(transport: Transport, group: str, topic: str) -> int:
        for info in await client.xinfo_groups(topic):
            name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
            if name == group:
                return int(info["pending"]) + int(info.get("lag") or 0)
        raise LookupError(group)

    yield TransportKit(make, backlog)
    for transport in made:
        await transport.close()
    keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    external = os.environ.get("WOW_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    from tests.wow_kafka.tansu import TansuBroker, tansu_binary

    binary = tansu_binary()
    if binary is None:
        _unreachable("Kafka (no tansu binary, no WOW_TEST_KAFKA_BOOTSTRAP)")
    assert binary is not None
    broker = TansuBroker(binary)
    try:
        broker.start()
    except RuntimeError as error:
        _unreachable(f"Kafka ({error})")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


async def _kafka_kit(bootstrap: str) -> AsyncIterator[TransportKit]:
    from tests.wow_kafka.conftest import test_settings
    from wow_kafka import KafkaTransport

    settings = test_settings(bootstrap)
    made: list[KafkaTransport] = []

    def make() -> Transport:
        transport = KafkaTransport(settings)
        made.append(transport)
        return transport

    # Committed offsets are not read here: a withheld record is proven by coming back
    # before a later record of the same key (one partition, in order).
    yield TransportKit(make, None)
    for transport in made:
        await transport.close()


@pytest.fixture(params=["in_memory_transport", "nats", "redis", "kafka"])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[TransportKit]:
    if request.param == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        async for made in _kafka_kit(bootstrap):
            yield made
        return
    factory = {"in_memory_transport": _in_memory_kit, "nats": _nats_kit, "redis": _redis_kit}[request.param]
    async for made in factory():
        yield made


def transport_runtime(
    app: WowApp,
    transport: Transport,
    service: str,
    recorder: FailureRecorder,
    ack_on_unrecorded: bool,
    store: EventStore,
    *,
    local_first: bool = False,
    event: EventSettings | None = None,
) -> WowRuntime:
    """A runtime whose event buses go over ``transport``; the event store is shared by
    the "processes" of one test, as a real store would be. With ``local_first`` the event
    buses are local-first over the transport buses, as the runtime builds them by default.
    ``event`` replaces the event settings (``ack_on_unrecorded`` then applies to them)."""
    event = (event or EventSettings()).model_copy(update={"ack_on_unrecorded_failure": ack_on_unrecorded})
    settings = WowSettings(service_name=service, metrics="in_memory", event=event)
    container = create_container(settings)
    codec = container.codec()
    metrics = container.metrics()
    counting = MetricsMiddleware(metrics)
    events: Any = counting.decorate_bus(TransportDomainEventBus(transport, codec), BusLayer.TRANSPORT)
    states: Any = counting.decorate_bus(TransportStateEventBus(transport, codec), BusLayer.TRANSPORT)
    if local_first:
        events = LocalFirstDomainEventBus(
            InMemoryDomainEventBus(), events, observer=counting.observe_local_first(TopicKind.EVENT)
        )
        states = LocalFirstStateEventBus(
            InMemoryStateEventBus(), states, observer=counting.observe_local_first(TopicKind.STATE)
        )
    container.domain_event_bus.override(providers.Object(events))
    container.state_event_bus.override(providers.Object(states))
    container.failure_recorder.override(providers.Object(recorder))
    container.event_store.override(providers.Object(store))
    runtime = build_runtime(app, settings, container=container)
    runtime.add_transport(transport)
    return runtime


class _Shared(InMemoryEventStore):
    """The shared store outlives each runtime (which closes its store on stop)."""

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("recorder", "ack_on_unrecorded", "outcome", "acknowledged"),
    [
        (NONE_RECORDER, True, "FAILURE_UNRECORDED", True),
        (NONE_RECORDER, False, "FAILURE_UNRECORDED", False),
        (ScriptedRecorder(RecordResult.RECORDED), False, "FAILURE_RECORDED", True),
        (ScriptedRecorder(ConnectionError("failure ledger down")), True, "RECORDING_FAILED", False),
    ],
    ids=["unrecorded-acked", "unrecorded-withheld", "recorded", "recording-failed"],
)
async def test_a_failing_projection_outcome_and_its_acknowledgement(
    kit: TransportKit, recorder: FailureRecorder, ack_on_unrecorded: bool, outcome: str, acknowledged: bool
) -> None:
    await _failing_projection(kit, recorder, ack_on_unrecorded, outcome, acknowledged, local_first=False)


@pytest.mark.parametrize(
    ("recorder", "ack_on_unrecorded", "outcome", "acknowledged"),
    [
        (NONE_RECORDER, False, "FAILURE_UNRECORDED", False),
        (ScriptedRecorder(RecordResult.RECORDED), False, "FAILURE_RECORDED", True),
        (ScriptedRecorder(ConnectionError("failure ledger down")), True, "RECORDING_FAILED", False),
    ],
    ids=["unrecorded-withheld", "recorded", "recording-failed"],
)
async def test_with_local_first_a_withheld_acknowledgement_leaves_the_stream_pending(
    kit: TransportKit, recorder: FailureRecorder, ack_on_unrecorded: bool, outcome: str, acknowledged: bool
) -> None:
    """Event local-first on (the runtime's default): a stream handled in this process whose
    outcome withholds acknowledgement is not acknowledged on the transport either. It is
    delivered from the transport and runs once more (withheld again, it stays pending),
    and after a restart it comes back; an acknowledged one never does."""
    await _failing_projection(kit, recorder, ack_on_unrecorded, outcome, acknowledged, local_first=True)


async def _failing_projection(
    kit: TransportKit,
    recorder: FailureRecorder,
    ack_on_unrecorded: bool,
    outcome: str,
    acknowledged: bool,
    *,
    local_first: bool,
) -> None:
    service = f"e2e{uuid.uuid4().hex[:8]}"
    fragile = FragileSummary()
    app = WowApp(
        service, aggregates=[Account], components=[fragile], events=EventDispatchOptions(snapshots=False)
    )
    store = _Shared()
    first_transport = kit.make()
    runtime = transport_runtime(
        app, first_transport, service, recorder, ack_on_unrecorded, store, local_first=local_first
    )
    group = f"bank.{service}.ProjectionDispatcher"
    # Under local-first a withheld stream runs here, then once more from the transport.
    runs = 2 if local_first and not acknowledged else 1
    async with runtime:
        build = runtime.aggregates.command
        opened = await runtime.gateway.send_and_wait(
            build(OpenAccount("ann", 0)), CommandWait.projected(), timeout=30
        )
        assert opened.succeeded
        account = opened.aggregate_id.id
        # the caller waiting for PROJECTED learns of the failure at once, with its error
        failed = await runtime.gateway.send_and_wait(
            build(Deposit(5, "dep-1"), account), CommandWait.projected(), timeout=30
        )
        assert failed.error_code == ErrorCodes.PROCESSING_ERROR
        assert "database is gone" in failed.error_msg
        metrics = runtime.metrics
        assert isinstance(metrics, InMemoryMetrics)
        tags = {"component": "projection", "processor": "FragileSummary", "message": "MoneyDeposited"}
        await wait_until(lambda: metrics.counter_value(OUTCOMES_METRIC, outcome=outcome, **tags) == runs, 20)
        await wait_until(lambda: all(r.in_flight == 0 for r in _projection(runtime).receivers), 20)
        named = opened.aggregate_id.named_aggregate
        bus = runtime.domain_event_bus
        topic = (bus.distributed_bus if local_first else bus).topic(named)  # type: ignore[attr-defined]
        if kit.backlog is not None:
            if acknowledged and local_first:
                # the copy goes out after the local ack, and is filtered and acked after that
                await eventually(_drained(kit, first_transport, group, topic), 20)
            else:
                assert await kit.backlog(first_transport, group, topic) == (0 if acknowledged else 1)
        assert metrics.counter_value(OUTCOMES_METRIC, outcome=outcome, **tags) == runs
    await first_transport.close()

    # Restart with the projection repaired; a later deposit on the same account follows.
    fragile.broken = False
    second_transport = kit.make()
    restarted = transport_runtime(
        app, second_transport, service, recorder, ack_on_unrecorded, store, local_first=local_first
    )
    async with restarted:
        later = await restarted.gateway.send_and_wait(
            restarted.aggregates.command(Deposit(7, "dep-2"), account),
            CommandWait.projected(function_name="on_deposited"),
            timeout=30,
        )
        assert later.succeeded
        if acknowledged:
            # an acknowledged stream never comes back (it would have preceded dep-2)
            assert fragile.deposited == ["dep-2"] or not kit.ordered_redelivery
            assert "dep-1" not in fragile.deposited
        else:
            # the withheld stream comes back and is handled now
            await wait_until(lambda: "dep-1" in fragile.deposited, 30)
            # Under local-first the new deposit is handed to this process at once, while the
            # withheld stream comes back from the transport: nothing orders the two.
            if kit.ordered_redelivery and not local_first:
                assert fragile.deposited.index("dep-1") < fragile.deposited.index("dep-2")
        await wait_until(lambda: all(r.in_flight == 0 for r in _projection(restarted).receivers), 20)
        if kit.backlog is not None:
            await eventually(_drained(kit, second_transport, group, topic), 20)
    await second_transport.close()


def _drained(
    kit: TransportKit, transport: Transport, group: str, topic: str
) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        assert kit.backlog is not None
        return await kit.backlog(transport, group, topic) == 0

    return check


def _projection(runtime: WowRuntime) -> Any:
    assert runtime.event_dispatch is not None
    return next(d for d in runtime.event_dispatch.dispatchers if d.name.endswith("ProjectionDispatcher"))


async def test_a_service_adds_filters_and_error_handlers_through_its_app() -> None:
    from wow_core.event import ComponentKind, EventDispatchOptions, FunctionExchange, Next, order

    seen: list[str] = []
    handled: list[BaseException] = []

    @order(10, after=["ProjectedNotifierFilter"], before=["RetryableFilter"])
    class Tracing:
        async def filter(self, exchange: FunctionExchange, next: Next) -> None:
            seen.append(exchange.function.function_name)
            await next(exchange)

    class Collect:
        async def handle(self, exchange: FunctionExchange, error: BaseException) -> None:
            handled.append(error)

    options = EventDispatchOptions(filters=[Tracing()], error_handlers={ComponentKind.PROJECTION: Collect()})
    app = WowApp("opts", aggregates=[Account], components=[FragileSummary()], events=options)
    runtime = app.runtime(WowSettings(service_name="opts"))
    async with runtime:
        assert runtime.event_dispatch is not None
        [composite] = runtime.event_dispatch.composites
        assert composite.event_stream_dispatcher is not None
        chain = composite.event_stream_dispatcher.handler.chain
        assert chain.names == ["ProjectedNotifierFilter", "Tracing", "RetryableFilter", "FunctionFilter"]
        build = runtime.aggregates.command
        opened = await runtime.gateway.send_and_wait(build(OpenAccount("ann", 0)), CommandWait.projected())
        await runtime.gateway.send_and_wait(
            build(Deposit(5), opened.aggregate_id.id), CommandWait.projected()
        )
        await wait_until(lambda: len(handled) == 1)
    # without @filter_type a filter applies to every dispatcher: the snapshot chain too
    assert [name for name in seen if name != "snapshot"] == ["on_opened", "on_deposited"]
    assert "snapshot" in seen
    assert isinstance(handled[0], ValueError)


class LedgerPlugin:
    """A third-party FailureRecorder, contributed through the ``register_failure_recorders`` hook."""

    def __init__(self) -> None:
        self.recorder = ScriptedRecorder(RecordResult.RECORDED)

    @hookimpl
    def register_failure_recorders(self, register: Callable[[str, Any], None]) -> None:
        register("ledger", lambda settings: self.recorder)


async def test_the_failure_recorder_is_a_plugin_selected_by_settings() -> None:
    plugin = LedgerPlugin()
    plugins = load_plugins(extra=[("ledger-plugin", plugin)], entry_points=True)
    settings = WowSettings(service_name="ledgered", failure_recorder="ledger", metrics="in_memory")
    app = WowApp("ledgered", aggregates=[Account], components=[FragileSummary()])
    runtime = app.runtime(settings, plugins=plugins)
    async with runtime:
        build = runtime.aggregates.command
        opened = await runtime.gateway.send_and_wait(build(OpenAccount("ann", 0)), CommandWait.projected())
        await runtime.gateway.send_and_wait(
            build(Deposit(5), opened.aggregate_id.id), CommandWait.projected()
        )
        await wait_until(lambda: len(plugin.recorder.failures) == 1)
        metrics = runtime.metrics
        assert isinstance(metrics, InMemoryMetrics)
        await wait_until(lambda: metrics.counter_value(OUTCOMES_METRIC, outcome="FAILURE_RECORDED") == 1)
    [failure] = plugin.recorder.failures
    assert failure.function.processor_name == "FragileSummary"
    assert isinstance(failure.error, ValueError)
