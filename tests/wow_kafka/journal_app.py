"""A service for the multi-process test: ``wow run tests.wow_kafka.journal_app:app``.

Its one aggregate journals every command it processes to
``$WOW_TEST_JOURNAL_DIR/<pid>.log`` (one line ``<key> <seq>``, the key being the aggregate id, written with
``os.write`` before the command completes, so a SIGKILL loses no journaled line). The
test reads the journals to check at-least-once delivery, per-aggregate order and the
number of duplicates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from wow_core.modeling import aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp

CONTEXT = "journal"
AGGREGATE = "ledger"


@dataclass(frozen=True)
class LedgerState:
    last: int = -1


@dataclass(frozen=True)
class Record:
    key: str
    seq: int


@dataclass(frozen=True)
class Recorded:
    seq: int


_journal: int | None = None


def _write(line: str) -> None:
    global _journal
    if _journal is None:
        directory = os.environ["WOW_TEST_JOURNAL_DIR"]
        _journal = os.open(
            os.path.join(directory, f"{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
    os.write(_journal, line.encode())


@aggregate(CONTEXT, AGGREGATE, state=LedgerState)
class Ledger:
    @on_command(allow_create=True)
    def record(self, state: LedgerState, body: Record) -> Recorded:
        _write(f"{body.key} {body.seq}\n")
        return Recorded(body.seq)

    @on_sourcing
    def recorded(self, state: LedgerState, event: Recorded) -> LedgerState:
        return LedgerState(event.seq)


app = WowApp("journal", aggregates=[Ledger])
