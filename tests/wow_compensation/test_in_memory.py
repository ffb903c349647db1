"""Event compensation end to end on the in-memory runtime: the five paths (normal,
retryable, unrecoverable, idempotent replay, manual), a waived function, and refusals.

Each test runs the ``bank`` service of :mod:`tests.wow_compensation.domain` with
``WOW_FAILURE_RECORDER=compensation`` and a scheduler every 50 ms.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.accounts import ACCOUNT, Account, Deposit, Open
from tests.wow_compensation.domain import Ledger
from wow_compensation.model import (
    ExecutionFailedStatus,
    FunctionInfo,
    FunctionKindName,
    Recoverable,
    Refused,
    RetrySpec,
    execution_id,
)
from wow_compensation.recorder import CompensationFailureRecorder
from wow_compensation.service import ActionRefused, UnknownExecutionError
from wow_compensation.store import ExecutionRecord, Queue, RecordQuery, query
from wow_core import WowApp
from wow_core.command import CommandWait
from wow_core.event.failure import ProcessingOutcome
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware.metrics import PROCESSING_OUTCOMES
from wow_core.model import AggregateId
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually


@dataclass
class Service:
    runtime: WowRuntime
    ledger: Ledger
    recorder: CompensationFailureRecorder

    async def open(self, owner: str = "ann") -> str:
        result = await self.runtime.gateway.send_and_wait(
            self.runtime.aggregates.command(Open(owner)), CommandWait.processed()
        )
        assert result.succeeded, result
        assert result.aggregate_id is not None
        return result.aggregate_id.id

    async def deposit(self, account: str, amount: int = 5) -> None:
        """Deposit; the command is processed (a failing projection fails only the wait)."""
        result = await self.runtime.gateway.send_and_wait(
            self.runtime.aggregates.command(Deposit(amount), account), CommandWait.processed()
        )
        assert result.succeeded, result

    async def records(self, **filters: object) -> list[ExecutionRecord]:
        page = await query(self.recorder.store, RecordQuery(**filters))  # type: ignore[arg-type]
        return list(page.items)

    async def one(self, function: str) -> ExecutionRecord:
        found: list[ExecutionRecord] = []

        async def recorded() -> bool:
            found[:] = await self.records(function=function)
            return len(found) == 1

        await eventually(recorded, 5, f"one record of {function}")
        return found[0]

    async def settled(
        self, record_id: str, status: ExecutionFailedStatus, retries: int | None = None
    ) -> ExecutionRecord:
        found: list[ExecutionRecord] = []

        async def reached() -> bool:
            record = await self.recorder.store.get(record_id)
            if record is None or record.state.status is not status:
                return False
            if retries is not None and record.state.retry_state.retries != retries:
                return False
            found[:] = [record]
            return True

        await eventually(reached, 5, f"{record_id} {status.value}")
        return found[0]

    def outcomes(self, outcome: ProcessingOutcome) -> float:
        metrics = self.runtime.metrics
        assert isinstance(metrics, InMemoryMetrics)
        return metrics.counter_value(PROCESSING_OUTCOMES, outcome=outcome.value)


@pytest.fixture
async def service(fast_compensation: dict[str, str]) -> AsyncIterator[Service]:
    ledger = Ledger()
    app = WowApp("bank", aggregates=[Account], components=[ledger])
    runtime = app.runtime(WowSettings(service_name="bank", metrics="in_memory"))
    [recorder] = _recorders(runtime)
    async with runtime:
        yield Service(runtime, ledger, recorder)


def _recorders(runtime: WowRuntime) -> list[CompensationFailureRecorder]:
    """The recorder the runtime's handlers record with (the one the settings selected)."""
    assert runtime.event_dispatch is not None
    recorders = {
        id(dispatcher.handler.recorder): dispatcher.handler.recorder
        for dispatcher in runtime.event_dispatch.dispatchers
    }
    return [r for r in recorders.values() if isinstance(r, CompensationFailureRecorder)]


async def test_normal_path_records_nothing(service: Service) -> None:
    account = await service.open()
    await service.deposit(account)
    await eventually(lambda: _handled(service, "deposited", 1), 5, "the deposit projected")
    assert service.ledger.journal.count("opened") == 1
    assert service.ledger.journal.count("deposited") == 1
    assert await service.records() == []
    assert service.outcomes(ProcessingOutcome.FAILURE_RECORDED) == 0


async def test_retryable_failure_is_recorded_then_compensated_by_the_scheduler(service: Service) -> None:
    account = await service.open()
    service.ledger.switches.on.add("deposited")
    await service.deposit(account)
    record = await service.one("deposited")
    state = record.state
    assert state.status is ExecutionFailedStatus.FAILED or state.status is ExecutionFailedStatus.PREPARED
    assert state.recoverable is Recoverable.RECOVERABLE
    assert state.error is not None
    assert state.error.error_type == "Broken"
    assert "the ledger database is down" in state.error.message
    assert "Traceback" in state.error.stack_trace
    assert state.function == FunctionInfo("bank", "Ledger", "deposited", FunctionKindName.EVENT)
    assert state.event is not None
    assert state.event.aggregate_id == account
    assert state.event.version == 2
    # @retry(max_retries=2) on the function, the settings for the rest
    assert state.retry_spec == RetrySpec(True, 2, 0.05, 5.0, 0.2)
    assert service.outcomes(ProcessingOutcome.FAILURE_RECORDED) == 1
    # the scheduler retries (and the failure is applied) until the cause is fixed
    await service.settled(record.id, ExecutionFailedStatus.FAILED, retries=1)
    service.ledger.switches.on.clear()
    done = await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED)
    assert done.state.retry_state.retries == 2
    assert service.ledger.journal.count("deposited") == 1
    assert done.queue(0) is Queue.SUCCEEDED


async def test_retries_stop_at_the_cap(service: Service) -> None:
    account = await service.open()
    service.ledger.switches.on.add("deposited")
    await service.deposit(account)
    record = await service.one("deposited")
    capped = await service.settled(record.id, ExecutionFailedStatus.FAILED, retries=2)
    assert capped.queue(capped.updated_at) is Queue.NON_RETRYABLE
    with pytest.raises(ActionRefused) as refused:
        await service.recorder.commands.prepare(record.id)  # type: ignore[union-attr]
    assert refused.value.code == Refused.RETRIES_EXHAUSTED
    # an operator forces it past the cap once the cause is fixed
    service.ledger.switches.on.clear()
    await service.recorder.commands.force_prepare(record.id)  # type: ignore[union-attr]
    await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED, retries=3)
    assert service.ledger.journal.count("deposited") == 1


async def test_unrecoverable_failure_is_never_retried_by_the_scheduler(service: Service) -> None:
    service.ledger.switches.on.add("balance")
    await service.open()
    record = await service.one("balance")
    assert record.state.recoverable is Recoverable.UNRECOVERABLE
    assert record.state.function is not None
    assert record.state.function.function_kind is FunctionKindName.STATE_EVENT
    runs = service.recorder.scheduler.runs  # type: ignore[union-attr]
    await eventually(lambda: _after(service, runs + 3), 5, "three scheduler runs")
    still = await service.recorder.store.get(record.id)
    assert still is not None
    assert still.state.retry_state.retries == 0
    assert still.queue(0) is Queue.UNRECOVERABLE
    commands = service.recorder.commands
    assert commands is not None
    with pytest.raises(ActionRefused) as refused:
        await commands.prepare(record.id)
    assert refused.value.code == Refused.UNRECOVERABLE
    # the operator fixes the cause and forces a compensation: the state event is rebuilt
    service.ledger.switches.on.clear()
    await commands.force_prepare(record.id)
    await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED)
    assert service.ledger.journal.count("balance") == 1


async def _handled(service: Service, function: str, count: int) -> bool:
    return service.ledger.journal.count(function) >= count


async def _after(service: Service, runs: int) -> bool:
    scheduler = service.recorder.scheduler
    return scheduler is not None and scheduler.runs >= runs


async def test_a_replay_runs_only_the_failed_function(service: Service) -> None:
    account = await service.open()
    service.ledger.switches.on.add("deposited")
    await service.deposit(account)
    record = await service.one("deposited")
    assert service.ledger.journal.count("audit_deposit") == 1
    service.ledger.switches.on.clear()
    await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED)
    # the other function of the event ran once, not again with the compensation
    assert service.ledger.journal.count("audit_deposit") == 1
    assert service.ledger.journal.count("deposited") == 1
    # a compensation of a SUCCEEDED record is refused: the function does not run twice
    commands = service.recorder.commands
    assert commands is not None
    for action in (commands.prepare, commands.force_prepare):
        with pytest.raises(ActionRefused) as refused:
            await action(record.id)
        assert refused.value.code == Refused.SUCCEEDED
    assert service.ledger.journal.count("deposited") == 1


async def test_the_same_failure_reported_again_is_one_record(service: Service) -> None:
    account = await service.open()
    service.ledger.switches.on.add("deposited")
    assert service.recorder.scheduler is not None
    await service.recorder.scheduler.stop()  # nothing retries meanwhile
    await service.deposit(account)
    record = await service.one("deposited")
    event = record.state.event
    assert event is not None
    assert record.id == execution_id(event.event_id, record.state.function)  # type: ignore[arg-type]
    [stream] = await service.runtime.event_store.load(_account_id(service, account), 2, 2)
    # the broker redelivers the same event: the function fails again, the record stays one
    await service.runtime.domain_event_bus.send(stream.copy())
    await eventually(
        lambda: _count_outcomes(service, ProcessingOutcome.FAILURE_RECORDED, 2),
        5,
        "the second failure recorded",
    )
    assert [r.id for r in await service.records(function="deposited")] == [record.id]
    assert [r.id for r in await service.records(event_id=event.event_id)] == [record.id]


async def _count_outcomes(service: Service, outcome: ProcessingOutcome, count: int) -> bool:
    return service.outcomes(outcome) >= count


def _account_id(service: Service, account: str) -> AggregateId:
    return AggregateId(ACCOUNT, account)


async def test_manual_path_operator_prepares_after_fixing_the_cause(
    fast_compensation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOW_COMPENSATION__SCHEDULER__ENABLED", "false")
    ledger = Ledger()
    runtime = WowApp("bank", aggregates=[Account], components=[ledger]).runtime(
        WowSettings(service_name="bank", metrics="in_memory")
    )
    [recorder] = _recorders(runtime)
    assert recorder.scheduler is None
    service = Service(runtime, ledger, recorder)
    async with runtime:
        ledger.switches.on.add("opened")
        await service.open()
        record = await service.one("opened")
        assert record.queue(record.state.execute_at) is Queue.NEXT_RETRY
        commands = recorder.commands
        assert commands is not None
        # the operator changes the retry spec and the recoverability, then retries
        written = await commands.apply_retry_spec(record.id, RetrySpec(True, 5, 1.0, 5.0, 10.0))
        assert written.state is not None
        assert written.state.retry_spec.max_retries == 5
        with pytest.raises(ActionRefused) as refused:
            await commands.apply_retry_spec(record.id, RetrySpec(True, 5, 1.0, 5.0, 10.0))
        assert refused.value.code == Refused.UNCHANGED
        await commands.mark_recoverable(record.id, Recoverable.UNRECOVERABLE)
        with pytest.raises(ActionRefused):
            await commands.prepare(record.id)
        await commands.mark_recoverable(record.id, Recoverable.RECOVERABLE)
        ledger.switches.on.clear()
        await commands.prepare(record.id)
        with pytest.raises(ActionRefused) as refused:
            await commands.prepare(record.id)  # a second prepare while the first runs
        assert refused.value.code in (Refused.IN_PROGRESS, Refused.SUCCEEDED)
        done = await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED, retries=1)
        assert done.state.recoverable is Recoverable.RECOVERABLE
        assert ledger.journal.count("opened") == 1
        with pytest.raises(UnknownExecutionError):
            await commands.prepare("no-such-record")


async def test_a_function_with_retry_disabled_is_waived(service: Service) -> None:
    service.ledger.switches.on.add("notify")
    await service.open()
    await eventually(lambda: _count_outcomes(service, ProcessingOutcome.FAILURE_WAIVED, 1), 5, "the waiver")
    assert await service.records(function="notify") == []
    assert service.outcomes(ProcessingOutcome.FAILURE_RECORDED) == 0
