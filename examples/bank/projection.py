"""A projection of the bank: balances and transfer outcomes, kept as a read model.

``send_and_wait(command, wait=CommandWait.projected())`` returns once this projection
(or another one) handled the command's events; the read model then reflects the command.
A projection that lags or fails does not change the aggregates: their events were
committed before dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wow_core import DomainEvent, on_event, projection

from .domain import (
    AccountClosed,
    AccountOpened,
    MoneyDeposited,
    MoneyWithdrawn,
    TransferCompleted,
    TransferFailed,
    TransferPrepared,
)


@dataclass
class AccountRow:
    owner: str
    balance: int
    closed: bool = False


@projection
@dataclass
class BankSummary:
    """Balances per account id and transfers by status.

    Idempotent per event id: a redelivered or retried event is applied once.
    """

    accounts: dict[str, AccountRow] = field(default_factory=dict)
    transfers: dict[str, str] = field(default_factory=dict)
    applied: set[str] = field(default_factory=set)

    def _first_time(self, event: DomainEvent[Any]) -> bool:
        if event.id in self.applied:
            return False
        self.applied.add(event.id)
        return True

    @on_event
    def opened(self, event: DomainEvent[AccountOpened]) -> None:
        if self._first_time(event):
            self.accounts[event.aggregate_id.id] = AccountRow(event.body.owner, event.body.initial)

    @on_event
    def deposited(self, event: DomainEvent[MoneyDeposited]) -> None:
        if self._first_time(event):
            self.accounts[event.aggregate_id.id].balance += event.body.amount

    @on_event
    def withdrawn(self, event: DomainEvent[MoneyWithdrawn]) -> None:
        if self._first_time(event):
            self.accounts[event.aggregate_id.id].balance -= event.body.amount

    @on_event
    def closed(self, event: DomainEvent[AccountClosed]) -> None:
        if self._first_time(event):
            self.accounts[event.aggregate_id.id].closed = True

    @on_event
    def transfer_prepared(self, event: DomainEvent[TransferPrepared]) -> None:
        self.transfers[event.aggregate_id.id] = "prepared"

    @on_event
    def transfer_ended(self, event: DomainEvent[TransferCompleted | TransferFailed]) -> None:
        status = "completed" if isinstance(event.body, TransferCompleted) else "failed"
        self.transfers[event.aggregate_id.id] = status

    def balance(self, account_id: str) -> int | None:
        row = self.accounts.get(account_id)
        return row.balance if row is not None else None
