"""The gateway and the wait coordinator, over a bus that records what it was given."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from tests.accounts import Deposit
from wow_core.command import (
    CommandGateway,
    CommandStage,
    CommandValidationError,
    CommandWait,
    CommandWaitTimeoutError,
    ErrorCodes,
    VoidCommandWaitError,
    WaitCoordinator,
    WaitSignal,
)
from wow_core.messaging import MessageSubscription
from wow_core.model import AggregateId, CommandMessage, NamedAggregate, TopicKind

AGG = AggregateId(NamedAggregate("bank", "account"), "a-1")


class Transfer(BaseModel):
    source: str
    target: str
    amount: Annotated[int, Field(gt=0)]

    def violations(self) -> list[str]:
        return ["source and target must differ"] if self.source == self.target else []


class RecordingBus:
    """A command bus whose send completes when ``gate`` is set, recording each command."""

    topic_kind = TopicKind.COMMAND

    def __init__(self) -> None:
        self.sent: list[CommandMessage[Any]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.on_send: Any = None

    async def send(self, message: CommandMessage[Any]) -> None:
        await self.gate.wait()
        self.sent.append(message)
        if self.on_send is not None:
            self.on_send(message)

    def receiver(self, subscription: MessageSubscription) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        pass


def command(body: object = None, **fields: Any) -> CommandMessage[Any]:
    body = Deposit(5) if body is None else body
    return CommandMessage(aggregate_id=AGG, body=body, name=type(body).__name__, **fields)


@pytest.fixture
def bus() -> RecordingBus:
    return RecordingBus()


@pytest.fixture
def coordinator() -> WaitCoordinator:
    return WaitCoordinator()


@pytest.fixture
def gateway(bus: RecordingBus, coordinator: WaitCoordinator) -> CommandGateway:
    return CommandGateway(bus, coordinator, default_timeout=5)  # type: ignore[arg-type]


async def test_sent_is_the_completed_send(gateway: CommandGateway, bus: RecordingBus) -> None:
    cmd = command()
    result = await gateway.send(cmd)
    assert result.stage is CommandStage.SENT
    assert result.succeeded
    assert bus.sent == [cmd]
    assert (result.command_id, result.aggregate_id) == (cmd.id, AGG)


async def test_sent_does_not_complete_before_the_send_did(gateway: CommandGateway, bus: RecordingBus) -> None:
    bus.gate.clear()
    task = asyncio.create_task(gateway.send(command()))
    await asyncio.sleep(0)
    assert not task.done()
    bus.gate.set()
    assert (await asyncio.wait_for(task, 5)).stage is CommandStage.SENT


async def test_processed_completes_on_the_signal(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    bus.on_send = lambda m: asyncio.get_running_loop().call_soon(
        coordinator.signal,
        WaitSignal(m.id, CommandStage.PROCESSED, AGG, 3, result={"balance": 5}),
    )
    result = await gateway.send_and_wait(command(), CommandWait.processed())
    assert (result.stage, result.aggregate_version, dict(result.result)) == (
        CommandStage.PROCESSED,
        3,
        {"balance": 5},
    )
    assert len(coordinator) == 0


async def test_a_later_stage_waits_past_processed(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    sent = asyncio.Event()
    bus.on_send = lambda m: sent.set()
    cmd = command()
    task = asyncio.create_task(gateway.send_and_wait(cmd, CommandWait.projected(processor_name="balances")))
    await asyncio.wait_for(sent.wait(), 5)
    coordinator.signal(WaitSignal(cmd.id, CommandStage.PROCESSED, AGG, 1))
    coordinator.signal(WaitSignal(cmd.id, CommandStage.EVENT_HANDLED, AGG, 1))
    coordinator.signal(WaitSignal(cmd.id, CommandStage.PROJECTED, AGG, 1, processor_name="other"))
    await asyncio.sleep(0)
    assert not task.done()
    coordinator.signal(WaitSignal(cmd.id, CommandStage.PROJECTED, AGG, 1, processor_name="balances"))
    result = await asyncio.wait_for(task, 5)
    assert (result.stage, result.processor_name, result.wait_stage) == (
        CommandStage.PROJECTED,
        "balances",
        CommandStage.PROJECTED,
    )
    assert len(coordinator) == 0


async def test_a_rejection_ends_a_wait_for_a_later_stage(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    bus.on_send = lambda m: asyncio.get_running_loop().call_soon(
        coordinator.signal,
        WaitSignal(m.id, CommandStage.PROCESSED, AGG, 0, error_code="INSUFFICIENT_FUNDS", error_msg="no"),
    )
    result = await gateway.send_and_wait(command(), CommandWait.saga_handled())
    assert (result.stage, result.error_code, result.error_msg) == (
        CommandStage.PROCESSED,
        "INSUFFICIENT_FUNDS",
        "no",
    )
    assert not result.succeeded


async def test_a_duplicate_ends_a_wait_for_a_later_stage_with_the_original(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    original = AggregateId(AGG.named_aggregate, "original")
    bus.on_send = lambda m: asyncio.get_running_loop().call_soon(
        coordinator.signal,
        WaitSignal(m.id, CommandStage.PROCESSED, original, 1, duplicate=True, final=True),
    )
    result = await gateway.send_and_wait(command(), CommandWait.projected())
    assert result.duplicate
    assert result.succeeded
    assert (result.aggregate_id, result.aggregate_version) == (original, 1)


async def test_a_failed_event_stage_does_not_end_a_wait_for_another_one(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    sent = asyncio.Event()
    bus.on_send = lambda m: sent.set()
    cmd = command()
    task = asyncio.create_task(gateway.send_and_wait(cmd, CommandWait.projected()))
    await asyncio.wait_for(sent.wait(), 5)
    coordinator.signal(WaitSignal(cmd.id, CommandStage.SAGA_HANDLED, error_code="BOOM"))
    await asyncio.sleep(0)
    assert not task.done()
    coordinator.signal(WaitSignal(cmd.id, CommandStage.PROJECTED, error_code="PROJECTION_FAILED"))
    result = await asyncio.wait_for(task, 5)
    assert result.error_code == "PROJECTION_FAILED"


async def test_the_timeout_names_command_stage_and_last_stage(
    gateway: CommandGateway, coordinator: WaitCoordinator
) -> None:
    cmd = command()
    with pytest.raises(CommandWaitTimeoutError) as caught:
        await gateway.send_and_wait(cmd, CommandWait.processed(), timeout=0.05)
    error = caught.value
    assert (error.command_id, error.wait_stage, error.last_stage) == (cmd.id, CommandStage.PROCESSED, "SENT")
    assert cmd.id in str(error)
    assert "Deposit" in str(error)
    assert "waiting for PROCESSED" in str(error)
    assert "last stage reached: SENT" in str(error)
    assert isinstance(error, TimeoutError)
    assert len(coordinator) == 0


async def test_the_timeout_reports_the_last_stage_reached(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    bus.on_send = lambda m: coordinator.signal(WaitSignal(m.id, CommandStage.PROCESSED, AGG, 1))
    with pytest.raises(CommandWaitTimeoutError, match="last stage reached: PROCESSED") as caught:
        await gateway.send_and_wait(command(), CommandWait.event_handled(), timeout=0.05)
    assert caught.value.last_stage is CommandStage.PROCESSED
    assert len(coordinator) == 0


async def test_a_send_that_never_completes_times_out_too(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    bus.gate.clear()
    with pytest.raises(CommandWaitTimeoutError, match="not even SENT"):
        await gateway.send_and_wait(command(), CommandWait.processed(), timeout=0.05)
    with pytest.raises(CommandWaitTimeoutError, match="waiting for SENT"):
        await gateway.send(command())
    assert len(coordinator) == 0


async def test_the_default_deadline_applies(bus: RecordingBus, coordinator: WaitCoordinator) -> None:
    gateway = CommandGateway(bus, coordinator, default_timeout=0.05)  # type: ignore[arg-type]
    with pytest.raises(CommandWaitTimeoutError, match=r"after 0\.05s"):
        await gateway.send_and_wait(command())
    assert len(coordinator) == 0


async def test_a_cancelled_caller_only_stops_waiting(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    sent = asyncio.Event()
    bus.on_send = lambda m: sent.set()
    cmd = command()
    task = asyncio.create_task(gateway.send_and_wait(cmd))
    await asyncio.wait_for(sent.wait(), 5)
    assert coordinator.waiting(cmd.id)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(coordinator) == 0
    assert bus.sent == [cmd]
    coordinator.signal(WaitSignal(cmd.id, CommandStage.PROCESSED))  # a late signal is dropped


async def test_the_registration_is_removed_after_a_send_error(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator
) -> None:
    def fail(message: CommandMessage[Any]) -> None:
        raise ConnectionError("broker down")

    bus.on_send = fail
    with pytest.raises(ConnectionError):
        await gateway.send_and_wait(command())
    assert len(coordinator) == 0


@pytest.mark.parametrize(
    "plan",
    [
        CommandWait.processed(),
        CommandWait.snapshot(),
        CommandWait.projected(),
        CommandWait.event_handled(),
        CommandWait.saga_handled(),
    ],
)
async def test_a_void_command_refuses_a_plan_without_void_support_before_sending(
    gateway: CommandGateway, bus: RecordingBus, coordinator: WaitCoordinator, plan: Any
) -> None:
    with pytest.raises(VoidCommandWaitError, match="Void"):
        await gateway.send_and_wait(command(is_void=True), plan)
    assert bus.sent == []
    assert len(coordinator) == 0


async def test_a_void_command_can_be_sent(gateway: CommandGateway, bus: RecordingBus) -> None:
    cmd = command(is_void=True)
    assert (await gateway.send_and_wait(cmd, CommandWait.sent())).stage is CommandStage.SENT
    assert (await gateway.send(command(is_void=True))).succeeded
    assert len(bus.sent) == 2


async def test_an_invalid_body_is_refused_before_sending_listing_violations(
    gateway: CommandGateway, bus: RecordingBus
) -> None:
    with pytest.raises(CommandValidationError) as caught:
        await gateway.send_and_wait(command(Deposit(-1)))
    assert caught.value.code == ErrorCodes.COMMAND_INVALID
    assert [v.path for v in caught.value.violations] == ["amount"]
    with pytest.raises(CommandValidationError, match="source and target must differ"):
        await gateway.send(command(Transfer(source="a", target="a", amount=1)))
    assert bus.sent == []


async def test_one_wait_per_command_id(gateway: CommandGateway, coordinator: WaitCoordinator) -> None:
    from wow_core.command import DuplicateWaitError

    cmd = command()
    coordinator.register(cmd, CommandWait.processed())
    with pytest.raises(DuplicateWaitError):
        await gateway.send_and_wait(cmd, timeout=0.05)


def test_stage_ranks_order_sent_processed_then_the_event_stages() -> None:
    assert CommandStage.SENT.rank < CommandStage.PROCESSED.rank < CommandStage.PROJECTED.rank
    assert CommandStage.PROJECTED.rank == CommandStage.SAGA_HANDLED.rank
    assert str(CommandWait.projected("bank", "balances")) == "PROJECTED(bank.balances)"


async def test_the_send_is_attributed_to_the_gateway_and_the_caller_context_restored(
    gateway: CommandGateway, bus: RecordingBus
) -> None:
    from wow_core.metrics import metrics_source

    seen: list[str] = []
    bus.on_send = lambda m: seen.append(metrics_source.get())
    await gateway.send(command())
    assert seen == ["gateway"]
    assert metrics_source.get() == ""
    token = metrics_source.set("saga:notice")
    try:
        await gateway.send(command())
    finally:
        metrics_source.reset(token)
    assert seen == ["gateway", "saga:notice"]


def test_the_memo_of_valid_bodies_stays_bounded_and_forgets_the_oldest_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wow_core.command import validation

    monkeypatch.setattr(validation, "_RECENT_LIMIT", 4)
    monkeypatch.setattr(validation, "_recent_valid", type(validation._recent_valid)())
    bodies = [Deposit(n + 1) for n in range(6)]
    for body in bodies:
        assert validation.validate_body(body) == []
    assert list(validation._recent_valid.values()) == bodies[2:]
    invalid = Transfer(source="a", target="a", amount=1)
    assert validation.validate_body(invalid) != []
    assert invalid not in validation._recent_valid.values()
