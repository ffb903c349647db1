"""PostgresEventStore and PostgresSnapshotRepository: the conformance suite, snapshots,
catching up, bad rows, and two processes contending for the same aggregates."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from tests.accounts import AccountState
from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.eventsourcing import Snapshot
from wow_core.model import AggregateId, BodyTypeRegistry, MessageCodec
from wow_core.testing.event_store import (
    CONFORMANCE_BODY_TYPES,
    EventStoreConformance,
    conformance_named_aggregate,
    make_stream,
    new_aggregate_id,
)
from wow_postgres import (
    START,
    EventStoreDataError,
    GlobalPosition,
    PositionedStream,
    PostgresEventStore,
    PostgresSettings,
    PostgresSnapshotRepository,
)

pytestmark = pytest.mark.postgres


def codec() -> MessageCodec:
    return MessageCodec(BodyTypeRegistry([*CONFORMANCE_BODY_TYPES, AccountState]))


class TestPostgresEventStore(EventStoreConformance):
    @pytest.fixture
    async def event_store(
        self, settings_for: Callable[..., PostgresSettings]
    ) -> AsyncIterator[PostgresEventStore]:
        store = PostgresEventStore(settings_for(), codec=codec())
        yield store
        await store.close()


@pytest.fixture
async def store(settings_for: Callable[..., PostgresSettings]) -> AsyncIterator[PostgresEventStore]:
    made = PostgresEventStore(settings_for(), codec=codec())
    await made.start()
    yield made
    await made.close()


@pytest.fixture
async def snapshots(
    settings_for: Callable[..., PostgresSettings],
) -> AsyncIterator[PostgresSnapshotRepository]:
    made = PostgresSnapshotRepository(settings_for(), codec=codec())
    yield made
    await made.close()


async def test_ids_and_tenants_with_any_characters_stay_apart(store: PostgresEventStore) -> None:
    named = conformance_named_aggregate()
    one = AggregateId(named, "b:c", "a")
    other = AggregateId(named, "c", "a:b")
    await store.append(make_stream(one, 1))
    assert await store.last_version(other) == 0
    quote = AggregateId(named, 'it\'s "x"; DROP TABLE y', "t")
    await store.append(make_stream(quote, 1))
    assert [s.version for s in await store.load(quote)] == [1]


async def test_load_by_time_returns_the_streams_created_in_the_range(store: PostgresEventStore) -> None:
    aggregate_id = new_aggregate_id()
    streams = [make_stream(aggregate_id, v) for v in (1, 2, 3)]
    for stream, time in zip(streams, (1_000, 2_000, 3_000), strict=True):
        object.__setattr__(stream, "create_time", time)
        await store.append(stream)
    assert [s.version for s in await store.load_by_time(aggregate_id, 1_500)] == [2, 3]
    assert [s.version for s in await store.load_by_time(aggregate_id, 1_000, 2_000)] == [1, 2]
    assert await store.load_by_time(aggregate_id, 3_001) == []
    with pytest.raises(ValueError, match="end_time"):
        await store.load_by_time(aggregate_id, 5, 4)


async def read_caught_up(
    store: PostgresEventStore, after: GlobalPosition, count: int, limit: int = 1000
) -> list[PositionedStream]:
    """``read_all`` as a catch-up reader calls it: again, until ``count`` streams are
    readable. Only an append in flight to this schema's events table holds them back
    (see test_read_all_holdback.py); the loop keeps the tests independent of timing."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        page = await store.read_all(after, limit=limit)
        if len(page) >= count or asyncio.get_running_loop().time() > deadline:
            return page
        await asyncio.sleep(0.05)


async def test_read_all_catches_up_in_commit_order_and_resumes_after_a_position(
    store: PostgresEventStore,
) -> None:
    first, second = new_aggregate_id(), new_aggregate_id()
    appended = [make_stream(first, 1), make_stream(second, 1), make_stream(first, 2)]
    for stream in appended:
        await store.append(stream)
    page = await read_caught_up(store, START, 2, limit=2)
    assert [p.stream.id for p in page] == [s.id for s in appended[:2]]
    rest = await read_caught_up(store, page[-1].position, 1)
    assert [p.stream.id for p in rest] == [appended[2].id]
    assert await store.read_all(rest[-1].position) == []
    with pytest.raises(ValueError, match="limit"):
        await store.read_all(START, limit=0)


async def test_read_all_holds_back_what_a_running_transaction_may_still_commit_before(
    store: PostgresEventStore,
) -> None:
    """A reader must not pass a stream that commits later with an earlier position."""
    early, late = new_aggregate_id(), new_aggregate_id()
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        transaction = connection.transaction()
        await transaction.start()
        await store.append_in(connection, make_stream(early, 1))  # position n, not committed
        await store.append(make_stream(late, 1))  # position n + 1, committed
        assert await store.read_all(START) == []  # the running transaction holds everything back
        await transaction.commit()
    finally:
        await connection.close()
    assert [p.stream.aggregate_id for p in await read_caught_up(store, START, 2)] == [early, late]


async def test_an_append_inside_a_transaction_that_rolls_back_leaves_nothing(
    store: PostgresEventStore,
) -> None:
    aggregate_id = new_aggregate_id()
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        transaction = connection.transaction()
        await transaction.start()
        await store.append_in(connection, make_stream(aggregate_id, 1))
        assert await store.last_version(aggregate_id) == 0  # not visible before the commit
        await transaction.rollback()
    finally:
        await connection.close()
    assert await store.last_version(aggregate_id) == 0


async def test_a_row_holding_another_stream_is_reported_not_guessed(store: PostgresEventStore) -> None:
    aggregate_id = new_aggregate_id()
    await store.append(make_stream(aggregate_id, 1))
    wrong = store.codec.encode(make_stream(aggregate_id, 7))
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(f"UPDATE {store.names.events} SET payload = $1::jsonb", wrong)
    finally:
        await connection.close()
    with pytest.raises(EventStoreDataError, match="version 1"):
        await store.load(aggregate_id)


async def test_an_unregistered_body_type_is_refused_on_load(
    settings_for: Callable[..., PostgresSettings], store: PostgresEventStore
) -> None:
    aggregate_id = new_aggregate_id()
    await store.append(make_stream(aggregate_id, 1))
    stranger = PostgresEventStore(settings_for())  # knows no body type
    try:
        with pytest.raises(Exception, match="unknown_body_type"):
            await stranger.load(aggregate_id)
    finally:
        await stranger.close()


async def test_a_snapshot_round_trips_and_only_a_newer_one_replaces_it(
    snapshots: PostgresSnapshotRepository,
) -> None:
    aggregate_id = new_aggregate_id()
    assert await snapshots.load(aggregate_id) is None
    assert await snapshots.save(Snapshot(aggregate_id, 3, AccountState("ada", 30), snapshot_time=111))
    assert not await snapshots.save(Snapshot(aggregate_id, 2, AccountState("ada", 20)))
    assert not await snapshots.save(Snapshot(aggregate_id, 3, AccountState("ada", 99)))
    loaded = await snapshots.load(aggregate_id)
    assert loaded == Snapshot(aggregate_id, 3, AccountState("ada", 30), snapshot_time=111)
    assert await snapshots.save(Snapshot(aggregate_id, 4, AccountState("ada", 0), deleted=True))
    again = await snapshots.load(aggregate_id)
    assert again is not None
    assert (again.version, again.deleted) == (4, True)
    other = AggregateId(aggregate_id.named_aggregate, aggregate_id.id, "another-tenant")
    assert await snapshots.load(other) is None


async def test_concurrent_snapshot_saves_keep_the_newest(snapshots: PostgresSnapshotRepository) -> None:
    aggregate_id = new_aggregate_id()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(snapshots.save(Snapshot(aggregate_id, v, AccountState("x", v))) for v in range(40, 0, -1))
        ),
        60,
    )
    assert results[0] is True  # version 40 went first: nothing older replaced it
    loaded = await snapshots.load(aggregate_id)
    assert loaded is not None
    assert loaded.version == 40


async def test_a_corrupt_snapshot_is_reported(snapshots: PostgresSnapshotRepository) -> None:
    aggregate_id = new_aggregate_id()
    await snapshots.save(Snapshot(aggregate_id, 1, AccountState("x", 1)))
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(f"UPDATE {snapshots.names.snapshots} SET state_type = 'nobody.knows'")
    finally:
        await connection.close()
    with pytest.raises(EventStoreDataError, match="holds no snapshot"):
        await snapshots.load(aggregate_id)


# -- two processes ----------------------------------------------------------------------

AGGREGATES = 5
APPENDS_PER_AGGREGATE = 12


@pytest.mark.slow
async def test_two_processes_appending_to_the_same_aggregates_lose_and_double_nothing(
    store: PostgresEventStore, schema: str
) -> None:
    """Both processes, started together, append to the same aggregates, each at the version
    it read + 1, retrying on a conflict. Afterwards every history is dense (1..N), each stored stream
    is exactly one printed win, no win is missing, and the processes did conflict."""
    aggregates = [uuid.uuid4().hex for _ in range(AGGREGATES)]
    script = Path(__file__).with_name("append_worker.py")
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            POSTGRES_DSN,
            schema,
            ",".join(aggregates),
            str(APPENDS_PER_AGGREGATE),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        for worker in workers:  # both connected before either appends
            assert worker.stdout is not None
            assert await asyncio.wait_for(worker.stdout.readline(), 60) == b"ready\n"
        outputs = await asyncio.wait_for(asyncio.gather(*(w.communicate(b"go\n") for w in workers)), 180)
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    wins: dict[str, list[str]] = {a: [] for a in aggregates}
    conflicts = 0
    for worker, (out, _) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0
        for line in out.decode().splitlines():
            first, second = line.split()
            if first == "conflicts":
                conflicts += int(second)
            else:
                wins[first].append(second)
    assert conflicts > 0, "the two processes never contended: the test proves nothing"
    for aggregate in aggregates:
        aggregate_id = AggregateId(conformance_named_aggregate(), aggregate, "t0")
        history = await store.load(aggregate_id)
        assert [s.version for s in history] == list(range(1, 2 * APPENDS_PER_AGGREGATE + 1))
        assert Counter(s.id for s in history) == Counter(wins[aggregate])
