"""Two ``wow run`` processes in one consumer group; one is killed with SIGKILL mid-stream.

The survivor takes over the dead member's partitions once its session expires. Every
command is processed at least once, each aggregate's commands in order, and the
duplicates (processed by the dead member, not committed before it died, processed again
by the survivor) stay within what the dead member could have had in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.service_members import Member, journal
from tests.wow_kafka.conftest import test_settings
from tests.wow_kafka.journal_app import AGGREGATE, CONTEXT, Record
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, MessageCodec, NamedAggregate
from wow_core.testing.support import ConformanceTimeout, eventually
from wow_core.transport.bus import TransportCommandBus
from wow_kafka import KafkaSettings, KafkaTransport

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KEYS = 40
PER_KEY = 30
MAX_IN_FLIGHT = 32
BUFFERED = 50
MAX_POLL = 20
RATE = 400  # commands per second the test sends
COMMIT_INTERVAL_MS = 100


class Service(Member):
    """One ``wow run`` member of the journal service; its Kafka assignments can be read."""

    def assignments(self) -> list[str]:
        return [line for line in self.lines if "Kafka receiver of group" in line and "assigned" in line]


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "journals"
    directory.mkdir()
    return directory


def service_env(settings: KafkaSettings, journal_dir: Path) -> dict[str, str]:
    """The environment of the ``wow run`` processes of one new service (one new group)."""
    service = f"journal-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "WOW_TRANSPORT": "kafka",
        "WOW_SERVICE_NAME": service,
        "WOW_RUNTIME__MAX_IN_FLIGHT": str(MAX_IN_FLIGHT),
        "WOW_KAFKA__BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "WOW_KAFKA__TOPIC_PREFIX": settings.topic_prefix or "",
        "WOW_KAFKA__PARTITIONS": "6",
        "WOW_KAFKA__SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "50",
        "WOW_KAFKA__COMMIT_INTERVAL_MS": str(COMMIT_INTERVAL_MS),
        "WOW_KAFKA__BUFFERED_RECORDS": str(BUFFERED),
        "WOW_KAFKA__MAX_POLL_RECORDS": str(MAX_POLL),
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("WOW_TEST_KAFKA_BOOTSTRAP", None)
    return env


def check_order(*journals: list[tuple[str, int]]) -> None:
    """Inside each process, every aggregate's commands were applied in the order sent."""
    for entries in journals:
        by_key: dict[str, list[int]] = {}
        for key, seq in entries:
            by_key.setdefault(key, []).append(seq)
        for key, seqs in by_key.items():
            assert seqs == sorted(seqs), f"{key} processed out of order: {seqs}"


async def test_sigkill_of_one_member_loses_nothing_and_keeps_order(
    kafka_bootstrap: str, journal_dir: Path
) -> None:
    settings = test_settings(kafka_bootstrap, partitions=6)
    env = service_env(settings, journal_dir)
    client = KafkaTransport(settings)
    bus = TransportCommandBus(client, MessageCodec(BodyTypeRegistry([Record])))
    named = NamedAggregate(CONTEXT, AGGREGATE)
    await client.topics.ensure([bus.topic(named)])

    doomed = Service("doomed", env)
    survivor: Service | None = None
    try:
        await asyncio.to_thread(doomed.wait_for, lambda: len(doomed.assignments()) >= 1, 60)
        survivor = Service("survivor", env)
        # both members own partitions once the survivor is assigned and the doomed
        # member re-joined in the same rebalance
        await asyncio.to_thread(survivor.wait_for, lambda: len(survivor.assignments()) >= 1, 60)
        await asyncio.to_thread(doomed.wait_for, lambda: len(doomed.assignments()) >= 2, 60)

        keys = [f"acc-{n}" for n in range(KEYS)]
        everything = {(key, seq) for key in keys for seq in range(PER_KEY)}
        loop = asyncio.get_running_loop()

        async def send_all() -> None:
            started = loop.time()
            sent = 0
            for seq in range(PER_KEY):  # round by round: each key's commands in order
                await asyncio.gather(
                    *(
                        bus.send(
                            CommandMessage(
                                AggregateId(named, key), Record(key, seq), "record", allow_create=True
                            )
                        )
                        for key in keys
                    )
                )
                sent += len(keys)
                ahead = started + sent / RATE - loop.time()
                if ahead > 0:
                    await asyncio.sleep(ahead)  # pacing the load, not synchronising

        sender = asyncio.create_task(send_all())
        # kill the doomed member mid-stream, once it has processed part of its share
        async with asyncio.timeout(60):
            while len(journal(journal_dir, doomed.process.pid)) < len(everything) // 8:
                if sender.done():
                    sender.result()  # a failed send fails the test here
                await asyncio.sleep(0.02)  # polling a file written by another process
        doomed.kill()
        await asyncio.wait_for(sender, 60)

        async with asyncio.timeout(90):
            while True:
                done = set(journal(journal_dir, doomed.process.pid)) | set(
                    journal(journal_dir, survivor.process.pid)
                )
                if done >= everything:
                    break
                await asyncio.sleep(0.1)  # polling the survivor's journal file

        dead = journal(journal_dir, doomed.process.pid)
        alive = journal(journal_dir, survivor.process.pid)
        check_order(dead, alive)
        counts = Counter(dead + alive)
        duplicates = sum(count - 1 for count in counts.values())
        assert set(counts) == everything
        assert all(counts[entry] == 1 for entry in counts if entry not in set(dead))
        bound = MAX_IN_FLIGHT + BUFFERED + MAX_POLL + RATE * 2 * COMMIT_INTERVAL_MS // 1000
        print(
            f"\nprocessed {len(dead)} on the killed member, {len(alive)} on the survivor, "
            f"{duplicates} duplicates (bound {bound})"
        )
        assert duplicates <= bound
        took_over = {key for key, _ in alive} & {key for key, _ in dead}
        assert took_over, "the survivor took over no aggregate of the killed member"
        assert survivor.stop() == 0
    finally:
        if doomed.process.poll() is None:
            doomed.kill()
        if survivor is not None:
            survivor.stop()
        await bus.close()
        await client.close()


JOIN_KEYS = 40
JOIN_PER_KEY = 25
JOIN_RATE = 125  # 1 000 commands over about 8 s: the sends span the processes' start and join


async def test_members_joining_a_new_group_together_skip_nothing_sent_during_the_join(
    kafka_bootstrap: str, journal_dir: Path
) -> None:
    """A new service's two members start together; commands are SENT while the group forms.

    Every command the broker acknowledged is processed: a partition the group never
    committed starts at the earliest retained record, and the anchor a member commits
    before it is ready is where the partition starts when the join rebalance moves it.
    """
    settings = test_settings(kafka_bootstrap, partitions=6)
    env = service_env(settings, journal_dir)
    client = KafkaTransport(settings)
    bus = TransportCommandBus(client, MessageCodec(BodyTypeRegistry([Record])))
    named = NamedAggregate(CONTEXT, AGGREGATE)
    await client.topics.ensure([bus.topic(named)])
    members: list[Service] = []
    try:
        members = [Service("first", env), Service("second", env)]
        keys = [f"acc-{n}" for n in range(JOIN_KEYS)]
        everything = {(key, seq) for key in keys for seq in range(JOIN_PER_KEY)}
        loop = asyncio.get_running_loop()
        started = loop.time()
        sent = before_any_anchor = 0
        for seq in range(JOIN_PER_KEY):  # round by round: each key's commands in order
            await asyncio.gather(
                *(
                    bus.send(
                        CommandMessage(AggregateId(named, key), Record(key, seq), "record", allow_create=True)
                    )
                    for key in keys
                )
            )
            sent += len(keys)
            if not any(member.assignments() for member in members):
                before_any_anchor = sent
            ahead = started + sent / JOIN_RATE - loop.time()
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing the load, not synchronising
        # the sends did overlap the join: some were acknowledged before any member anchored
        assert before_any_anchor > 0, "every command was sent after the group formed: nothing was tested"
        for member in members:
            await asyncio.to_thread(member.wait_for, lambda m=member: len(m.assignments()) >= 1, 60)

        def processed() -> set[tuple[str, int]]:
            return {entry for member in members for entry in journal(journal_dir, member.process.pid)}

        async def all_processed() -> bool:
            return processed() >= everything  # the members' journal files

        with contextlib.suppress(ConformanceTimeout):  # the assertion below says what is missing
            await eventually(all_processed, 45, "every command to be processed", every=0.1)
        missing = everything - processed()
        assert not missing, (
            f"{len(missing)} of {len(everything)} acknowledged commands were never processed "
            f"({before_any_anchor} sent before any member anchored), e.g. {sorted(missing)[:5]}"
        )
        journals = [journal(journal_dir, member.process.pid) for member in members]
        check_order(*journals)
        # every partition's start was chosen conservatively, and each member said so
        reasons = {
            line.rsplit("(", 1)[1].split(")")[0]
            for member in members
            for line in member.lines
            if "starts at offset" in line
        }
        assert reasons, "no member logged where its partitions start"
        assert reasons <= {"reset earliest", "committed"}, reasons
        duplicates = sum(len(entries) for entries in journals) - len(everything)
        print(f"\n{before_any_anchor} of {sent} sent before any member anchored, {duplicates} duplicates")
        for member in members:
            assert member.stop() == 0
    finally:
        for member in members:
            member.stop()
        await bus.close()
        await client.close()
