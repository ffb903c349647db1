"""Local-first in the assembled runtime: selection by settings, flush on stop."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from dependency_injector import providers

from tests.accounts import Account, Open
from tests.wow_core.messaging.local_first.local_first_doubles import ORDERS, RecordingDistributedBus, command
from wow_core.command import CommandWait
from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.messaging.local_first import (
    CopyCancelledError,
    LocalFirstCommandBus,
    LocalFirstDistributedCopies,
    LocalFirstDomainEventBus,
    LocalFirstStateEventBus,
)
from wow_core.metrics import InMemoryMetrics, metrics_source
from wow_core.middleware.metrics import COPIES_CANCELLED, COPIES_SENT
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.runtime import Lifecycle
from wow_core.runtime.settings import SettingsError, WowSettings
from wow_core.testing.support import wait_until
from wow_core.transport.bus import (
    SENT_COUNTER,
    TransportCommandBus,
    TransportDomainEventBus,
    TransportStateEventBus,
)
from wow_core.transport.in_memory import InMemoryTransport
from wow_core.transport.spi import TransportMessage


@pytest.fixture(autouse=True)
def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("WOW_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_by_default_every_bus_is_local_first_over_the_in_memory_bus_and_the_transport() -> None:
    container = create_container(WowSettings.load())
    command_bus = container.command_bus()
    event_bus = container.domain_event_bus()
    state_bus = container.state_event_bus()
    assert isinstance(command_bus, LocalFirstCommandBus)
    assert isinstance(command_bus.local_bus, InMemoryCommandBus)
    assert isinstance(command_bus.distributed_bus, TransportCommandBus)
    assert command_bus.distributed_bus.transport is container.transport()
    assert isinstance(event_bus, LocalFirstDomainEventBus)
    assert isinstance(event_bus.local_bus, InMemoryDomainEventBus)
    assert isinstance(event_bus.distributed_bus, TransportDomainEventBus)
    assert isinstance(state_bus, LocalFirstStateEventBus)
    assert isinstance(state_bus.local_bus, InMemoryStateEventBus)
    assert isinstance(state_bus.distributed_bus, TransportStateEventBus)
    for bus in (command_bus, event_bus, state_bus):
        assert bus.distributed_bus.keeps_local_first_marker is True  # sends the admission result


@pytest.mark.parametrize(
    ("variable", "provider", "plain"),
    [
        ("WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED", "command_bus", TransportCommandBus),
        ("WOW_EVENT__BUS__LOCAL_FIRST__ENABLED", "domain_event_bus", TransportDomainEventBus),
        ("WOW_EVENTSOURCING__STATE__BUS__LOCAL_FIRST__ENABLED", "state_event_bus", TransportStateEventBus),
    ],
)
def test_enabled_false_turns_local_first_off_for_that_bus_only(
    monkeypatch: pytest.MonkeyPatch, variable: str, provider: str, plain: type[Any]
) -> None:
    monkeypatch.setenv(variable, "false")
    container = create_container(WowSettings.load())
    bus = getattr(container, provider)()
    assert type(bus) is plain
    assert bus.keeps_local_first_marker is False  # nothing admits here: it sends local_first=false
    others = {"command_bus", "domain_event_bus", "state_event_bus"} - {provider}
    for other in others:
        assert getattr(container, other)().__class__.__name__.startswith("LocalFirst")


def test_bus_settings_reach_the_local_first_bus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_COMMAND__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK", "7")
    monkeypatch.setenv("WOW_COMMAND__BUS__LOCAL_FIRST__HAND_OFF_TIMEOUT", "2.5")
    bus = create_container(WowSettings.load()).command_bus()
    assert bus.copies.backlog_high_water_mark == 7
    assert bus.copies.hand_off_timeout == 2.5


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED", "perhaps"),
        ("WOW_EVENT__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK", "0"),
        ("WOW_EVENTSOURCING__STATE__BUS__LOCAL_FIRST__HAND_OFF_TIMEOUT", "-1"),
    ],
)
def test_wrong_local_first_settings_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=variable):
        WowSettings.load()


async def test_a_copy_every_receiver_would_drop_is_not_sent() -> None:
    """The default runtime over its own in-memory transport: every receiver of the command
    topic is a merged local-first receiver of this service, which would drop the copy
    marked handled locally; it is neither encoded nor sent (nor counted as sent)."""
    metrics = InMemoryMetrics()
    container = create_container(WowSettings.load())
    container.metrics.override(providers.Object(metrics))
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    async with runtime:
        assert isinstance(runtime.transport, InMemoryTransport)
        bus = runtime.command_bus.distributed_bus
        topic = bus.topic(runtime.aggregates.command(Open("ada", 10)).aggregate_id.named_aggregate)
        assert not runtime.transport.takes(topic, handled_locally=True)
        result = await runtime.gateway.send_and_wait(
            runtime.aggregates.command(Open("ada", 10)), CommandWait.processed(), timeout=5
        )
        assert result.succeeded
    for kind in ("command", "event", "state"):
        # the domain events have no receiver at all (their refused copies reach nobody),
        # the state events only the snapshot dispatcher's merged receiver
        assert metrics.counter_value(COPIES_SENT, bus=kind, local_first="true") == 0
        assert metrics.counter_value(COPIES_SENT, bus=kind, local_first="false") == 0
        assert metrics.counter_value(SENT_COUNTER, kind=kind) == 0


async def test_a_copy_goes_out_marked_when_a_receiver_could_process_it() -> None:
    """A plain receiver of the topic (here a raw transport receiver of another group)
    processes copies marked handled locally: the copy is sent, marked true, exactly as
    over a broker."""
    metrics = InMemoryMetrics()
    container = create_container(WowSettings.load())
    container.metrics.override(providers.Object(metrics))
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    async with runtime:
        command = runtime.aggregates.command(Open("ada", 10))
        topic = runtime.command_bus.distributed_bus.topic(command.aggregate_id.named_aggregate)
        assert isinstance(runtime.transport, InMemoryTransport)
        plain = runtime.transport.open("audit", [topic])
        plain.open_processing()
        assert runtime.transport.takes(topic, handled_locally=True)
        result = await runtime.gateway.send_and_wait(command, CommandWait.processed(), timeout=5)
        assert result.succeeded
        record = await asyncio.wait_for(plain.__anext__(), 5)
        assert '"local_first":"true"' in record.payload.replace(" ", "")
    assert metrics.counter_value(COPIES_SENT, bus="command", local_first="true") == 1
    assert metrics.counter_value(COPIES_SENT, bus="command", local_first="false") == 0


class GatedTransport(InMemoryTransport):
    """Sends wait for ``gate``; the order of sends and close is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.log: list[str] = []

    async def send(self, message: TransportMessage) -> None:
        self.log.append(f"send {message.topic}")
        await self.gate.wait()
        await super().send(message)
        self.log.append(f"sent {message.topic}")

    async def close(self) -> None:
        self.log.append("close")
        await super().close()


async def runtime_with(transport: GatedTransport, metrics: InMemoryMetrics, shutdown_timeout: float) -> Any:
    container = create_container(WowSettings.load(runtime={"shutdown_timeout": shutdown_timeout}))
    container.transport.override(providers.Object(transport))
    container.metrics.override(providers.Object(metrics))
    # a group on the command topic, so that the copies reach someone (a copy to a topic
    # without any group is not sent at all over the in-memory transport)
    transport.open("audit", ["wow.bank.account.command"])
    return build_runtime(WowApp("bank", aggregates=[Account]), container=container)


async def test_stop_sends_queued_copies_before_the_transport_closes() -> None:
    transport, metrics = GatedTransport(), InMemoryMetrics()
    runtime = await runtime_with(transport, metrics, shutdown_timeout=5)
    # Before start nobody is routed locally: refused, the sender waits for its copy.
    sender = asyncio.ensure_future(runtime.command_bus.send(runtime.aggregates.command(Open("ada"))))
    await wait_until(lambda: bool(transport.log), 5, "the copy reached the transport")
    assert transport.log == ["send wow.bank.account.command"]
    stopping = asyncio.ensure_future(runtime.stop())
    await asyncio.sleep(0)
    transport.gate.set()
    assert await asyncio.wait_for(stopping, 10)
    await sender
    assert transport.log == ["send wow.bank.account.command", "sent wow.bank.account.command", "close"]


async def test_copies_still_queued_past_the_shutdown_timeout_are_cancelled_and_counted() -> None:
    transport, metrics = GatedTransport(), InMemoryMetrics()
    runtime = await runtime_with(transport, metrics, shutdown_timeout=0.2)
    sender = asyncio.ensure_future(runtime.command_bus.send(runtime.aggregates.command(Open("ada"))))
    behind = asyncio.ensure_future(runtime.command_bus.send(runtime.aggregates.command(Open("bob"), "a1")))
    await wait_until(lambda: len(transport.log) == 2, 5, "both copies reached the transport")
    async with asyncio.timeout(10):
        await runtime.stop()
    assert transport.log[-1] == "close"
    assert not any(entry.startswith("sent") for entry in transport.log)
    assert metrics.counter_value(COPIES_CANCELLED, bus="command") == 2
    for task in (sender, behind):
        with pytest.raises(CopyCancelledError):
            await task


async def test_only_copy_queues_registered_with_the_runtime_are_awaited() -> None:
    lifecycle = Lifecycle(shutdown_timeout=0.1)
    registered_bus, unregistered_bus = RecordingDistributedBus(), RecordingDistributedBus()
    registered: LocalFirstDistributedCopies[Any] = LocalFirstDistributedCopies(
        registered_bus,  # type: ignore[arg-type]
        bus_name="command",
    )
    unregistered: LocalFirstDistributedCopies[Any] = LocalFirstDistributedCopies(
        unregistered_bus,  # type: ignore[arg-type]
        bus_name="command",
    )
    lifecycle.register_flush(registered.flush, "registered copies")
    loop = asyncio.get_running_loop()
    never: asyncio.Future[bool] = loop.create_future()
    for copies in (registered, unregistered):
        entry = copies.queue(command("x"), start=False)
        entry.handed_off_with(never, loop.time() + 60)
        copies.start(entry)
    async with asyncio.timeout(5):
        await lifecycle.stop()
    assert registered.backlog() == 0  # cancelled by the runtime's flush
    assert registered.closed
    assert unregistered.backlog(ORDERS) == 1  # not awaited, not cancelled: still queued
    assert not unregistered.closed
    await unregistered.flush(0)  # stop it yourself
    assert unregistered.backlog() == 0


async def test_copies_sent_later_keep_the_senders_metrics_source_through_the_plugin_captures() -> None:
    metrics = InMemoryMetrics()
    container = create_container(WowSettings.load())
    container.metrics.override(providers.Object(metrics))
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    async with runtime:
        command = runtime.aggregates.command(Open("ada"))
        # a receiver that processes copies marked handled locally, so the copy is sent
        topic = runtime.command_bus.distributed_bus.topic(command.aggregate_id.named_aggregate)
        runtime.transport.open("audit", [topic])
        token = metrics_source.set("saga:welcome")
        try:
            await runtime.command_bus.send(command)  # handed off
        finally:
            metrics_source.reset(token)
        await runtime.command_bus.copies.join()
    assert metrics.counter_value(SENT_COUNTER, kind="command", source="saga:welcome", outcome="ok") == 1
