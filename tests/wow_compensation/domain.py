"""The service the compensation tests run: the test bank account and a projection whose
functions fail on demand, as a ``WowApp`` (also run by ``wow run`` in the
multi-process tests).

``Ledger`` keeps what it handled in a :class:`Journal`: in memory, and, when
``WOW_TEST_JOURNAL_DIR`` is set, one line per handled event in
``$WOW_TEST_JOURNAL_DIR/<pid>.log`` (``<function> <event id>``), so a test can count
what each process handled. Whether a function fails is read from ``Switches``: in
memory, or, with ``WOW_TEST_SWITCH_DIR``, from a file named after the function in that
directory (present: it fails), so a test can fix the cause of a failure in a running
process. A switch file holding a number ``N`` fails only the first ``N`` attempts on each
event, counted across processes (one byte per attempt in ``<function>.<event id>.attempts``
beside it), so a test can have every record fail again on its first retry and succeed on
its second without racing the scheduler to remove the switch.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.accounts import ACCOUNT, Account, Deposit, Deposited, Opened, Withdraw, Withdrawn
from wow_core import (
    DomainEvent,
    StateEvent,
    WowApp,
    on_event,
    on_state_event,
    projection,
    retry,
    stateless_saga,
)
from wow_core.event import RecoverableError
from wow_core.model import AggregateId, CommandMessage


class Broken(RecoverableError):
    """The failure a switch causes: recoverable (a dependency that is down)."""


class Invalid(ValueError):
    """A failure the function itself declares unrecoverable."""


class Switches:
    def __init__(self) -> None:
        self.on: set[str] = set()
        directory = os.environ.get("WOW_TEST_SWITCH_DIR")
        self.directory = Path(directory) if directory else None

    def failing(self, name: str, event_id: str = "") -> bool:
        if self.directory is None:
            return name in self.on
        try:
            times = (self.directory / name).read_text().strip()
        except FileNotFoundError:
            return False
        if not times or not event_id:
            return True
        attempts = self.directory / f"{name}.{event_id}.attempts"
        with attempts.open("a") as file:  # O_APPEND: one byte per attempt, whichever process
            file.write(".")
        return attempts.stat().st_size <= int(times)


class Journal:
    def __init__(self) -> None:
        self.handled: list[tuple[str, str]] = []
        directory = os.environ.get("WOW_TEST_JOURNAL_DIR")
        self.path = Path(directory) / f"{os.getpid()}.log" if directory else None

    def add(self, function: str, event_id: str) -> None:
        self.handled.append((function, event_id))
        if self.path is not None:
            with self.path.open("a") as file:
                file.write(f"{function} {event_id}\n")

    def count(self, function: str) -> int:
        return sum(1 for name, _ in self.handled if name == function)


@projection(context="bank", aggregates=["bank.account"])
class Ledger:
    def __init__(self) -> None:
        self.switches = Switches()
        self.journal = Journal()

    @on_event
    def opened(self, event: DomainEvent[Opened]) -> None:
        if self.switches.failing("opened"):
            raise Broken("the ledger database is down")
        self.journal.add("opened", event.id)

    @retry(max_retries=2)
    @on_event
    def deposited(self, event: DomainEvent[Deposited]) -> None:
        if self.switches.failing("deposited", event.id):
            raise Broken("the ledger database is down")
        self.journal.add("deposited", event.id)

    @on_event
    def audit_deposit(self, event: DomainEvent[Deposited]) -> None:
        """A second function on the same event: a compensation of ``deposited`` must not run it again."""
        self.journal.add("audit_deposit", event.id)

    @retry(unrecoverable=(Invalid,))
    @on_state_event(body=Opened)
    def balance(self, state_event: StateEvent[object]) -> None:
        if self.switches.failing("balance"):
            raise Invalid("the balance cannot be negative")
        self.journal.add("balance", state_event.stream.events[0].id)

    @retry(enabled=False)
    @on_event(name="notify")
    def notify(self, event: DomainEvent[Opened]) -> None:
        if self.switches.failing("notify"):
            raise Broken("best effort only")
        self.journal.add("notify", event.id)


@stateless_saga(context="bank", aggregates=["bank.account"])
class Sweep:
    """On a deposit into ``into`` (when set), pays a fee of 1 into ``fees`` and withdraws
    the deposit from ``source``: the withdrawal is rejected (INSUFFICIENT_FUNDS) while
    ``source`` holds less, a failed hop of the saga after the fee went through."""

    def __init__(self) -> None:
        # WOW_TEST_SWEEP="<into>:<source>:<fees>" configures it in a `wow run` process.
        self.into, self.source, self.fees = (os.environ.get("WOW_TEST_SWEEP", "") or "::").split(":")

    @on_event
    def swept(self, event: DomainEvent[Deposited]) -> list[CommandMessage[object]]:
        if not self.into or event.aggregate_id.id != self.into:
            return []
        return [
            CommandMessage(AggregateId(ACCOUNT, self.fees), Deposit(1), "Deposit"),
            CommandMessage(AggregateId(ACCOUNT, self.source), Withdraw(event.body.amount), "Withdraw"),
        ]


LEDGER = Ledger()
app = WowApp("bank", aggregates=[Account], components=[LEDGER])
accounts = WowApp("bank", aggregates=[Account])
"""The accounts alone: the service that decides (and rejects) the saga's commands."""
sweeper = WowApp(
    "sweeper", body_types=[Opened, Deposited, Withdrawn, Deposit, Withdraw], components=[Sweep()]
)
"""The ``Sweep`` saga alone, in a service of its own: it hosts no account."""
