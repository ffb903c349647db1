"""The account service of the wow-otel tests: the account aggregate, a projection and a
saga that answers each opening with a deposit (a command sent from an event function)."""

from __future__ import annotations

from tests.accounts import ACCOUNT, Account, Deposit, Opened
from wow_core.event import on_event, projection, stateless_saga
from wow_core.model import AggregateId, CommandMessage, DomainEvent

__all__ = ["Account", "Balances", "Welcome"]


@projection(context="bank", aggregates=["bank.account"])
class Balances:
    def __init__(self) -> None:
        self.opened = 0

    @on_event
    def on_opened(self, event: Opened) -> None:
        self.opened += 1


@stateless_saga(context="bank", aggregates=["bank.account"])
class Welcome:
    @on_event
    def on_opened(self, event: DomainEvent[Opened]) -> CommandMessage[Deposit] | None:
        if event.body.initial:
            return None
        return CommandMessage(AggregateId(ACCOUNT, event.aggregate_id.id), Deposit(1), "Deposit")
