"""The command dispatcher over the in-memory command bus."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.accounts import Account, Deposit, Open
from wow_core.command import CommandStage, ErrorCodes, WaitCoordinator, WaitSignal
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.messaging.in_memory import InMemoryCommandBus
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import MetricCommandHandler
from wow_core.modeling import AggregateRegistry, CommandKernel
from wow_core.modeling.dispatcher import CommandDispatcher
from wow_core.runtime.keyed_executor import KeyedExecutor


class Signals(WaitCoordinator):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[WaitSignal] = []
        self.arrived = asyncio.Event()

    def signal(self, signal: WaitSignal) -> None:
        self.seen.append(signal)
        self.arrived.set()


class BrokenStore(InMemoryEventStore):
    async def load(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("store is down")


async def _dispatch(store: InMemoryEventStore, *commands: Any) -> tuple[Signals, list[Any]]:
    registry = AggregateRegistry([Account])
    bus = InMemoryCommandBus()
    signals = Signals()
    dispatcher = CommandDispatcher(bus, CommandKernel(registry, store), signals, KeyedExecutor(16))
    await dispatcher.start()
    receiver: Any = dispatcher.receiver
    settled: list[Any] = []
    original = dispatcher.handle

    async def handle(exchange: Any) -> None:
        await original(exchange)
        settled.append(exchange)

    dispatcher.handle = handle  # type: ignore[method-assign]
    try:
        for command in commands:
            await bus.send(command)
        for _ in range(100):
            if len(settled) == len([c for c in commands if not c.is_void]):
                break
            await asyncio.wait_for(signals.arrived.wait(), 5)
            signals.arrived.clear()
        assert receiver.in_flight == 0 or settled
    finally:
        assert await dispatcher.stop(5)
        await bus.close()
    return signals, settled


async def test_a_failing_store_is_signalled_and_the_exchange_released_unacked() -> None:
    registry = AggregateRegistry([Account])
    command = registry.command(Open("ada"))
    signals, settled = await _dispatch(BrokenStore(), command)
    [signal] = signals.seen
    assert (signal.stage, signal.error_code, signal.final) == (
        CommandStage.PROCESSED,
        ErrorCodes.PROCESSING_ERROR,
        True,
    )
    assert "store is down" in signal.error_msg
    assert signal.error_msg.endswith(
        "(not decided: released for redelivery, the command may still be applied)"
    )
    assert not settled[0].acked


async def test_processed_commands_are_signalled_and_acked() -> None:
    registry = AggregateRegistry([Account])
    command = registry.command(Open("ada"), "a-1")
    deposit = registry.command(Deposit(3), "a-1")
    signals, settled = await _dispatch(InMemoryEventStore(), command, deposit)
    assert [(s.command_id, s.aggregate_version) for s in signals.seen] == [(command.id, 1), (deposit.id, 2)]
    assert all(exchange.acked for exchange in settled)


async def test_a_void_command_is_acked_and_never_reaches_the_kernel() -> None:
    registry = AggregateRegistry([Account])
    store = InMemoryEventStore()
    void = registry.command(Open("ada"), "a-1", is_void=True)
    after = registry.command(Open("bob"), "a-2")
    signals, _ = await _dispatch(store, void, after)
    assert [s.command_id for s in signals.seen] == [after.id]
    assert await store.last_version(void.aggregate_id) == 0


async def test_a_publication_failure_leaves_the_command_processed() -> None:
    class FailingBus:
        async def send(self, message: Any) -> None:
            raise ConnectionError("bus down")

    registry = AggregateRegistry([Account])
    metrics = InMemoryMetrics()
    store = InMemoryEventStore()
    kernel = MetricCommandHandler(
        CommandKernel(
            registry,
            store,
            domain_event_bus=FailingBus(),  # type: ignore[arg-type]
            state_event_bus=FailingBus(),  # type: ignore[arg-type]
        ),
        metrics,
    )
    outcome = await kernel.process(registry.command(Open("ada")))
    assert outcome.succeeded
    assert outcome.publish_failures == ("event", "state")
    assert await store.last_version(outcome.aggregate_id) == 1
    assert metrics.counter_value("wow.command.publish_failures") == 2
