"""The runtime end to end on the embedded default, and its start and stop order."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.accounts import Account, AccountState, Deposit, Note, Open, Opened, Withdraw
from wow_core import DomainEvent, StateEvent, on_event, on_state_event, projection
from wow_core.command import CommandStage, CommandWait, ErrorCodes
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.modeling import AggregateRegistry
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import Lifecycle, RuntimeState, StartError, WowRuntime
from wow_core.runtime.settings import RuntimeSettings, WowSettings


@pytest.fixture
async def runtime() -> Any:
    runtime = WowApp("bank", aggregates=[Account]).runtime(WowSettings())
    async with runtime:
        yield runtime
    assert runtime.state is RuntimeState.STOPPED


async def test_send_and_wait_processed_end_to_end(runtime: WowRuntime) -> None:
    command = runtime.aggregates.command(Open("ada", 10))
    result = await runtime.gateway.send_and_wait(command, CommandWait.processed(), timeout=5)
    assert result.succeeded
    assert (result.stage, result.aggregate_version) == (CommandStage.PROCESSED, 1)
    deposit = runtime.aggregates.command(Deposit(5), command.aggregate_id.id)
    result = await runtime.gateway.send_and_wait(deposit, timeout=5)
    assert result.aggregate_version == 2
    assert len(runtime.coordinator) == 0


async def test_rejections_and_duplicates_reach_the_caller(runtime: WowRuntime) -> None:
    opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 10)), timeout=5)
    assert opened.aggregate_id is not None
    too_much = runtime.aggregates.command(Withdraw(99), opened.aggregate_id.id)
    rejected = await runtime.gateway.send_and_wait(too_much, timeout=5)
    assert (rejected.error_code, rejected.stage) == ("INSUFFICIENT_FUNDS", CommandStage.PROCESSED)
    first = runtime.aggregates.command(Deposit(1), opened.aggregate_id.id, request_id="once")
    again = runtime.aggregates.command(Deposit(1), opened.aggregate_id.id, request_id="once")
    one = await runtime.gateway.send_and_wait(first, timeout=5)
    two = await runtime.gateway.send_and_wait(again, CommandWait.projected(), timeout=5)
    assert not one.duplicate
    assert two.duplicate
    assert two.aggregate_version == one.aggregate_version


async def test_a_void_command_is_dropped_before_the_kernel(runtime: WowRuntime) -> None:
    opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 10)), timeout=5)
    assert opened.aggregate_id is not None
    void = runtime.aggregates.command(Deposit(5), opened.aggregate_id.id, is_void=True)
    assert (await runtime.gateway.send(void)).stage is CommandStage.SENT
    # A normal command after it is processed; the void one before it (same lane) never was.
    after = runtime.aggregates.command(Deposit(1), opened.aggregate_id.id)
    result = await runtime.gateway.send_and_wait(after, timeout=5)
    assert result.aggregate_version == 2
    assert runtime.command_dispatcher.void_dropped == 1
    streams = await runtime.event_store.load(opened.aggregate_id)
    assert [s.command_id for s in streams] == [opened.command_id, after.id]


async def test_a_command_to_an_aggregate_nobody_hosts_times_out_naming_the_stage() -> None:
    from wow_core.command import CommandWaitTimeoutError

    # Not hosted here, so the command goes to the transport: its body type must be known.
    runtime = WowApp("bank", body_types=[Open]).runtime(WowSettings())
    async with runtime:
        command = AggregateRegistry([Account]).command(Open("x"))
        with pytest.raises(CommandWaitTimeoutError, match="last stage reached: SENT"):
            await runtime.gateway.send_and_wait(command, timeout=0.1)
        assert len(runtime.coordinator) == 0


async def test_invalid_commands_from_the_wire_are_rejected_listing_violations(runtime: WowRuntime) -> None:
    opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 10)), timeout=5)
    assert opened.aggregate_id is not None
    # Pydantic accepts the body on decode; the body's own rule refuses it in the kernel.
    bad = runtime.aggregates.command(Note("  "), opened.aggregate_id.id)
    waiter = runtime.coordinator.register(bad, CommandWait.processed())
    try:
        await runtime.command_bus.send(bad)  # around the gateway's own check
        result = await asyncio.wait_for(waiter.future, 5)
    finally:
        runtime.coordinator.unregister(waiter)
    assert result.error_code == ErrorCodes.COMMAND_INVALID
    assert [str(v) for v in result.errors] == ["text must not be blank"]


async def test_constraint_violations_are_rejected_by_the_kernel_on_in_process_buses() -> None:
    from wow_core.runtime.assembly import build_runtime, in_process_buses
    from wow_core.runtime.container import create_container

    container = create_container(WowSettings())
    in_process_buses(container)
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    async with runtime:
        opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 10)), timeout=5)
        assert opened.aggregate_id is not None
        bad = runtime.aggregates.command(Deposit(-5), opened.aggregate_id.id)
        waiter = runtime.coordinator.register(bad, CommandWait.processed())
        try:
            await runtime.command_bus.send(bad)
            result = await asyncio.wait_for(waiter.future, 5)
        finally:
            runtime.coordinator.unregister(waiter)
    assert result.error_code == ErrorCodes.COMMAND_INVALID
    assert [v.path for v in result.errors] == ["amount"]


class Recorder:
    def __init__(self, log: list[str], name: str) -> None:
        self.log = log
        self.name = name

    async def prepare(self) -> None:
        self.log.append(f"prepare {self.name}")

    async def start(self) -> None:
        self.log.append(f"start {self.name}")

    async def stop(self, timeout: float | None = None) -> bool:
        self.log.append(f"stop {self.name}")
        return True

    async def close(self) -> None:
        self.log.append(f"close {self.name}")


async def test_start_and_stop_happen_in_order() -> None:
    log: list[str] = []
    lifecycle = Lifecycle(shutdown_timeout=5)
    lifecycle.add_transport(Recorder(log, "transport"))
    lifecycle.add_closeable(Recorder(log, "transport"))
    lifecycle.add_closeable(Recorder(log, "bus"))
    lifecycle.add_dispatcher(Recorder(log, "d1"))
    lifecycle.add_dispatcher(Recorder(log, "d2"))

    async def flush(timeout: float) -> None:
        assert timeout > 0
        log.append("flush copies")

    lifecycle.register_flush(flush, "copies")
    await lifecycle.start()
    assert log == ["start transport", "prepare d1", "prepare d2", "start d1", "start d2"]
    log.clear()
    assert await lifecycle.stop()
    assert log == ["stop d1", "stop d2", "flush copies", "close bus", "close transport"]
    assert await lifecycle.stop()  # a second stop waits for the first and changes nothing
    assert log == ["stop d1", "stop d2", "flush copies", "close bus", "close transport"]


async def test_dispatchers_prepare_at_once_and_a_failure_names_its_dispatcher() -> None:
    """Each prepare may wait for a broker's group join: they run at once, not one after
    another; the first that fails cancels the others and is the part the error names."""
    gate = asyncio.Event()
    cancelled: list[str] = []

    class Waits(Recorder):
        async def prepare(self) -> None:
            self.log.append(f"prepare {self.name}")
            try:
                await gate.wait()
            except asyncio.CancelledError:
                cancelled.append(self.name)
                raise

    class Fails(Recorder):
        async def prepare(self) -> None:
            self.log.append(f"prepare {self.name}")
            await asyncio.sleep(0.01)
            raise ConnectionError("group join refused")

    log: list[str] = []
    lifecycle = Lifecycle(shutdown_timeout=5)
    lifecycle.add_dispatcher(Waits(log, "d1"))
    lifecycle.add_dispatcher(Fails(log, "d2"))
    with pytest.raises(StartError) as caught:
        await asyncio.wait_for(lifecycle.start(), 5)
    assert log[:2] == ["prepare d1", "prepare d2"]  # d2 prepared while d1 still waited
    assert cancelled == ["d1"]
    assert caught.value.part == "receivers of d2"
    assert "group join refused" in str(caught.value)
    assert isinstance(caught.value.__cause__, ConnectionError)
    assert lifecycle.state is RuntimeState.STOPPED


async def test_a_flush_past_the_shutdown_timeout_is_cancelled_and_reported() -> None:
    lifecycle = Lifecycle(shutdown_timeout=0.05)
    cancelled = asyncio.Event()
    closed: list[str] = []

    async def slow(timeout: float) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    lifecycle.register_flush(slow, "slow copies")
    lifecycle.add_closeable(Recorder(closed, "transport"))
    await lifecycle.start()
    assert not await lifecycle.stop()
    assert cancelled.is_set()
    assert closed == ["close transport"]


class _Hangs:
    """A dispatcher (or closeable) whose stop ignores its timeout and never returns."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def start(self) -> None:
        pass

    async def _forever(self) -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return True

    async def stop(self, timeout: float | None = None) -> bool:
        return await self._forever()

    async def close(self) -> None:
        await self._forever()


async def test_a_dispatcher_or_a_close_that_ignores_the_timeout_is_cancelled_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lifecycle = Lifecycle(shutdown_timeout=0.05)
    dispatcher, closeable, closed = _Hangs(), _Hangs(), []
    lifecycle.add_dispatcher(dispatcher)
    lifecycle.add_closeable(Recorder(closed, "transport"))
    lifecycle.add_closeable(closeable, "stuck bus")
    await lifecycle.start()
    assert not await asyncio.wait_for(lifecycle.stop(), 10), "the budget bounds the whole stop"
    assert dispatcher.cancelled.is_set()
    assert closeable.cancelled.is_set()
    assert closed == ["close transport"], "the closes after a stuck one still run"
    assert "overran the shutdown timeout" in caplog.text
    assert "stuck bus" in caplog.text


async def test_stop_lets_a_command_in_flight_finish() -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    class SlowStore(InMemoryEventStore):
        async def append(self, stream: Any) -> None:
            entered.set()
            await gate.wait()
            await super().append(stream)

    from wow_core.runtime.container import create_container

    container = create_container(WowSettings())
    store = SlowStore()
    from dependency_injector import providers

    container.event_store.override(providers.Object(store))
    from wow_core.runtime.assembly import build_runtime

    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    await runtime.start()
    task = asyncio.create_task(
        runtime.gateway.send_and_wait(runtime.aggregates.command(Open("a")), timeout=5)
    )
    await asyncio.wait_for(entered.wait(), 5)
    stopping = asyncio.create_task(runtime.stop())
    await asyncio.sleep(0)
    assert not stopping.done()
    gate.set()
    assert await asyncio.wait_for(stopping, 5)
    result = await asyncio.wait_for(task, 5)
    assert result.succeeded
    assert len(store) == 1


async def test_the_command_receiver_is_runtime_owned_and_open(runtime: WowRuntime) -> None:
    receiver = runtime.command_dispatcher.receiver
    assert receiver is not None
    assert receiver.processing_open
    assert runtime.command_dispatcher.group == "bank.command"


@projection
class _SlowProjection:
    """Handles an opening for far longer than the shutdown timeout (a 20 s projection)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    @on_event
    async def opened(self, event: DomainEvent[Opened]) -> None:
        self.entered.set()
        await asyncio.sleep(20)


async def test_a_dispatcher_past_the_shutdown_timeout_is_named_in_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The warning names the dispatcher (its name, what it consumes, its functions) and
    says it overran the timeout, as the running page documents; no object repr."""
    slow = _SlowProjection()
    settings = WowSettings(runtime=RuntimeSettings(shutdown_timeout=0.2))
    runtime = WowApp("bank", aggregates=[Account], components=[slow]).runtime(settings)
    async with runtime:
        await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 10)), timeout=5)
        await asyncio.wait_for(slow.entered.wait(), 5)
        caplog.clear()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        "dispatcher bank.ProjectionDispatcher (events) [bank._SlowProjection.opened] overran the "
        "shutdown timeout (0.2s): work it held had not finished" in warnings
    ), warnings
    assert not any("object at 0x" in message for message in warnings), warnings


@projection
class _TwoHalves:
    """A projection of events and of state events: two dispatchers of one name."""

    @on_event
    def opened(self, event: DomainEvent[Opened]) -> None:
        pass

    @on_state_event
    def state(self, event: StateEvent[AccountState]) -> None:
        pass


def test_the_two_halves_of_an_event_dispatcher_are_told_apart_in_the_start_up_log() -> None:
    runtime = WowApp("bank", aggregates=[Account], components=[_TwoHalves()]).runtime(WowSettings())
    names = runtime.describe()["dispatchers"].split(", ")
    assert "bank.ProjectionDispatcher (events)" in names
    assert "bank.ProjectionDispatcher (state events)" in names
    assert len(names) == len(set(names)), names


async def test_a_start_up_that_waits_says_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # a broker that answers but never lets the member in held the start-up without a word
    from wow_core.runtime import runtime as runtime_module

    monkeypatch.setattr(runtime_module, "SLOW_START_WARNING", 0.05)
    joined = asyncio.Event()

    class Joining:
        name = "slow"

        async def start(self) -> None:
            await asyncio.sleep(0.2)
            joined.set()

    lifecycle = Lifecycle(shutdown_timeout=5)
    lifecycle.add_transport(Joining())
    with caplog.at_level(logging.WARNING, logger="wow.runtime"):
        await lifecycle.start()
        count = caplog.text.count("start-up still waits for the transport 'slow'")
        await asyncio.sleep(0.15)
    assert joined.is_set()
    assert count >= 2, caplog.text
    assert caplog.text.count("start-up still waits") == count, "not once it started"
    assert await lifecycle.stop()
