"""A service for the cluster intake's multi-process test: ``wow run tests.wow_kafka.intake_app:app``.

Its one aggregate (``tally.counter``) journals every execution of a command to
``$WOW_TEST_JOURNAL_DIR/<pid>.log`` (one line ``<key> <seq>``, written with ``os.write``
before the command completes, so a SIGKILL loses no journaled line): the test counts the
re-executions from them. What was committed is read from the shared event store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from wow_core.model import CommandMessage
from wow_core.modeling import aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp

CONTEXT = "tally"
AGGREGATE = "counter"


@dataclass(frozen=True)
class CounterState:
    last: int = -1


@dataclass(frozen=True)
class Add:
    seq: int


@dataclass(frozen=True)
class Added:
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


@aggregate(CONTEXT, AGGREGATE, state=CounterState)
class Counter:
    @on_command(allow_create=True)
    def add(self, state: CounterState, body: Add, command: CommandMessage[Add]) -> Added:
        _write(f"{command.aggregate_id.id} {body.seq}\n")
        return Added(body.seq)

    @on_sourcing
    def added(self, state: CounterState, event: Added) -> CounterState:
        return CounterState(event.seq)


app = WowApp("tally-service", aggregates=[Counter])
