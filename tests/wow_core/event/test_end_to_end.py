"""End to end: the bank example's stages on the embedded runtime, and a failing
projection's outcomes and acknowledgements over transports with real acknowledgement
(the in-memory transport, and NATS JetStream on 127.0.0.1:4222 when it runs).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
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

from tests.wow_core.event.support import ScriptedRecorder, eventually, wait_until
from wow_core.command import CommandWait
from wow_core.command.stages import ErrorCodes
from wow_core.event import OUTCOMES_METRIC, RecordResult, on_event, projection
from wow_core.event.failure import NONE_RECORDER, FailureRecorder
from wow_core.metrics import InMemoryMetrics
from wow_core.model import AggregateId
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import EventSettings, WowSettings
from wow_core.transport.bus import TransportDomainEventBus, TransportStateEventBus
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport
from wow_core.transport.spi import DefaultTopicNaming, Transport

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
    runtime = bank_app.runtime(WowSettings(service_name="bank-e2e"))
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
        assert summary.transfers[tid] == "completed"
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
    backlog: Callable[[Transport, str, str], Any]
    """``await backlog(transport, group, topic)``: records the group has not acknowledged."""


async def _in_memory_kit() -> AsyncIterator[TransportKit]:
    broker = InMemoryBroker()

    async def backlog(transport: Transport, group: str, topic: str) -> int:
        return broker.backlog(group, topic)

    yield TransportKit(lambda: InMemoryTransport(broker=broker), backlog)


NATS_URL = os.environ.get("WOW_TEST_NATS_URL", "nats://127.0.0.1:4222")


def _nats_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 4222), timeout=1):
            return True
    except OSError:
        return False


async def _nats_kit() -> AsyncIterator[TransportKit]:
    if not _nats_reachable():
        if os.environ.get("CI") == "true":
            pytest.fail(f"NATS JetStream is not reachable at {NATS_URL}")
        pytest.skip(f"NATS JetStream is not reachable at {NATS_URL}")
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

    yield TransportKit(make, backlog)
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


@pytest.fixture(params=["in_memory_transport", "nats"])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[TransportKit]:
    factory = _in_memory_kit if request.param == "in_memory_transport" else _nats_kit
    async for made in factory():
        yield made


def transport_runtime(
    app: WowApp, transport: Transport, service: str, recorder: FailureRecorder, ack_on_unrecorded: bool
) -> WowRuntime:
    settings = WowSettings(
        service_name=service,
        metrics="in_memory",
        event=EventSettings(ack_on_unrecorded_failure=ack_on_unrecorded),
    )
    container = create_container(settings)
    codec = container.codec()
    metrics = container.metrics()
    container.domain_event_bus.override(
        providers.Object(TransportDomainEventBus(transport, codec, metrics=metrics))
    )
    container.state_event_bus.override(
        providers.Object(TransportStateEventBus(transport, codec, metrics=metrics))
    )
    container.failure_recorder.override(providers.Object(recorder))
    runtime = build_runtime(app, settings, container=container)
    runtime.add_transport(transport)
    return runtime


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
    service = f"e2e{uuid.uuid4().hex[:8]}"
    fragile = FragileSummary()
    app = WowApp(service, aggregates=[Account], components=[fragile])
    first_transport = kit.make()
    runtime = transport_runtime(app, first_transport, service, recorder, ack_on_unrecorded)
    group = f"bank.{service}.ProjectionDispatcher"
    async with runtime:
        build = runtime.aggregates.command
        opened = await runtime.gateway.send_and_wait(
            build(OpenAccount("ann", 0)), CommandWait.projected(), timeout=20
        )
        assert opened.succeeded
        account = opened.aggregate_id.id
        # the caller waiting for PROJECTED learns of the failure at once, with its error
        failed = await runtime.gateway.send_and_wait(
            build(Deposit(5, "dep-1"), account), CommandWait.projected(), timeout=20
        )
        assert failed.error_code == ErrorCodes.PROCESSING_ERROR
        assert "database is gone" in failed.error_msg
        metrics = runtime.metrics
        assert isinstance(metrics, InMemoryMetrics)
        tags = {"component": "projection", "processor": "FragileSummary", "message": "MoneyDeposited"}
        await wait_until(lambda: metrics.counter_value(OUTCOMES_METRIC, outcome=outcome, **tags) == 1, 20)
        assert runtime.event_dispatch is not None
        [projection_dispatcher] = [
            d for d in runtime.event_dispatch.dispatchers if d.name.endswith("ProjectionDispatcher")
        ]
        await wait_until(lambda: all(r.in_flight == 0 for r in projection_dispatcher.receivers), 20)
        topic = runtime.domain_event_bus.topic(opened.aggregate_id.named_aggregate)  # type: ignore[attr-defined]
        backlog = await kit.backlog(first_transport, group, topic)
        assert backlog == (0 if acknowledged else 1)
    await first_transport.close()

    # Restart with the projection repaired: a withheld event stream comes back.
    fragile.broken = False
    second_transport = kit.make()
    restarted = transport_runtime(app, second_transport, service, recorder, ack_on_unrecorded)
    async with restarted:
        if acknowledged:
            assert fragile.deposited == []
        else:
            await wait_until(lambda: fragile.deposited == ["dep-1"], 20)
            await wait_until(lambda: all(r.in_flight == 0 for r in _projection(restarted).receivers), 20)
            backlog = await kit.backlog(second_transport, group, topic)
            assert backlog == 0
    await second_transport.close()


def _projection(runtime: WowRuntime) -> Any:
    assert runtime.event_dispatch is not None
    return next(d for d in runtime.event_dispatch.dispatchers if d.name.endswith("ProjectionDispatcher"))
