"""Members of a service as separate ``wow run`` processes, for the multi-process tests.

A :class:`Member` runs ``wow run tests.wow_kafka.journal_app:app`` (transport-neutral:
its aggregate journals every command it processes to ``$WOW_TEST_JOURNAL_DIR/<pid>.log``)
and keeps its output lines, which a test can wait on; :func:`journal` reads what one
member processed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.wow_kafka.journal_app import AGGREGATE, CONTEXT, Record
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.testing.support import ConformanceTimeout, eventually
from wow_core.transport.bus import TransportCommandBus

ROOT = Path(__file__).resolve().parents[1]
APP = "tests.wow_kafka.journal_app:app"


class Member:
    """One ``wow run`` process; its output lines are kept and can be waited on."""

    def __init__(self, name: str, env: dict[str, str], app: str = APP) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "wow"), "run", app],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name=f"{name}-log", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def found(self, pattern: re.Pattern[str], topic: str) -> list[str]:
        """Group 2 of every output line ``pattern`` matches whose group 1 is ``topic``."""
        return [
            match.group(2)
            for line in list(self.lines)
            if (match := pattern.search(line.rstrip())) and match.group(1) == topic
        ]

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: predicate() or self.process.poll() is not None, timeout):
                raise AssertionError(f"{self.name}: timed out; log:\n{''.join(self.lines[-30:])}")
        if not predicate():
            raise AssertionError(f"{self.name} exited {self.process.poll()}:\n{''.join(self.lines[-30:])}")

    def kill(self) -> None:
        """SIGKILL: the process ends at once, nothing is flushed or closed."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                # beyond the member's own shutdown budget (30 s by default), so the member's
                # stop decides the exit code, not the test's patience
                return self.process.wait(45)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                # shown with the failing test: what the member was doing when it hung
                sys.stderr.write(
                    f"{self.name} did not stop within 45 s of SIGTERM; its last lines:\n"
                    + "".join(self.lines[-40:])
                )
                return -9
        return self.process.returncode


def journal(directory: Path, pid: int) -> list[tuple[str, int]]:
    """What the member ``pid`` processed: (aggregate id, sequence) in processing order."""
    path = directory / f"{pid}.log"
    if not path.exists():
        return []
    return [(key, int(seq)) for key, seq in (line.split() for line in path.read_text().splitlines())]


def check_order(journals: list[list[tuple[str, int]]], keys: list[str]) -> None:
    """Inside each process, every aggregate's commands were processed in the order sent."""
    for entries in journals:
        for key in keys:
            seqs = [seq for k, seq in entries if k == key]
            assert seqs == sorted(seqs), f"{key} processed out of order: {seqs}"


async def members_started_while_sending(
    bus: TransportCommandBus[Any],
    env: dict[str, str],
    journal_dir: Path,
    start_line: re.Pattern[str],
    keys: int = 40,
    per_key: int = 25,
    rate: float = 125,
) -> list[list[str]]:
    """Start two members of one new service and SEND commands while they start.

    The commands (``keys * per_key``, ``rate`` a second: by default 1 000 over about
    8 s) begin before either member said where its group starts on the command topic
    (a line ``start_line`` matches, group 1 the topic, group 2 why). Asserts that some
    were sent before any member said so, that every command was processed, in order per
    aggregate inside each process, and that both members stop cleanly; returns the
    reasons each member logged for the command topic.
    """
    named = NamedAggregate(CONTEXT, AGGREGATE)
    topic = bus.topic(named)
    members: list[Member] = []
    try:
        members = [Member("first", env), Member("second", env)]
        ids = [f"acc-{n}" for n in range(keys)]
        everything = {(key, seq) for key in ids for seq in range(per_key)}
        loop = asyncio.get_running_loop()
        started = loop.time()
        sent = before_any_start = 0
        for seq in range(per_key):  # round by round: each key's commands in order
            await asyncio.gather(
                *(
                    bus.send(
                        CommandMessage(AggregateId(named, key), Record(key, seq), "record", allow_create=True)
                    )
                    for key in ids
                )
            )
            sent += len(ids)
            if not any(member.found(start_line, topic) for member in members):
                before_any_start = sent
            ahead = started + sent / rate - loop.time()
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing the load, not synchronising
        assert before_any_start > 0, "every command was sent after the group existed: nothing was tested"
        for member in members:
            await asyncio.to_thread(member.wait_for, lambda m=member: bool(m.found(start_line, topic)), 60)

        def processed() -> set[tuple[str, int]]:
            return {entry for member in members for entry in journal(journal_dir, member.process.pid)}

        async def all_processed() -> bool:
            return processed() >= everything  # the members' journal files

        with contextlib.suppress(ConformanceTimeout):  # the assertion below says what is missing
            await eventually(all_processed, 45, "every command to be processed", every=0.1)
        missing = everything - processed()
        assert not missing, (
            f"{len(missing)} of {len(everything)} SENT commands were never processed "
            f"({before_any_start} sent before any member said where its group starts), "
            f"e.g. {sorted(missing)[:5]}"
        )
        check_order([journal(journal_dir, member.process.pid) for member in members], ids)
        reasons = [member.found(start_line, topic) for member in members]
        for member in members:
            assert member.stop() == 0
        return reasons
    finally:
        for member in members:
            member.stop()
