"""The middleware layer: what the runtime decorates, in which order, and what a hook sees."""

from __future__ import annotations

from typing import Any

from tests.accounts import Account, Deposit, Open
from tests.wow_core.middleware.copies import keep_every_copy
from wow_core.command import CommandGateway, CommandStage, CommandWait
from wow_core.command.stages import CommandResult, WaitPlan
from wow_core.eventsourcing.store import EventStore
from wow_core.messaging.contract import HandOffReceipt, MessageBus, MessageSubscription
from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryReceiver
from wow_core.messaging.local_first import LocalFirstCommandBus
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import (
    BusLayer,
    CommandGatewayDecorator,
    CommandHandlerDecorator,
    EventStoreDecorator,
    LocalMessageBusDecorator,
    MessageBusDecorator,
    MessageReceiverDecorator,
    MetricMessageBus,
    Middleware,
    undecorated,
)
from wow_core.model import AggregateId, CommandMessage, DomainEventStream, Message, NamedAggregate
from wow_core.modeling import CommandKernel, CommandOutcome
from wow_core.plugins import hookimpl, load_plugins
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually
from wow_core.transport.bus import TransportCommandBus

Seen = list[tuple[str, ...]]


class SeeingBus(LocalMessageBusDecorator[Any, Any]):
    def __init__(self, inner: Any, seen: Seen, label: str) -> None:
        super().__init__(inner)
        self.seen, self.label = seen, label

    async def send(self, message: Message) -> None:
        self.seen.append(("send", self.label, message.name))
        await self.inner.send(message)

    def hand_off(self, message: Any) -> HandOffReceipt:
        receipt = self.inner.hand_off(message)
        self.seen.append(("hand_off", self.label, str(receipt.accepted)))
        return receipt

    def received(self, exchange: Any, subscription: MessageSubscription) -> None:
        self.seen.append(("received", self.label, exchange.message.name))


class SeeingRemoteBus(MessageBusDecorator[Any, Any]):
    def __init__(self, inner: Any, seen: Seen, label: str) -> None:
        super().__init__(inner)
        self.seen, self.label = seen, label

    async def send(self, message: Message) -> None:
        self.seen.append(("send", self.label, message.name))
        await self.inner.send(message)

    def received(self, exchange: Any, subscription: MessageSubscription) -> None:
        self.seen.append(("received", self.label, exchange.message.name))


class SeeingGateway(CommandGatewayDecorator):
    __slots__ = ("seen",)

    def __init__(self, inner: CommandGateway, seen: Seen) -> None:
        super().__init__(inner)
        self.seen = seen

    async def send_and_wait(
        self, command: CommandMessage[Any], wait: WaitPlan | None = None, *, timeout: float | None = None
    ) -> CommandResult:
        result = await self.inner.send_and_wait(command, wait, timeout=timeout)
        self.seen.append(("gateway", command.name, result.stage.value))
        return result


class SeeingHandler(CommandHandlerDecorator):
    def __init__(self, inner: CommandKernel, seen: Seen) -> None:
        super().__init__(inner)
        self.seen = seen

    async def process(self, command: CommandMessage[Any]) -> CommandOutcome:
        outcome = await self.inner.process(command)
        self.seen.append(("process", command.name, str(outcome.version)))
        return outcome


class SeeingStore(EventStoreDecorator):
    def __init__(self, inner: EventStore, seen: Seen) -> None:
        super().__init__(inner)
        self.seen = seen

    async def append(self, stream: DomainEventStream) -> None:
        await self.inner.append(stream)
        self.seen.append(("append", str(stream.version)))

    async def load(
        self, aggregate_id: AggregateId, head_version: int = 1, tail_version: int | None = None
    ) -> list[DomainEventStream]:
        self.seen.append(("load", str(head_version)))
        return await self.inner.load(aggregate_id, head_version, tail_version)


class Seeing(Middleware):
    """Decorates everything it is given and records what each hook saw."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def decorate_bus(self, bus: MessageBus[Any, Any], layer: BusLayer) -> MessageBus[Any, Any]:
        label = f"{bus.topic_kind.value}/{layer.value}"
        if layer is BusLayer.LOCAL:
            return SeeingBus(bus, self.seen, label)
        return SeeingRemoteBus(bus, self.seen, label)

    def decorate_gateway(self, gateway: CommandGateway) -> CommandGateway:
        return SeeingGateway(gateway, self.seen)

    def decorate_command_handler(self, handler: CommandKernel) -> CommandKernel:
        return SeeingHandler(handler, self.seen)

    def decorate_event_store(self, store: EventStore) -> EventStore:
        return SeeingStore(store, self.seen)


class SeeingPlugin:
    def __init__(self) -> None:
        self.seen: Seen = []

    @hookimpl
    def register_middleware(self, register: Any) -> None:
        register("seeing", lambda settings, metrics: Seeing(self.seen))


def test_the_default_runtime_decorates_nothing() -> None:
    container = create_container(WowSettings())
    assert container.middleware() == [], "no-op metrics: the metrics middleware is not installed"
    runtime = WowApp("bank", aggregates=[Account]).runtime(WowSettings())
    for component in (
        runtime.command_bus,
        runtime.domain_event_bus,
        runtime.state_event_bus,
        runtime.gateway,
        runtime.kernel,
        runtime.event_store,
    ):
        assert undecorated(component) is component, f"{component!r} is decorated"
    bus = runtime.command_bus
    assert isinstance(bus, LocalFirstCommandBus)
    assert type(bus.local_bus) is InMemoryCommandBus
    assert type(bus.distributed_bus) is TransportCommandBus


def test_metrics_decorate_only_transport_buses_and_the_handler() -> None:
    runtime = WowApp("bank", aggregates=[Account]).runtime(WowSettings(metrics="in_memory"))
    bus = runtime.command_bus
    assert isinstance(bus, LocalFirstCommandBus), "the local-first bus itself is not wrapped"
    assert type(bus.local_bus) is InMemoryCommandBus
    assert isinstance(bus.distributed_bus, MetricMessageBus)
    assert type(undecorated(bus.distributed_bus)) is TransportCommandBus
    assert undecorated(runtime.kernel) is not runtime.kernel
    assert undecorated(runtime.gateway) is runtime.gateway
    assert undecorated(runtime.event_store) is runtime.event_store


async def test_a_plugin_middleware_sees_every_hook_in_order_on_the_embedded_runtime() -> None:
    plugin = SeeingPlugin()
    plugins = load_plugins(extra=[("seeing", plugin)])
    container = create_container(WowSettings(metrics="in_memory"), plugins=plugins)
    names = [type(item).__name__ for item in container.middleware()]
    assert names == ["MetricsMiddleware", "Seeing"], "by registered name: metrics outermost"
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    keep_every_copy(runtime)  # the copies go out and come back, as over a broker
    seen = plugin.seen
    metrics = container.metrics()
    assert isinstance(metrics, InMemoryMetrics)
    async with runtime:
        opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 1)), timeout=5)
        assert opened.aggregate_id is not None
        deposit = runtime.aggregates.command(Deposit(2), opened.aggregate_id.id)
        assert (await runtime.gateway.send_and_wait(deposit, CommandWait.processed(), timeout=5)).succeeded

        async def copies_filtered() -> bool:
            return metrics.counter_value("wow.local_first.filtered", bus="command") == 2

        await eventually(copies_filtered, timeout=10, what="both command copies to be filtered")
    assert ("send", "command/local_first", "Open") in seen
    assert ("hand_off", "command/local", "True") in seen, "the decorated local bus handed off"
    assert ("received", "command/local", "Open") in seen, "the dispatcher took it from the local bus"
    assert ("send", "command/transport", "Open") in seen, "its distributed copy went out"
    assert ("received", "command/transport", "Open") in seen, "and came back, to be filtered"
    assert ("process", "Open", "1") in seen
    assert ("process", "Deposit", "2") in seen
    assert ("append", "1") in seen
    assert ("append", "2") in seen
    assert ("gateway", "Open", CommandStage.PROCESSED.value) in seen
    assert [e for e in seen if e[0] == "received" and e[1] == "command/local_first"] == [
        ("received", "command/local_first", "Open"),
        ("received", "command/local_first", "Deposit"),
    ], "the merged receiver delivered each command once: the marked copies were filtered"
    assert metrics.counter_value("wow.local_first.sends", bus="command", outcome="handed_off") == 2


async def test_an_in_memory_receiver_calls_the_received_hook_itself_and_a_second_one_is_wrapped() -> None:
    """The first decorator's hook is taken by the in-memory receiver (no wrapper frame on
    each pull), the next decorator's wraps it; both see each exchange once, in order
    (the inner hook first), before the consumer gets it."""
    seen: Seen = []
    bus = SeeingBus(SeeingBus(InMemoryCommandBus(), seen, "inner"), seen, "outer")
    account = NamedAggregate("bank", "account")
    subscription = MessageSubscription.of("bank.processor", [account])
    receiver = bus.receiver(subscription)
    assert isinstance(receiver, MessageReceiverDecorator), "the second hook wraps"
    assert isinstance(receiver.inner, InMemoryReceiver), "the first is the receiver's own"
    await receiver.ready()
    receiver.open_processing()
    command = CommandMessage(AggregateId(account, "a-1"), Deposit(1), "Deposit")
    await bus.send(command)
    exchange = await anext(aiter(receiver))
    assert exchange.message is command
    assert [item for item in seen if item[0] == "received"] == [
        ("received", "inner", "Deposit"),
        ("received", "outer", "Deposit"),
    ]
    await exchange.ack()
    await receiver.close()
    await bus.close()
