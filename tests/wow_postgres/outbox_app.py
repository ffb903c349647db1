"""A service whose kernel appends through the PostgreSQL outbox, killed at an exact point.

``python -c "from tests.wow_postgres.outbox_app import main; main()" <total> <crash_at>``
(settings from the environment: ``WOW_EVENTSOURCING__STORE=postgres``,
``WOW_POSTGRES__OUTBOX_ENABLED=true``, a distributed ``WOW_TRANSPORT``) processes
``total`` commands, one at a time, over :data:`AGGREGATES` aggregates, and SIGKILLs
itself right after the ``crash_at``-th append committed (stream and outbox rows), before
anything of it was published or handed off.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from wow_core.model import DomainEventStream
from wow_core.modeling import aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp
from wow_core.transport import TransportMessage

AGGREGATES = 4


@dataclass(frozen=True)
class NoteState:
    last: int = -1


@dataclass(frozen=True)
class Note:
    seq: int


@dataclass(frozen=True)
class Noted:
    seq: int


@aggregate("outboxtest", "note", state=NoteState)
class Notebook:
    @on_command(allow_create=True)
    def note(self, state: NoteState, body: Note) -> Noted:
        return Noted(body.seq)

    @on_sourcing
    def noted(self, state: NoteState, event: Noted) -> NoteState:
        return NoteState(event.seq)


app = WowApp("outboxtest", aggregates=[Notebook])


async def _run(total: int, crash_at: int) -> None:
    from wow_core.runtime.assembly import build_runtime
    from wow_postgres.outbox import PostgresOutbox

    original = PostgresOutbox.append
    committed = 0

    async def append(
        self: PostgresOutbox, stream: DomainEventStream, messages: Sequence[TransportMessage]
    ) -> None:
        nonlocal committed
        await original(self, stream, messages)
        committed += 1
        if committed == crash_at:
            print(f"crash after {stream.aggregate_id.id} v{stream.version}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # committed; nothing of it published yet

    PostgresOutbox.append = append  # type: ignore[method-assign]
    runtime = build_runtime(app)
    async with runtime:
        print("started", flush=True)
        for n in range(total):
            command = runtime.aggregates.command(Note(n), f"note{n % AGGREGATES}")
            result = await runtime.gateway.send_and_wait(command)
            assert not result.error_code, result


def main() -> None:
    asyncio.run(_run(int(sys.argv[1]), int(sys.argv[2])))
