"""Chain waits (``CommandWait.chain``), streaming waits (``send_and_wait_stream``) and
``WaitCoordinator.forward``.

The coordinator-level tests feed signals by hand, in the orders that different
processes can produce them; the runtime-level tests run the bank example, whose
``TransferNoticeSaga`` sends a ``RecordNotice`` command for every completed transfer.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from examples.bank.app import app as bank_app
from examples.bank.domain import CompleteTransfer, Deposit, OpenAccount, PrepareTransfer, Withdraw
from examples.bank.saga import NOTICE

from wow_core.command import (
    CommandResult,
    CommandStage,
    CommandWait,
    CommandWaitTimeoutError,
    ErrorCodes,
    WaitCoordinator,
    WaitSignal,
)
from wow_core.command.endpoint import (
    WAIT_ENDPOINT,
    WAIT_ROOT,
    WAIT_STAGE,
    WAIT_TAIL_STAGE,
    InvalidWaitEndpointError,
    WaitContext,
    WaitEndpoint,
    write_wait_context,
)
from wow_core.command.notifier import RemoteSignals, WaitSignalSink
from wow_core.command.signal_wire import SignalDecodeError, decode_signal, encode_signal
from wow_core.model import AggregateId, CommandMessage, Header, NamedAggregate
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings

ACCOUNT = AggregateId(NamedAggregate("bank", "account"), "a-1")
CHAIN = CommandWait.chain(CommandWait.saga_handled(processor_name="Notices"), CommandWait.processed())


def command() -> CommandMessage[Any]:
    return CommandMessage(ACCOUNT, Deposit(1), "Deposit")


def saga_handled(root: str, *sent: str, is_last: bool = True, processor: str = "Notices") -> WaitSignal:
    return WaitSignal(
        root, CommandStage.SAGA_HANDLED, ACCOUNT, 2, processor_name=processor, is_last=is_last, commands=sent
    )


def hop(root: str, child: str, **fields: Any) -> WaitSignal:
    notice = AggregateId(NOTICE, child)
    return WaitSignal(child, CommandStage.PROCESSED, notice, 1, root_id=root, **fields)


async def registered(plan: Any = CHAIN) -> tuple[WaitCoordinator, Any]:
    coordinator = WaitCoordinator()
    return coordinator, coordinator.register(command(), plan)


# -- chains, signal by signal ---------------------------------------------------------------


class TestAChainWait:
    async def test_completes_when_the_saga_and_every_command_it_sent_reached_the_next_hop(self) -> None:
        coordinator, waiter = await registered()
        root = waiter.command.id
        coordinator.receive(WaitSignal(root, CommandStage.PROCESSED, ACCOUNT, 2, result={"balance": 1}))
        coordinator.receive(saga_handled(root, "n-1", "n-2"))
        assert not waiter.future.done()
        coordinator.receive(hop(root, "n-1"))
        assert not waiter.future.done(), "one of the saga's two commands is still to be processed"
        coordinator.receive(hop(root, "n-2"))
        result: CommandResult = waiter.future.result()
        assert (result.command_id, result.chain_command_id) == (root, "n-2")
        assert result.stage is CommandStage.PROCESSED
        assert result.wait_stage is CommandStage.SAGA_HANDLED
        assert result.aggregate_id == AggregateId(NOTICE, "n-2")
        assert result.succeeded

    async def test_keeps_the_next_hops_signals_that_arrive_before_the_sagas_own(self) -> None:
        # the saga's command is processed in another process, whose signal can overtake
        # the saga's SAGA_HANDLED
        coordinator, waiter = await registered()
        root = waiter.command.id
        assert coordinator.receive(hop(root, "n-1"))
        assert not waiter.future.done()
        coordinator.receive(saga_handled(root, "n-1"))
        assert waiter.future.result().chain_command_id == "n-1"

    async def test_collects_the_commands_sent_for_every_event_of_the_stream(self) -> None:
        coordinator, waiter = await registered()
        root = waiter.command.id
        coordinator.receive(saga_handled(root, "n-1", is_last=False))
        coordinator.receive(saga_handled(root, "n-2"))
        coordinator.receive(hop(root, "n-2"))
        assert not waiter.future.done(), "n-1, sent for the stream's first event, is still due"
        coordinator.receive(hop(root, "n-1"))
        assert waiter.future.result().chain_command_id == "n-1"

    async def test_ends_with_the_first_rejection_of_a_command_the_saga_sent(self) -> None:
        coordinator, waiter = await registered()
        root = waiter.command.id
        coordinator.receive(saga_handled(root, "n-1", "n-2"))
        coordinator.receive(
            hop(root, "n-1", error_code=ErrorCodes.DUPLICATE_AGGREGATE_ID, error_msg="exists", final=True)
        )
        result = waiter.future.result()
        assert result.error_code == ErrorCodes.DUPLICATE_AGGREGATE_ID
        assert result.chain_command_id == "n-1"

    async def test_of_a_saga_that_sent_nothing_ends_at_the_sagas_stage(self) -> None:
        coordinator, waiter = await registered()
        coordinator.receive(saga_handled(waiter.command.id))
        result = waiter.future.result()
        assert result.stage is CommandStage.SAGA_HANDLED
        assert result.chain_command_id == ""

    async def test_ignores_another_saga_and_ends_on_a_failed_saga(self) -> None:
        coordinator, waiter = await registered()
        root = waiter.command.id
        coordinator.receive(saga_handled(root, "x-1", processor="Other"))
        assert not waiter.future.done()
        failed = saga_handled(root)
        failed.error_code = ErrorCodes.PROCESSING_ERROR
        coordinator.receive(failed)
        assert waiter.future.result().error_code == ErrorCodes.PROCESSING_ERROR

    async def test_ends_when_the_first_command_is_rejected(self) -> None:
        coordinator, waiter = await registered()
        coordinator.receive(
            WaitSignal(
                waiter.command.id, CommandStage.PROCESSED, ACCOUNT, error_code="INSUFFICIENT", final=True
            )
        )
        assert waiter.future.result().error_code == "INSUFFICIENT"

    async def test_a_signal_of_a_saga_command_is_not_taken_by_a_plain_wait(self) -> None:
        coordinator, waiter = await registered(CommandWait.saga_handled())
        coordinator.receive(hop(waiter.command.id, "n-1"))
        assert not waiter.future.done()


class TestAChainPlan:
    def test_starts_at_a_saga_and_has_one_hop_past_sent(self) -> None:
        assert str(CHAIN) == "SAGA_HANDLED(Notices) -> PROCESSED"
        with pytest.raises(ValueError, match="saga_handled"):
            CommandWait.chain(CommandWait.projected(), CommandWait.processed())
        with pytest.raises(ValueError, match="past SENT"):
            CommandWait.chain(CommandWait.saga_handled(), CommandWait.sent())
        with pytest.raises(ValueError, match="one hop"):
            CommandWait.chain(CommandWait.saga_handled(), CHAIN)

    def test_travels_in_the_header_and_onward_to_the_sagas_commands(self) -> None:
        header = Header()
        write_wait_context(header, CHAIN, "redis:wow:wait:p1")
        assert header[WAIT_STAGE] == "SAGA_HANDLED"
        assert header[WAIT_TAIL_STAGE] == "PROCESSED"
        context = WaitContext.of(header)
        assert context is not None
        assert context.plan == CHAIN
        onward = context.onward("root-1", "bank", "Notices", "completed")
        assert onward == WaitContext("redis:wow:wait:p1", CommandWait.processed(), "root-1")
        assert context.onward("root-1", "bank", "Other", "completed") is None, "another saga's commands"
        child = Header()
        assert onward is not None
        onward.write(child)
        assert (child[WAIT_STAGE], child[WAIT_ROOT]) == ("PROCESSED", "root-1")
        assert WAIT_TAIL_STAGE not in child
        second = WaitContext.of(child)
        assert second is not None
        assert second.onward("child", "bank", "Notices", "completed") is None, "one hop only"

    @pytest.mark.parametrize(
        ("header", "message"),
        [
            ({WAIT_ENDPOINT: "redis:x", WAIT_STAGE: "FINISHED"}, "not a wait stage"),
            ({WAIT_ENDPOINT: "redis:x", WAIT_STAGE: "SENT"}, "SENT is never"),
            ({WAIT_ENDPOINT: "redis:x"}, "without command_wait_stage"),
            ({WAIT_ENDPOINT: "no-kind", WAIT_STAGE: "PROCESSED"}, "not a wait endpoint"),
            ({WAIT_ENDPOINT: "redis:x", WAIT_STAGE: "PROJECTED", WAIT_TAIL_STAGE: "PROCESSED"}, "head"),
            ({WAIT_ENDPOINT: "redis:x", WAIT_STAGE: "PROCESSED", WAIT_ROOT: "r" * 300}, "longer than"),
        ],
    )
    def test_read_from_a_malformed_header_is_refused(self, header: dict[str, str], message: str) -> None:
        with pytest.raises(InvalidWaitEndpointError, match=message):
            WaitContext.of(header)


class TestTheWireForm:
    def test_carries_the_chain_fields_only_when_set(self) -> None:
        plain = WaitSignal("c-1", CommandStage.PROCESSED, ACCOUNT, 1)
        assert "root_id" not in encode_signal(plain)
        chained = WaitSignal("n-1", CommandStage.SAGA_HANDLED, ACCOUNT, 1, root_id="c-1", commands=("a", "b"))
        decoded = decode_signal(encode_signal(chained))
        assert (decoded.root_id, decoded.commands) == ("c-1", ("a", "b"))

    @pytest.mark.parametrize(
        "fields",
        [
            {"commands": ["x"] * 10_001},
            {"commands": [1, 2]},
            {"commands": [""]},
            {"root_id": "r" * 256},
            {"root_id": 7},
        ],
        ids=["too-many-commands", "ids-not-text", "empty-id", "long-root", "root-not-text"],
    )
    def test_refuses_hostile_chain_fields(self, fields: dict[str, Any]) -> None:
        import json

        raw = json.loads(encode_signal(WaitSignal("c-1", CommandStage.SAGA_HANDLED)))
        raw.update(fields)
        with pytest.raises(SignalDecodeError):
            decode_signal(json.dumps(raw))


# -- forward: executing a command for a wait registered in another process ---------------


class Loopback:
    """A notifier between two coordinators of this test, through the wire form."""

    kind = "loop"

    def __init__(self, sink: WaitSignalSink) -> None:
        self.sink = sink

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        raise NotImplementedError

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        self.sink(encode_signal(signal))

    async def close(self) -> None:
        return None


class TestForward:
    async def test_signals_the_waiter_named_by_a_context_from_another_envelope(self) -> None:
        caller = WaitCoordinator("loop:caller")
        intake = WaitCoordinator("loop:intake")
        intake.remote = RemoteSignals(Loopback(WaitSignalSink(caller.receive)))
        sent = command()
        waiter = caller.register(sent, CommandWait.processed())
        # the intake received the command bare, its wait context beside it
        context = WaitContext("loop:caller", CommandWait.processed())
        executed = intake.forward(sent.copy(), context)
        assert executed.header[WAIT_ENDPOINT] == "loop:caller"
        assert intake.forwarded == 1
        intake.route(executed.header, WaitSignal(sent.id, CommandStage.PROCESSED, ACCOUNT, 1))
        result = await asyncio.wait_for(waiter.future, 5)
        assert (result.stage, result.aggregate_version) == (CommandStage.PROCESSED, 1)

    async def test_without_a_context_strips_a_stale_one(self) -> None:
        intake = WaitCoordinator("loop:intake")
        stale = command()
        write_wait_context(stale.header, CHAIN, "loop:gone")
        stale.header[WAIT_ROOT] = "old"
        stale.with_read_only()
        executed = intake.forward(stale, None)
        assert not [key for key in executed.header if key.startswith("command_wait_")]
        assert stale.header[WAIT_ENDPOINT] == "loop:gone", "the read-only original is untouched"


# -- the bank example: chains and streams through a runtime -----------------------------


async def transfer(runtime: WowRuntime) -> str:
    """A prepared transfer of 70 from ann to bob, ready to complete; its id."""
    build = runtime.aggregates.command
    send = runtime.gateway.send_and_wait
    ann = (await send(build(OpenAccount("ann", 100)))).aggregate_id
    bob = (await send(build(OpenAccount("bob", 0)))).aggregate_id
    assert ann is not None
    assert bob is not None
    prepared = (await send(build(PrepareTransfer(ann.id, bob.id, 70)))).aggregate_id
    assert prepared is not None
    await send(build(Withdraw(70, prepared.id), ann.id))
    await send(build(Deposit(70, prepared.id), bob.id))
    return prepared.id


@pytest.fixture
async def bank() -> Any:
    runtime = bank_app.runtime(WowSettings(service_name="bank-chains"))
    async with runtime:
        yield runtime


async def test_a_chain_wait_returns_when_the_sagas_command_was_processed(bank: WowRuntime) -> None:
    tid = await transfer(bank)
    plan = CommandWait.chain(
        CommandWait.saga_handled(processor_name="TransferNoticeSaga"), CommandWait.processed()
    )
    result = await bank.gateway.send_and_wait(
        bank.aggregates.command(CompleteTransfer(), tid), plan, timeout=10
    )
    assert result.succeeded, result
    assert result.stage is CommandStage.PROCESSED
    assert result.aggregate_id == AggregateId(NOTICE, tid)
    assert result.chain_command_id
    # PROCESSED of the notice: it is stored when the chain wait returns, not later
    assert await bank.event_store.last_version(AggregateId(NOTICE, tid)) == 1
    assert len(bank.coordinator) == 0


async def test_a_stream_yields_each_stage_in_order(bank: WowRuntime) -> None:
    build = bank.aggregates.command
    stages = [
        (r.stage, r.processor_name)
        async for r in bank.gateway.send_and_wait_stream(build(OpenAccount("cy", 5)), CommandWait.projected())
    ]
    assert stages == [
        (CommandStage.SENT, ""),
        (CommandStage.PROCESSED, ""),
        (CommandStage.PROJECTED, "BankSummary"),
    ]
    assert len(bank.coordinator) == 0


async def test_a_stream_of_a_chain_yields_the_saga_then_its_command(bank: WowRuntime) -> None:
    tid = await transfer(bank)
    plan = CommandWait.chain(CommandWait.saga_handled(), CommandWait.processed())
    results = [
        r
        async for r in bank.gateway.send_and_wait_stream(
            bank.aggregates.command(CompleteTransfer(), tid), plan
        )
    ]
    assert [r.stage for r in results] == [
        CommandStage.SENT,
        CommandStage.PROCESSED,
        CommandStage.SAGA_HANDLED,
        CommandStage.PROCESSED,
    ]
    assert results[-1].aggregate_id == AggregateId(NOTICE, tid)


async def test_a_stream_ends_early_with_a_rejection(bank: WowRuntime) -> None:
    build = bank.aggregates.command
    ann = (await bank.gateway.send_and_wait(build(OpenAccount("dee", 1)))).aggregate_id
    assert ann is not None
    results = [
        r
        async for r in bank.gateway.send_and_wait_stream(
            build(Withdraw(1_000), ann.id), CommandWait.projected()
        )
    ]
    assert [r.stage for r in results] == [CommandStage.SENT, CommandStage.PROCESSED]
    assert not results[-1].succeeded


async def test_a_stream_past_its_deadline_names_the_last_stage(bank: WowRuntime) -> None:
    build = bank.aggregates.command
    plan = CommandWait.projected(processor_name="NoSuchProjection")
    seen: list[CommandStage] = []

    async def read() -> None:
        async for result in bank.gateway.send_and_wait_stream(
            build(OpenAccount("eve", 1)), plan, timeout=0.5
        ):
            seen.append(result.stage)

    with pytest.raises(CommandWaitTimeoutError) as timed_out:
        await read()
    # BankSummary projected the command: the stage was reached, by another function than
    # the one waited for, which is not yielded as if it were the end
    assert timed_out.value.last_stage is CommandStage.PROJECTED
    assert seen == [CommandStage.SENT, CommandStage.PROCESSED]
    assert len(bank.coordinator) == 0


async def test_leaving_a_stream_early_ends_its_wait(bank: WowRuntime) -> None:
    build = bank.aggregates.command
    stream = bank.gateway.send_and_wait_stream(build(OpenAccount("fay", 1)), CommandWait.projected())
    async with contextlib.aclosing(stream):
        async for result in stream:
            assert result.stage is CommandStage.SENT
            break
    assert len(bank.coordinator) == 0


async def test_a_stream_for_sent_yields_one_result() -> None:
    runtime = bank_app.runtime(WowSettings(service_name="bank-sent"))
    async with runtime:
        build = runtime.aggregates.command
        results = [
            r
            async for r in runtime.gateway.send_and_wait_stream(
                build(OpenAccount("gus", 1)), CommandWait.sent()
            )
        ]
        assert [r.stage for r in results] == [CommandStage.SENT]
