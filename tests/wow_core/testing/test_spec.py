"""The given/when/expect kit (``wow_core.testing.spec``), on the bank example: the bank's
own specifications, and what the kit says when an expectation does not hold."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import pytest
from examples.bank.domain import (
    Account,
    AccountClosed,
    AccountOpened,
    AccountState,
    CloseAccount,
    CompleteTransfer,
    Deposit,
    MoneyDeposited,
    MoneyWithdrawn,
    OpenAccount,
    PrepareTransfer,
    Transfer,
    TransferCompleted,
    TransferFailed,
    TransferPrepared,
    Withdraw,
)
from examples.bank.processor import LargeMovementAudit
from examples.bank.projection import BankSummary
from examples.bank.saga import NOTICE, RecordNotice, TransferNoticeSaga

from wow_core import DomainEvent, on_event, projection, stateless_saga
from wow_core.model import AggregateId
from wow_core.testing import AggregateSpec, EventProcessorSpec, ProjectionSpec, SagaSpec

OPENED = AggregateSpec(Account).given(AccountOpened("ann", 100))


# -- the bank's aggregates ----------------------------------------------------------------


def test_an_account_is_opened_with_its_initial_balance() -> None:
    (
        AggregateSpec(Account)
        .when(OpenAccount("ann", 100))
        .expect_events(AccountOpened("ann", 100))
        .expect_state(AccountState("ann", 100))
        .expect_version(1)
    )


def test_a_withdrawal_is_taken_from_the_balance() -> None:
    (
        OPENED.when(Withdraw(30, "rent"))
        .expect_events(MoneyWithdrawn(30, "rent"))
        .expect_result({"balance": 70})
        .expect_state(lambda state: state.balance == 70)
        .expect_version(2)
    )


def test_a_withdrawal_beyond_the_balance_is_refused_and_changes_nothing() -> None:
    (
        OPENED.when(Withdraw(500))
        .expect_error("INSUFFICIENT_FUNDS", "below the 500 requested")
        .expect_state(AccountState("ann", 100))
    )


def test_the_history_is_sourced_in_order() -> None:
    account = OPENED.given(MoneyDeposited(50, ""), MoneyWithdrawn(150, ""))
    account.when(CloseAccount()).expect_events(AccountClosed(0)).expect_event_types(AccountClosed)


def test_an_invalid_body_is_refused_before_the_aggregate_decides() -> None:
    OPENED.when(Deposit(0)).expect_invalid("amount")
    AggregateSpec(Transfer).when(PrepareTransfer("a", "a", 10)).expect_invalid()


def test_a_creation_of_an_existing_aggregate_is_refused() -> None:
    OPENED.when(OpenAccount("bob")).expect_error("DUPLICATE_AGGREGATE_ID")


def test_a_command_to_an_aggregate_that_does_not_exist_is_refused() -> None:
    AggregateSpec(Account).when(Deposit(5)).expect_error("AGGREGATE_NOT_FOUND")


def test_a_transfer_completes_only_once_prepared() -> None:
    prepared = AggregateSpec(Transfer, aggregate_id="t-1").given(TransferPrepared("a", "b", 10))
    prepared.when(CompleteTransfer()).expect_events(TransferCompleted()).expect_state(
        lambda state: state.status == "completed"
    )
    AggregateSpec(Transfer).given(TransferPrepared("a", "b", 10), TransferCompleted()).when(
        CompleteTransfer()
    ).expect_error("TRANSFER_NOT_PREPARED")


# -- the bank's saga, projection and processor --------------------------------------------


def test_the_notice_saga_records_a_notice_for_a_completed_transfer() -> None:
    saga = SagaSpec(TransferNoticeSaga, aggregates=[Transfer])
    (
        saga.when(saga.event(TransferCompleted(), "t-9"))
        .expect_commands(RecordNotice("your transfer was completed"))
        .expect_command(RecordNotice("your transfer was completed"), AggregateId(NOTICE, "t-9"))
    )
    saga.when(TransferFailed("no funds")).expect_command(
        RecordNotice("your transfer failed: no funds"), "spec-1"
    )


def test_the_summary_projects_balances_per_account() -> None:
    summary = ProjectionSpec(BankSummary, aggregates=[Account, Transfer])
    (
        summary.given(
            summary.event(AccountOpened("ann", 100), "a-1"), summary.event(AccountOpened("bob", 0), "b-1")
        )
        .when(summary.event(MoneyDeposited(5, ""), "b-1"))
        .expect(lambda s: (s.accounts["a-1"].balance, s.accounts["b-1"].balance) == (100, 5))
    )


def test_every_when_gets_a_fresh_component() -> None:
    summary = ProjectionSpec(BankSummary, aggregates=[Account, Transfer])
    summary.when(AccountOpened("ann", 1)).expect(lambda s: len(s.accounts) == 1)
    summary.when(AccountOpened("bob", 1)).expect(lambda s: set(s.accounts) == {"spec-1"})


@projection
class StrictBalances:
    """Raises for a deposit to an account it never saw opened."""

    def __init__(self) -> None:
        self.balances: dict[str, int] = {}

    @on_event
    def deposited(self, event: DomainEvent[MoneyDeposited]) -> None:
        self.balances[event.aggregate_id.id] = self.balances[event.aggregate_id.id] + event.body.amount


def test_a_projection_that_raises_is_reported() -> None:
    strict = ProjectionSpec(StrictBalances, aggregates=[Account, Transfer])
    strict.when(MoneyDeposited(5, "")).expect_error(KeyError)
    with pytest.raises(AssertionError, match="raised KeyError"):
        strict.when(MoneyDeposited(5, "")).expect(lambda s: True)


def test_the_summary_counts_what_it_cannot_apply_after_a_restart() -> None:
    # in memory, it starts empty with its process: a deposit to an account opened before
    # is counted, not applied (nor raised on every redelivery)
    summary = ProjectionSpec(BankSummary, aggregates=[Account, Transfer])
    summary.when(MoneyDeposited(5, "")).expect(lambda s: (s.accounts, s.unseen) == ({}, 1))


def test_the_audit_keeps_large_movements_only() -> None:
    audit = EventProcessorSpec(LargeMovementAudit, aggregates=[Account])
    audit.when(MoneyDeposited(20_000, "")).expect(lambda a: len(a.entries) == 1)
    audit.when(MoneyDeposited(5, "")).expect(lambda a: a.entries == [])


# -- what the kit says when an expectation does not hold -----------------------------------


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (lambda e: e.expect_events(MoneyWithdrawn(31, "")), "expected the events [MoneyWithdrawn(amount=31"),
        (lambda e: e.expect_error("INSUFFICIENT_FUNDS"), "but it appended [MoneyWithdrawn(amount=30"),
        (lambda e: e.expect_no_events(), "expected no events, but it appended"),
        (
            lambda e: e.expect_result({"balance": 1}),
            "expected the result {'balance': 1}, but it is {'balance': 70}",
        ),
        (lambda e: e.expect_state(lambda s: s.balance == 0), "does not satisfy the check"),
        (lambda e: e.expect_state(AccountState()), "expected the state AccountState(owner=''"),
        (lambda e: e.expect_version(7), "expected version 7, but it appended"),
        (lambda e: e.expect_event_types(MoneyDeposited), "expected events of the types [MoneyDeposited]"),
    ],
)
def test_a_failed_aggregate_expectation_says_what_happened(check: object, message: str) -> None:
    expectation = OPENED.when(Withdraw(30))
    with pytest.raises(AssertionError, match=re.escape(message)):
        check(expectation)  # type: ignore[operator]


def test_a_rejection_expected_to_succeed_names_the_code() -> None:
    with pytest.raises(AssertionError, match="rejected with INSUFFICIENT_FUNDS: balance 100 is below"):
        OPENED.when(Withdraw(500)).expect_events(MoneyWithdrawn(500, ""))


def test_a_saga_expectation_says_what_was_sent() -> None:
    saga = SagaSpec(TransferNoticeSaga, aggregates=[Transfer])
    sent = saga.when(TransferCompleted())
    with pytest.raises(
        AssertionError, match=r"but the saga sent \[RecordNotice\(text='your transfer was completed'\)\]"
    ):
        sent.expect_no_commands()
    with pytest.raises(AssertionError, match=r"to bank\.notice"):
        sent.expect_command(RecordNotice("your transfer was completed"), "other-id")


def test_misuse_is_refused_with_a_clear_error() -> None:
    with pytest.raises(TypeError, match="handles no Deposit command"):
        AggregateSpec(Transfer).when(Deposit(1))
    with pytest.raises(TypeError, match="sources no TransferCompleted"):
        AggregateSpec(Account).given(TransferCompleted())
    with pytest.raises(TypeError, match="is not a stateless saga"):
        SagaSpec(BankSummary)
    with pytest.raises(TypeError, match="has no function for AccountOpened"):
        SagaSpec(TransferNoticeSaga, aggregates=[Transfer]).when(
            SagaSpec(TransferNoticeSaga, aggregates=[Transfer]).event(
                AccountOpened("x", 0), aggregate=Account
            )
        )


# -- in an async test, and with async functions --------------------------------------------


@stateless_saga(context="bank", aggregates=["bank.account"])
class AsyncSaga:
    @on_event
    async def opened(self, event: AccountOpened) -> None:
        await asyncio.sleep(0)


async def test_the_kit_runs_inside_a_running_event_loop() -> None:
    OPENED.when(Withdraw(30)).expect_result({"balance": 70})
    SagaSpec(AsyncSaga).when(AccountOpened("ann", 0)).expect_no_commands()


# -- a whole service in one process ---------------------------------------------------------


async def test_a_test_runtime_runs_the_app_in_memory_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from examples.bank.app import app

    from wow_core import CommandWait
    from wow_core.testing import TestRuntime

    monkeypatch.setenv("WOW_TRANSPORT", "kafka")
    monkeypatch.setenv("WOW_EVENTSOURCING__STORE", "redis")
    async with TestRuntime(app, command={"wait_timeout": 7}) as runtime:
        assert runtime.transport.name == "in_memory"
        assert runtime.gateway.default_timeout == 7
        opened = await runtime.gateway.send_and_wait(
            runtime.aggregates.command(OpenAccount("ann", 5)), CommandWait.projected()
        )
        assert opened.succeeded


async def test_the_wow_test_runtime_fixture_starts_and_stops_runtimes(wow_test_runtime: Any) -> None:
    from examples.bank.app import app

    runtime = await wow_test_runtime(app)
    result = await runtime.gateway.send_and_wait(runtime.aggregates.command(OpenAccount("bob", 1)))
    assert result.aggregate_version == 1


def test_without_pytest_asyncio_the_runtime_fixture_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    monkeypatch.setitem(sys.modules, "pytest_asyncio", None)  # import pytest_asyncio raises ImportError
    spec = importlib.util.find_spec("wow_core.testing.pytest_plugin")
    assert spec is not None
    assert spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    # still defined: asking for it is no "fixture not found"
    assert plugin.wow_test_runtime_without_pytest_asyncio.name == "wow_test_runtime"
    with pytest.raises(
        pytest.fail.Exception, match=r'wow_test_runtime needs pytest-asyncio: pip install "wow-py\[test\]"'
    ):
        plugin.needs_pytest_asyncio("wow_test_runtime")
