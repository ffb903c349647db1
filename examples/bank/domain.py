"""The bank's aggregates: accounts, and transfers between them.

An account refuses a withdrawal that exceeds its balance (``INSUFFICIENT_FUNDS``) and any
movement once it is closed (``ACCOUNT_CLOSED``). A transfer records its steps: prepared,
then either completed (the money left the source and reached the target) or failed
(with the reason the source gave).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

from pydantic import Field

from wow_core import DomainError, Emit, aggregate, on_command, on_sourcing

Amount = Annotated[int, Field(gt=0, le=1_000_000_000)]
"""Money in cents: positive, bounded."""

# -- accounts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccountState:
    owner: str = ""
    balance: int = 0
    closed: bool = False


@dataclass(frozen=True)
class OpenAccount:
    owner: Annotated[str, Field(min_length=1, max_length=100)]
    initial: Annotated[int, Field(ge=0)] = 0


@dataclass(frozen=True)
class Deposit:
    amount: Amount
    reference: str = ""


@dataclass(frozen=True)
class Withdraw:
    amount: Amount
    reference: str = ""


@dataclass(frozen=True)
class CloseAccount:
    pass


@dataclass(frozen=True)
class Ping:
    """A fire-and-forget keep-alive, sent as a Void command: never processed."""


@dataclass(frozen=True)
class AccountOpened:
    owner: str
    initial: int


@dataclass(frozen=True)
class MoneyDeposited:
    amount: int
    reference: str


@dataclass(frozen=True)
class MoneyWithdrawn:
    amount: int
    reference: str


@dataclass(frozen=True)
class AccountClosed:
    balance: int


@aggregate("bank", "account", state=AccountState)
class Account:
    @on_command(create=True)
    def open(self, state: AccountState, body: OpenAccount) -> AccountOpened:
        return AccountOpened(body.owner, body.initial)

    @on_command
    def deposit(self, state: AccountState, body: Deposit) -> Emit[MoneyDeposited]:
        _check_open(state)
        return Emit(
            MoneyDeposited(body.amount, body.reference), result={"balance": state.balance + body.amount}
        )

    @on_command
    def withdraw(self, state: AccountState, body: Withdraw) -> Emit[MoneyWithdrawn]:
        _check_open(state)
        if body.amount > state.balance:
            raise DomainError(
                "INSUFFICIENT_FUNDS", f"balance {state.balance} is below the {body.amount} requested"
            )
        return Emit(
            MoneyWithdrawn(body.amount, body.reference), result={"balance": state.balance - body.amount}
        )

    @on_command
    def close(self, state: AccountState, body: CloseAccount) -> AccountClosed:
        _check_open(state)
        if state.balance:
            raise DomainError("BALANCE_NOT_ZERO", f"withdraw the remaining {state.balance} first")
        return AccountClosed(state.balance)

    @on_command
    def ping(self, state: AccountState, body: Ping) -> None:
        return None

    @on_sourcing
    def opened(self, state: AccountState, event: AccountOpened) -> AccountState:
        return replace(state, owner=event.owner, balance=event.initial)

    @on_sourcing
    def deposited(self, state: AccountState, event: MoneyDeposited) -> AccountState:
        return replace(state, balance=state.balance + event.amount)

    @on_sourcing
    def withdrawn(self, state: AccountState, event: MoneyWithdrawn) -> AccountState:
        return replace(state, balance=state.balance - event.amount)

    @on_sourcing
    def closed_(self, state: AccountState, event: AccountClosed) -> AccountState:
        return replace(state, closed=True)


def _check_open(state: AccountState) -> None:
    if state.closed:
        raise DomainError("ACCOUNT_CLOSED", "the account is closed")


# -- transfers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TransferState:
    source: str = ""
    target: str = ""
    amount: int = 0
    status: str = "new"
    reason: str = ""


@dataclass(frozen=True)
class PrepareTransfer:
    source: Annotated[str, Field(min_length=1)]
    target: Annotated[str, Field(min_length=1)]
    amount: Amount

    def violations(self) -> list[str]:
        return ["source and target must be different accounts"] if self.source == self.target else []


@dataclass(frozen=True)
class CompleteTransfer:
    pass


@dataclass(frozen=True)
class FailTransfer:
    reason: str


@dataclass(frozen=True)
class TransferPrepared:
    source: str
    target: str
    amount: int


@dataclass(frozen=True)
class TransferCompleted:
    pass


@dataclass(frozen=True)
class TransferFailed:
    reason: str


@aggregate("bank", "transfer", state=TransferState)
class Transfer:
    @on_command(create=True)
    def prepare(self, state: TransferState, body: PrepareTransfer) -> TransferPrepared:
        return TransferPrepared(body.source, body.target, body.amount)

    @on_command
    def complete(self, state: TransferState, body: CompleteTransfer) -> TransferCompleted:
        if state.status != "prepared":
            raise DomainError("TRANSFER_NOT_PREPARED", f"the transfer is {state.status}")
        return TransferCompleted()

    @on_command
    def fail(self, state: TransferState, body: FailTransfer) -> TransferFailed:
        if state.status != "prepared":
            raise DomainError("TRANSFER_NOT_PREPARED", f"the transfer is {state.status}")
        return TransferFailed(body.reason)

    @on_sourcing
    def prepared(self, state: TransferState, event: TransferPrepared) -> TransferState:
        return replace(
            state, source=event.source, target=event.target, amount=event.amount, status="prepared"
        )

    @on_sourcing
    def completed(self, state: TransferState, event: TransferCompleted) -> TransferState:
        return replace(state, status="completed")

    @on_sourcing
    def failed(self, state: TransferState, event: TransferFailed) -> TransferState:
        return replace(state, status="failed", reason=event.reason)


# -- a contract of another service ---------------------------------------------------------


@dataclass(frozen=True)
class Loan:
    """A command of the (imaginary) lending service: its body type is known here, so it
    can be sent and decoded, but no aggregate of this service handles it
    (``COMMAND_UNHANDLED``)."""

    amount: Amount
