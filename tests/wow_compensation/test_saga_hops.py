"""A command a saga sent that its aggregate rejects is a record of the saga function on
the event it handled, retried by running the saga function again (the reference system
records nothing here).

The ``Sweep`` saga of :mod:`tests.wow_compensation.domain` pays a fee and withdraws a
deposit from a source account that is short of money, on the in-memory runtime with the
scheduler every 50 ms.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.accounts import ACCOUNT, Account, AccountState, Deposit, Open, Withdraw
from tests.wow_compensation.domain import Sweep
from wow_compensation.model import ExecutionFailedStatus, FunctionInfo, FunctionKindName, Recoverable
from wow_compensation.recorder import CompensationFailureRecorder
from wow_compensation.store import ExecutionRecord, RecordQuery, query
from wow_core import WowApp
from wow_core.command import CommandWait
from wow_core.command.origin import SAGA_FUNCTION, InvalidSagaOriginError, SagaOrigin
from wow_core.model import AggregateId
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually


@dataclass
class Bank:
    runtime: WowRuntime
    sweep: Sweep
    recorder: CompensationFailureRecorder

    async def open(self, owner: str) -> str:
        result = await self.runtime.gateway.send_and_wait(self.runtime.aggregates.command(Open(owner)))
        assert result.succeeded, result
        assert result.aggregate_id is not None
        return result.aggregate_id.id

    async def deposit(self, account: str, amount: int) -> None:
        result = await self.runtime.gateway.send_and_wait(
            self.runtime.aggregates.command(Deposit(amount), account), CommandWait.processed()
        )
        assert result.succeeded, result

    async def balance(self, account: str) -> int:
        metadata = self.runtime.aggregates.get(ACCOUNT)
        assert metadata is not None
        _, state = await self.runtime.kernel.load_state(metadata, AggregateId(ACCOUNT, account))
        assert isinstance(state, AccountState)
        return state.balance

    async def records(self) -> list[ExecutionRecord]:
        return list((await query(self.recorder.store, RecordQuery(processor="Sweep"))).items)

    async def settled(self, status: ExecutionFailedStatus, retries: int = 0) -> ExecutionRecord:
        """The one Sweep record once it is in ``status`` after at least ``retries`` retries
        (the scheduler keeps retrying a failed record: a later attempt may be seen first)."""
        found: list[ExecutionRecord] = []

        async def reached() -> bool:
            found[:] = [
                r
                for r in await self.records()
                if r.state.status is status and r.state.retry_state.retries >= retries
            ]
            return len(found) == 1

        await eventually(reached, 30, f"the Sweep record {status.value}")
        return found[0]


@pytest.fixture
async def bank(fast_compensation: dict[str, str]) -> AsyncIterator[Bank]:
    sweep = Sweep()
    runtime = WowApp("bank", aggregates=[Account], components=[sweep]).runtime(
        WowSettings(service_name="bank")
    )
    recorders = {
        id(d.handler.recorder): d.handler.recorder
        for d in (runtime.event_dispatch.dispatchers if runtime.event_dispatch else ())
    }
    [recorder] = [r for r in recorders.values() if isinstance(r, CompensationFailureRecorder)]
    async with runtime:
        yield Bank(runtime, sweep, recorder)


async def test_a_rejected_saga_command_is_recorded_and_retried_until_it_passes(bank: Bank) -> None:
    fees, source, into = await bank.open("fees"), await bank.open("source"), await bank.open("into")
    bank.sweep.fees, bank.sweep.source, bank.sweep.into = fees, source, into
    await bank.deposit(into, 5)
    # The fee went through, the withdrawal was rejected: the hop is a record of the saga.
    record = await bank.settled(ExecutionFailedStatus.FAILED)
    state = record.state
    assert state.function == FunctionInfo("bank", "Sweep", "swept", FunctionKindName.EVENT)
    assert state.event is not None
    assert (state.event.aggregate_id, state.event.version, state.event.event_name) == (into, 2, "Deposited")
    assert state.error is not None
    assert state.error.error_type == "INSUFFICIENT_FUNDS"
    assert "Withdraw" in state.error.message
    assert source in state.error.message
    assert state.recoverable is Recoverable.UNKNOWN
    # The scheduler re-runs the saga function: the fee is a duplicate, the withdrawal is
    # rejected again, so the compensation fails (the saga waits for its commands).
    retried = await bank.settled(ExecutionFailedStatus.FAILED, retries=1)
    assert retried.state.error is not None
    assert retried.state.error.error_type == "INSUFFICIENT_FUNDS"  # the same name on every attempt
    assert await bank.balance(fees) == 1
    # The operator's fix: money on the source account; the next retry passes.
    await bank.deposit(source, 10)
    done = await bank.settled(ExecutionFailedStatus.SUCCEEDED)
    assert done.id == record.id
    assert await bank.balance(source) == 5
    assert await bank.balance(fees) == 1  # the fee was paid once, however often the saga ran
    assert len(await bank.records()) == 1


async def test_a_command_with_a_partial_saga_origin_is_decided_and_not_recorded(bank: Bank) -> None:
    source = await bank.open("source")
    command = bank.runtime.aggregates.command(Withdraw(3), source, header={SAGA_FUNCTION: "swept"})
    result = await bank.runtime.gateway.send_and_wait(command, CommandWait.processed())
    assert result.error_code == "INSUFFICIENT_FUNDS"  # decided and answered, not redelivered
    assert await bank.records() == []


def test_a_saga_origin_is_all_or_nothing_and_checked() -> None:
    origin = SagaOrigin("bank", "Sweep", "swept", "EVENT", "e1", "deposited", "bank", "account", "a1", 2)
    header = origin.to_header()
    assert SagaOrigin.from_header(header) == origin
    assert SagaOrigin.from_header({}) is None
    with pytest.raises(InvalidSagaOriginError, match=r"saga\.event\.id"):
        SagaOrigin.from_header({k: v for k, v in header.items() if k != "saga.event.id"})
    with pytest.raises(InvalidSagaOriginError, match="positive integer"):
        SagaOrigin.from_header({**header, "saga.event.version": "two"})
    with pytest.raises(InvalidSagaOriginError, match="EVENT or STATE_EVENT"):
        SagaOrigin.from_header({**header, "saga.function_kind": "COMMAND"})
