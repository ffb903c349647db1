"""The bank account the tests run against, written once: its state, commands, events and aggregate.

Every test that needs an account (the kernel, the runtime, the buses, the gateway, the
dispatch pipeline, the stores) imports it from here. A test that needs another shape
keeps that variant local and says why in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, NoReturn

from pydantic import Field

from wow_core.model import CommandMessage, NamedAggregate
from wow_core.modeling import DomainError, Emit, aggregate, on_command, on_sourcing

ACCOUNT = NamedAggregate("bank", "account")
"""The named aggregate of :class:`Account`."""


@dataclass(frozen=True)
class AccountState:
    owner: str = ""
    balance: int = 0
    history: tuple[str, ...] = ()


@dataclass(frozen=True)
class Open:
    owner: str
    initial: Annotated[int, Field(ge=0)] = 0


@dataclass(frozen=True)
class Deposit:
    amount: Annotated[int, Field(gt=0)]


@dataclass(frozen=True)
class Withdraw:
    amount: Annotated[int, Field(gt=0)]


@dataclass(frozen=True)
class Touch:
    """Changes nothing."""


@dataclass(frozen=True)
class Audit:
    """Reads the command message."""


@dataclass(frozen=True)
class Explode:
    pass


@dataclass(frozen=True)
class Rename:
    """Appends only when the owner changes: the same rename again decides nothing."""

    owner: str


@dataclass(frozen=True)
class Note:
    """Valid for pydantic whatever the text; its own rule refuses a blank one."""

    text: str

    def violations(self) -> list[str]:
        return ["text must not be blank"] if not self.text.strip() else []


@dataclass(frozen=True)
class Noted:
    text: str


@dataclass(frozen=True)
class Opened:
    owner: str
    initial: int = 0


@dataclass(frozen=True)
class Deposited:
    amount: int


@dataclass(frozen=True)
class Withdrawn:
    amount: int


@dataclass(frozen=True)
class Audited:
    by: str


@dataclass(frozen=True)
class Renamed:
    owner: str


@aggregate("bank", "account", state=AccountState)
class Account:
    def __init__(self) -> None:
        self.seen: list[str] = []

    @on_command(create=True)
    def open(self, state: AccountState, body: Open) -> Opened:
        return Opened(body.owner, body.initial)

    @on_command
    def deposit(self, state: AccountState, body: Deposit) -> Emit[Deposited]:
        return Emit(Deposited(body.amount), result={"balance": state.balance + body.amount})

    @on_command
    async def withdraw(self, state: AccountState, body: Withdraw) -> list[Withdrawn]:
        if body.amount > state.balance:
            raise DomainError("INSUFFICIENT_FUNDS", f"balance {state.balance} is below {body.amount}")
        return [Withdrawn(body.amount)]

    @on_command
    def touch(self, state: AccountState, body: Touch) -> None:
        return None

    @on_command
    def audit(self, state: AccountState, body: Audit, command: CommandMessage[Audit]) -> Audited:
        self.seen.append(command.header.get("user", ""))
        return Audited(command.header.get("user", ""))

    @on_command
    def explode(self, state: AccountState, body: Explode) -> NoReturn:
        raise RuntimeError("bug in the aggregate")

    @on_command
    def rename(self, state: AccountState, body: Rename) -> Renamed | None:
        event = getattr(self, "rename_to", Renamed)  # a test makes it return an undeclared type
        return event(body.owner) if body.owner != state.owner else None  # type: ignore[no-any-return]

    @on_command
    def note(self, state: AccountState, body: Note) -> Noted:
        return Noted(body.text)

    @on_sourcing
    def opened(self, state: AccountState, event: Opened) -> AccountState:
        return replace(state, owner=event.owner, balance=event.initial, history=(*state.history, "opened"))

    @on_sourcing
    def deposited(self, state: AccountState, event: Deposited) -> AccountState:
        return replace(state, balance=state.balance + event.amount, history=(*state.history, "deposited"))

    @on_sourcing
    def renamed(self, state: AccountState, event: Renamed) -> AccountState:
        return replace(state, owner=event.owner, history=(*state.history, "renamed"))

    @on_sourcing
    def withdrawn(self, state: AccountState, event: Withdrawn) -> AccountState:
        return replace(state, balance=state.balance - event.amount, history=(*state.history, "withdrawn"))
