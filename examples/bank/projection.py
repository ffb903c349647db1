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

    Idempotent per event id: a redelivered or retried event is applied once. It lives in
    its process's memory and starts empty with it: an event of an account opened before
    the process started (a restarted service) is counted in :attr:`unseen`, not applied
    (a balance it cannot know is not guessed). A read model that must survive restarts
    is kept in a store of its own.
    """

    accounts: dict[str, AccountRow] = field(default_factory=dict)
    transfers: dict[str, str] = field(default_factory=dict)
    applied: set[str] = field(default_factory=set)
    unseen: int = 0
    """Events of accounts this read model never saw opened."""

    def _first_time(self, event: DomainEvent[Any]) -> bool:
        if event.id in self.applied:
            return False
        self.applied.add(event.id)
        return True

    def _row(self, event: DomainEvent[Any]) -> AccountRow | None:
        """The row an event of an account applies to, the first time it comes; ``None``
        for a repeat, or for an account opened before this read model started."""
        if not self._first_time(event):
            return None
        row = self.accounts.get(event.aggregate_id.id)
        if row is None:
            self.unseen += 1
        return row

    @on_event
    def opened(self, event: DomainEvent[AccountOpened]) -> None:
        if self._first_time(event):
            self.accounts[event.aggregate_id.id] = AccountRow(event.body.owner, event.body.initial)

    @on_event
    def deposited(self, event: DomainEvent[MoneyDeposited]) -> None:
        row = self._row(event)
        if row is not None:
            row.balance += event.body.amount

    @on_event
    def withdrawn(self, event: DomainEvent[MoneyWithdrawn]) -> None:
        row = self._row(event)
        if row is not None:
            row.balance -= event.body.amount

    @on_event
    def closed(self, event: DomainEvent[AccountClosed]) -> None:
        row = self._row(event)
        if row is not None:
            row.closed = True

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
