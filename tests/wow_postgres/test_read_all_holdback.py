"""What holds ``read_all`` back: only transactions that may still append events.

A transaction of the database that holds an xid but does not append (another table, an
idle session, a report) no longer stops a catch-up reader; an append in flight still
holds back everything committed after it; a transaction that wrote elsewhere first and
appends later is never skipped (its stream gets a key above what a reader passed); and
concurrent appenders, through every path, are read exactly once each, in order.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.eventsourcing import EventVersionConflictError
from wow_core.model import AggregateId, BodyTypeRegistry, DomainEventStream, MessageCodec
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, make_stream, new_aggregate_id
from wow_core.transport import TransportMessage
from wow_postgres import START, GlobalPosition, PositionedStream, PostgresEventStore, PostgresSettings

pytestmark = pytest.mark.postgres


@pytest.fixture
async def store(settings_for: Callable[..., PostgresSettings]) -> AsyncIterator[PostgresEventStore]:
    made = PostgresEventStore(
        settings_for(outbox_enabled=True, pool_max_size=8),
        codec=MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES)),
    )
    await made.start()
    yield made
    await made.close()


@pytest.fixture
async def scratch(store: PostgresEventStore) -> str:
    """A table of the test's schema that is not the events table."""
    name = f"{store.names.schema}.scratch"
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(f"CREATE TABLE {name} (n integer)")
    finally:
        await connection.close()
    return name


async def read_until(
    store: PostgresEventStore, after: GlobalPosition, count: int, *, seconds: float = 5
) -> list[PositionedStream]:
    """Pages of ``read_all`` from ``after`` until ``count`` streams came back (or time ran out)."""
    deadline = asyncio.get_running_loop().time() + seconds
    read: list[PositionedStream] = []
    while len(read) < count and asyncio.get_running_loop().time() < deadline:
        page = await store.read_all(after)
        if page:
            read.extend(page)
            after = page[-1].position
        else:
            await asyncio.sleep(0.02)
    return read


async def open_transaction(connection: asyncpg.Connection) -> asyncpg.transaction.Transaction:
    transaction = connection.transaction()
    await transaction.start()
    return transaction


async def test_a_transaction_left_open_on_another_table_does_not_hold_read_all_back(
    store: PostgresEventStore, scratch: str
) -> None:
    other = await asyncpg.connect(POSTGRES_DSN)
    try:
        transaction = await open_transaction(other)
        await other.execute(f"INSERT INTO {scratch} VALUES (1)")  # holds an xid, left open
        assert await other.fetchval("SELECT pg_current_xact_id_if_assigned()") is not None
        streams = [make_stream(new_aggregate_id(), 1) for _ in range(3)]
        for stream in streams:
            await store.append(stream)
        read = await read_until(store, START, len(streams), seconds=3)
        assert [p.stream.id for p in read] == [s.id for s in streams]
        await transaction.rollback()
    finally:
        await other.close()


async def test_an_append_in_flight_holds_back_what_commits_after_it_then_nothing_is_skipped(
    store: PostgresEventStore,
) -> None:
    before = make_stream(new_aggregate_id(), 1)
    await store.append(before)
    first = await read_until(store, START, 1)
    assert [p.stream.id for p in first] == [before.id]
    in_flight = make_stream(new_aggregate_id(), 1)
    later = [make_stream(new_aggregate_id(), 1) for _ in range(3)]
    appender = await asyncpg.connect(POSTGRES_DSN)
    try:
        transaction = await open_transaction(appender)
        assert await store.append_in(appender, in_flight)  # inserted, not committed
        for stream in later:
            await store.append(stream)
        for _ in range(5):  # held back for as long as the append is in flight
            assert await store.read_all(first[-1].position) == []
            await asyncio.sleep(0.05)
        await transaction.commit()
    finally:
        await appender.close()
    rest = await read_until(store, first[-1].position, 1 + len(later))
    assert [p.stream.id for p in rest] == [in_flight.id, *(s.id for s in later)]
    assert [p.position for p in rest] == sorted(p.position for p in rest)
    assert await store.read_all(rest[-1].position) == []


async def test_an_append_after_another_write_in_its_transaction_is_not_skipped(
    store: PostgresEventStore, scratch: str
) -> None:
    """The transaction gets its xid from another table first and appends only after a
    reader went past that xid: its stream must still reach the reader, after its position."""
    late_writer = await asyncpg.connect(POSTGRES_DSN)
    try:
        transaction = await open_transaction(late_writer)
        await late_writer.execute(f"INSERT INTO {scratch} VALUES (1)")
        early_xid = int(await late_writer.fetchval("SELECT pg_current_xact_id()::text::bigint"))
        passed = [make_stream(new_aggregate_id(), 1) for _ in range(2)]
        for stream in passed:
            await store.append(stream)
        read = await read_until(store, START, len(passed), seconds=3)
        assert [p.stream.id for p in read] == [s.id for s in passed]
        assert read[-1].position.transaction_id > early_xid  # the reader went past its xid
        late = make_stream(new_aggregate_id(), 1)
        assert await store.append_in(late_writer, late)
        raw = make_stream(new_aggregate_id(), 1)  # and one by plain SQL, without a savepoint
        await late_writer.execute(
            f"""INSERT INTO {store.names.events} (context_name, aggregate_name, tenant_id, aggregate_id,
                    version, stream_id, request_id, command_id, create_time, payload)
                VALUES ($1, $2, $3, $4, 1, $5, $6, $7, 0, $8::jsonb)""",
            raw.aggregate_id.named_aggregate.context_name,
            raw.aggregate_id.named_aggregate.aggregate_name,
            raw.aggregate_id.tenant_id,
            raw.aggregate_id.id,
            raw.id,
            raw.request_id,
            raw.command_id,
            store.codec.encode(raw),
        )
        after_late = make_stream(new_aggregate_id(), 1)
        await store.append(after_late)  # committed while the late writer is still open
        assert await store.read_all(read[-1].position) == []  # held back by the appending transaction
        await transaction.commit()
    finally:
        await late_writer.close()
    rest = await read_until(store, read[-1].position, 3)
    assert sorted(p.stream.id for p in rest[:2]) == sorted([late.id, raw.id])
    assert [p.stream.id for p in rest[2:]] == [after_late.id]
    assert all(p.position > read[-1].position for p in rest)
    assert [s.id for s in await store.load(late.aggregate_id)] == [late.id]


async def test_concurrent_appenders_on_every_path_are_read_exactly_once_in_order(
    store: PostgresEventStore, scratch: str
) -> None:
    after = START
    for _ in range(3):
        after = await _one_concurrent_round(store, scratch, after)


async def _one_concurrent_round(
    store: PostgresEventStore, scratch: str, start: GlobalPosition
) -> GlobalPosition:
    outbox = store.transactional_outbox()
    assert outbox is not None
    aggregates = [new_aggregate_id() for _ in range(6)]
    versions = 12
    appended: dict[str, DomainEventStream] = {}
    stop = asyncio.Event()

    async def append_one(stream: DomainEventStream, path: int) -> None:
        if path == 0:
            await store.append(stream)
        elif path == 1:
            message = TransportMessage("topic", stream.aggregate_id.id, stream.id, stream.version)
            await outbox.append(stream, [message])
        else:  # another write first, then the append, in one transaction of the caller's
            connection = await asyncpg.connect(POSTGRES_DSN)
            try:
                async with connection.transaction():
                    await connection.execute(f"INSERT INTO {scratch} VALUES ($1)", stream.version)
                    await asyncio.sleep(random.random() * 0.01)
                    await store.append_in(connection, stream)
                    await asyncio.sleep(random.random() * 0.01)
            finally:
                await connection.close()

    async def appender(aggregate_id: AggregateId, path: int) -> None:
        for version in range(1, versions + 1):
            stream = make_stream(aggregate_id, version)
            try:
                await append_one(stream, path)
            except EventVersionConflictError:  # pragma: no cover - one writer per aggregate
                raise
            appended[stream.id] = stream

    async def idler() -> None:  # a transaction of the database holding an xid, renewed
        connection = await asyncpg.connect(POSTGRES_DSN)
        try:
            while not stop.is_set():
                async with connection.transaction():
                    await connection.execute(f"INSERT INTO {scratch} VALUES (0)")
                    await asyncio.sleep(0.05)
        finally:
            await connection.close()

    seen: list[PositionedStream] = []

    async def reader() -> None:
        after = start
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while loop.time() < deadline:
            page = await store.read_all(after, limit=7)
            seen.extend(page)
            if page:
                after = page[-1].position
            elif stop.is_set() and len(seen) >= len(aggregates) * versions:
                return
            else:
                await asyncio.sleep(0.005)

    idling = asyncio.create_task(idler())
    reading = asyncio.create_task(reader())
    await asyncio.wait_for(
        asyncio.gather(*(appender(a, n % 3) for n, a in enumerate(aggregates))), timeout=60
    )
    stop.set()
    await asyncio.wait_for(reading, timeout=60)
    await idling
    ids = [p.stream.id for p in seen]
    assert Counter(ids) == Counter(list(appended)), "a stream was skipped or read twice"
    assert [p.position for p in seen] == sorted(p.position for p in seen)
    by_aggregate: dict[AggregateId, list[int]] = defaultdict(list)
    for p in seen:
        by_aggregate[p.stream.aggregate_id].append(p.stream.version)
    assert all(v == list(range(1, versions + 1)) for v in by_aggregate.values())
    return seen[-1].position


async def test_a_late_appends_key_is_widened_to_xid8_across_the_wraparound(store: PostgresEventStore) -> None:
    """The late key is a 32-bit subtransaction xid made ``xid8`` from the top-level one:
    in the same epoch, and in the next when the 32-bit counter wrapped in between."""
    widen = f"{store.names.schema}.event_stream_widen_xid"
    epoch = 1 << 32
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        for top, sub, expected in [
            (1813, 1814, 1814),
            (3 * epoch + 5, 9, 3 * epoch + 9),
            (3 * epoch + epoch - 6, 3, 4 * epoch + 3),
            (3 * epoch + epoch - 1, epoch - 1, 4 * epoch - 1),
        ]:
            got = await connection.fetchval(
                f"SELECT {widen}($1::text::xid8, $2::text::xid)::text::bigint", str(top), str(sub)
            )
            assert got == expected, (top, sub)
    finally:
        await connection.close()


async def test_normal_appends_carry_their_own_xid_and_late_ones_a_fresh_one(
    store: PostgresEventStore, scratch: str
) -> None:
    """The lock is taken before the xid (by the insert trigger, before any row): an append
    that is its transaction's first write keeps the transaction's xid as its key."""
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        async with connection.transaction():
            await store.append_in(connection, make_stream(new_aggregate_id(), 1))
            first = await connection.fetchval("SELECT pg_current_xact_id()::text::bigint")
            assert await connection.fetchval("SELECT current_setting('wow.late_append', true)") in (None, "")
            held = await connection.fetchval(
                "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' "
                "AND classid = $1::oid AND objid = $2::oid AND objsubid = 2 AND granted",
                store.names.append_lock[0] & 0xFFFFFFFF,
                store.names.append_lock[1] & 0xFFFFFFFF,
            )
            assert held == 1
            await store.append_in(connection, make_stream(new_aggregate_id(), 1))  # xid held: late
        async with connection.transaction():
            await connection.execute(f"INSERT INTO {scratch} VALUES (1)")
            top = await connection.fetchval("SELECT pg_current_xact_id()::text::bigint")
            await store.append_in(connection, make_stream(new_aggregate_id(), 1))
        keys = [
            int(row["tx"])
            for row in await connection.fetch(
                f"SELECT transaction_id::text::bigint AS tx FROM {store.names.events} "
                "ORDER BY global_position"
            )
        ]
    finally:
        await connection.close()
    assert keys[0] == first
    assert keys[1] > first
    assert keys[2] > top


async def test_with_the_append_lock_trigger_disabled_the_cluster_wide_rule_applies(
    store: PostgresEventStore, scratch: str
) -> None:
    """A writer could then insert without the lock: every running transaction holds back again."""
    admin = await asyncpg.connect(POSTGRES_DSN)
    other = await asyncpg.connect(POSTGRES_DSN)
    try:
        await admin.execute(
            f'ALTER TABLE {store.names.events} DISABLE TRIGGER "{store.names.append_lock_trigger}"'
        )
        transaction = await open_transaction(other)
        await other.execute(f"INSERT INTO {scratch} VALUES (1)")
        await store.append(make_stream(new_aggregate_id(), 1))
        assert await store.read_all(START) == []
        await transaction.rollback()
        await admin.execute(
            f'ALTER TABLE {store.names.events} ENABLE TRIGGER "{store.names.append_lock_trigger}"'
        )
        assert len(await read_until(store, START, 1)) == 1
    finally:
        await other.close()
        await admin.close()


async def test_a_late_append_needs_no_update_privilege(store: PostgresEventStore, scratch: str) -> None:
    role = f"wowtest_role_{store.settings.schema_name[-12:]}"
    admin = await asyncpg.connect(POSTGRES_DSN)
    try:
        await admin.execute(f"CREATE ROLE {role} NOLOGIN")
        await admin.execute(
            f"GRANT USAGE ON SCHEMA {store.names.schema} TO {role}; "
            f"GRANT SELECT, INSERT ON {store.names.events}, {scratch} TO {role}"
        )
        stream = make_stream(new_aggregate_id(), 1)
        async with admin.transaction():
            await admin.execute(f"SET LOCAL ROLE {role}")
            await admin.execute(f"INSERT INTO {scratch} VALUES (1)")  # an xid first: a late append
            top = await admin.fetchval("SELECT pg_current_xact_id()::text::bigint")
            assert await store.append_in(admin, stream)
        key = await admin.fetchval(
            f"SELECT transaction_id::text::bigint FROM {store.names.events} WHERE stream_id = $1", stream.id
        )
        assert key > top
    finally:
        await admin.execute(f"DROP OWNED BY {role}; DROP ROLE IF EXISTS {role}")
        await admin.close()
