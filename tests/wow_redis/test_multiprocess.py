"""Two ``wow run`` processes of one new service start together on Redis Streams.

Commands are SENT (the XADD completed) while the members are still starting, before
either created the service's consumer group. Every one of them is processed: a group
that does not exist yet starts at the stream's first retained entry, and the member
that finds the group already created (``BUSYGROUP``) reuses it unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.wow_kafka.journal_app import AGGREGATE, CONTEXT, Record
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, MessageCodec, NamedAggregate
from wow_core.testing.support import ConformanceTimeout, eventually
from wow_core.transport.bus import TransportCommandBus
from wow_redis import RedisSettings, RedisStreamTransport

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
KEYS = 40
PER_KEY = 25
RATE = 125  # 1 000 commands over about 8 s: the sends span the processes' start
START = re.compile(r"Redis receiver \S+ of group '[^']+': stream (\S+) starts .*\(([a-z ]+)\)$")


class Member:
    """One ``wow run`` process; its output lines are kept and can be waited on."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "wow"), "run", "tests.wow_kafka.journal_app:app"],
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

    def starts(self, stream: str) -> list[str]:
        """Why the group starts where it does on ``stream``, as this member logged it."""
        return [
            match.group(2)
            for line in list(self.lines)
            if (match := START.search(line.rstrip())) and match.group(1) == stream
        ]

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: predicate() or self.process.poll() is not None, timeout):
                raise AssertionError(f"{self.name}: timed out; log:\n{''.join(self.lines[-30:])}")
        if not predicate():
            raise AssertionError(f"{self.name} exited {self.process.poll()}:\n{''.join(self.lines[-30:])}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                return -9
        return self.process.returncode


def journal(directory: Path, pid: int) -> list[tuple[str, int]]:
    """What the member ``pid`` processed: (aggregate id, sequence) in processing order."""
    path = directory / f"{pid}.log"
    if not path.exists():
        return []
    return [(key, int(seq)) for key, seq in (line.split() for line in path.read_text().splitlines())]


async def test_members_creating_a_new_group_together_skip_nothing_sent_while_they_start(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis, tmp_path: Path
) -> None:
    """``redis`` deletes everything under ``prefix`` afterwards."""
    settings = settings_for()
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "redis",
        "WOW_SERVICE_NAME": f"journal-{uuid.uuid4().hex[:8]}",  # a new service: a new group
        "WOW_REDIS__URL": settings.url,
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
    }
    client = RedisStreamTransport(settings)
    bus = TransportCommandBus(client, MessageCodec(BodyTypeRegistry([Record])))
    named = NamedAggregate(CONTEXT, AGGREGATE)
    stream = bus.topic(named)
    members: list[Member] = []
    try:
        members = [Member("first", env), Member("second", env)]
        keys = [f"acc-{n}" for n in range(KEYS)]
        everything = {(key, seq) for key in keys for seq in range(PER_KEY)}
        loop = asyncio.get_running_loop()
        started = loop.time()
        sent = before_any_group = 0
        for seq in range(PER_KEY):  # round by round: each key's commands in order
            await asyncio.gather(
                *(
                    bus.send(
                        CommandMessage(AggregateId(named, key), Record(key, seq), "record", allow_create=True)
                    )
                    for key in keys
                )
            )
            sent += len(keys)
            if not any(member.starts(stream) for member in members):
                before_any_group = sent
            ahead = started + sent / RATE - loop.time()
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing the load, not synchronising
        assert before_any_group > 0, "every command was sent after the group existed: nothing was tested"
        for member in members:
            await asyncio.to_thread(member.wait_for, lambda m=member: bool(m.starts(stream)), 60)

        def processed() -> set[tuple[str, int]]:
            return {entry for member in members for entry in journal(journal_dir, member.process.pid)}

        async def all_processed() -> bool:
            return processed() >= everything  # the members' journal files

        with contextlib.suppress(ConformanceTimeout):  # the assertion below says what is missing
            await eventually(all_processed, 45, "every command to be processed", every=0.1)
        missing = everything - processed()
        assert not missing, (
            f"{len(missing)} of {len(everything)} SENT commands were never processed "
            f"({before_any_group} sent before any member created the group), e.g. {sorted(missing)[:5]}"
        )
        journals = [journal(journal_dir, member.process.pid) for member in members]
        for entries in journals:  # inside each process, an aggregate's commands in the order sent
            for key in keys:
                seqs = [seq for k, seq in entries if k == key]
                assert seqs == sorted(seqs), f"{key} processed out of order: {seqs}"
        # exactly one member created the group, the other found it; both said so
        assert sorted(why for member in members for why in member.starts(stream)) == [
            "existing group",
            "new group at the beginning",
        ]
        for member in members:
            assert member.stop() == 0
    finally:
        for member in members:
            member.stop()
        await bus.close()
        await client.close()
