"""``PostgresEventStore`` and ``PostgresSnapshotRepository``: event sourcing on PostgreSQL.

Layout (see :mod:`wow_postgres.migrations`): one table of event streams, a row per
stream, the aggregate type as columns; the payload is the stream's wire form (the bus's
JSON) as ``jsonb``. Two unique constraints decide the append rules inside the database:

- ``(context, aggregate, tenant, id, version)``: one stream per version;
- ``(context, aggregate, request_id)``: one append per request id and aggregate type.

``append`` is one ``INSERT ... SELECT ... WHERE`` statement (one transaction) that writes
the row only when the aggregate's current version is ``version - 1``; concurrent appends
of the same version meet on the first constraint (PostgreSQL makes the later wait for the
earlier's commit), so from any number of processes there is exactly one winner per
version and per request id. A refused append writes nothing and is diagnosed after the
fact: a recorded request id is :class:`~wow_core.eventsourcing.DuplicateRequestIdError`
(naming the original, and winning over a version conflict), anything else
:class:`~wow_core.eventsourcing.EventVersionConflictError` with the version found.

A lost connection is retried (``retry_*`` settings). An append whose commit was lost in
flight is retried too: if the first attempt did commit, the retry meets its own request
id with its own stream id at the same version and returns as a success, so an append is
never reported failed when it landed, nor written twice.

``read_all`` reads every aggregate's streams in commit order for catching up: a row is
returned only once every transaction that may still append a row ordered before it has
ended, so a reader never skips a stream committed late with a lower position (see
:class:`GlobalPosition` and :meth:`PostgresEventStore.read_all`); a transaction that does
not append (another table, an idle session) holds nothing back.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from wow_core.eventsourcing import (
    AppendedRequest,
    DuplicateRequestIdError,
    EventStoreError,
    EventVersionConflictError,
    Snapshot,
    check_range,
)
from wow_core.model import (
    AggregateId,
    BodyTypeRegistry,
    DomainEventStream,
    MessageCodec,
    NamedAggregate,
    TopicKind,
)
from wow_postgres.connection import Connection, Retrying, create_pool
from wow_postgres.migrations import Names, migrate
from wow_postgres.settings import SECTION, PostgresSettings

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings
    from wow_postgres.outbox import PostgresOutbox


class EventStoreDataError(EventStoreError):
    """A row of the event-store tables is not what this store writes."""


@dataclass(frozen=True, slots=True, order=True)
class GlobalPosition:
    """Where a catching-up reader is: after the stream at ``(transaction_id, position)``.

    Positions come from a sequence, so a transaction that commits late can hold a lower
    position than one already read; ordering by the writing transaction first, and reading
    only transactions older than every one that may still append, gives an order in which
    nothing appears behind the reader. ``transaction_id`` is the appending transaction's
    xid, or, for an append made after the transaction wrote elsewhere, the xid of a
    subtransaction begun when it appended (migration 5).
    """

    transaction_id: int = 0
    position: int = 0


START = GlobalPosition()
"""Before the first stream."""


@dataclass(frozen=True, slots=True)
class PositionedStream:
    """A stream read by :meth:`PostgresEventStore.read_all`, with the position after it."""

    position: GlobalPosition
    stream: DomainEventStream


class _PostgresStore:
    """The pool, settings and codec the two classes share."""

    def __init__(
        self,
        settings: PostgresSettings | None = None,
        *,
        codec: MessageCodec | None = None,
        pool: asyncpg.Pool | None = None,
    ) -> None:
        self.settings = settings or PostgresSettings()
        self.names = Names.of(self.settings)
        self._codec = codec
        self._pool = pool
        self._owns_pool = pool is None
        self._opening = asyncio.Lock()
        self._migrated = False

    def use_codec(self, codec: MessageCodec) -> None:
        """Use the process's codec (the runtime calls this; see ``CodecAware``)."""
        self._codec = codec

    @property
    def codec(self) -> MessageCodec:
        if self._codec is None:
            self._codec = MessageCodec(BodyTypeRegistry())
        return self._codec

    async def pool(self) -> asyncpg.Pool:
        """The pool, opened (and the schema migrated, with ``migrate_on_start``) on first use."""
        if self._pool is not None and self._migrated:
            return self._pool
        async with self._opening:
            if self._pool is None:
                self._pool = await create_pool(self.settings)
            if not self._migrated:
                if self.settings.migrate_on_start:
                    pool = self._pool

                    async def run() -> None:
                        async with pool.acquire() as connection:
                            await migrate(connection, self.settings)

                    await Retrying(self.settings, "migrate").run(run)
                self._migrated = True
            return self._pool

    async def start(self) -> None:
        """Open the pool and migrate (the runtime calls it at start, so a server that is
        down or a schema too new stops the process at once)."""
        await self.pool()

    async def run(self, what: str, operation: Any) -> Any:
        """``operation(connection)`` on a pooled connection, retried after a lost connection."""
        return await self._retry(what, operation)

    async def _retry(self, what: str, operation: Any) -> Any:
        pool = await self.pool()

        async def attempt() -> Any:
            async with pool.acquire() as connection:
                return await operation(connection)

        return await Retrying(self.settings, what).run(attempt)

    async def close(self) -> None:
        if self._pool is not None and self._owns_pool:
            pool, self._pool = self._pool, None
            self._migrated = False
            await pool.close()


def _key(aggregate_id: AggregateId) -> tuple[str, str, str, str]:
    named = aggregate_id.named_aggregate
    return named.context_name, named.aggregate_name, aggregate_id.tenant_id, aggregate_id.id


_WHERE_AGGREGATE = "context_name = $1 AND aggregate_name = $2 AND tenant_id = $3 AND aggregate_id = $4"


class PostgresEventStore(_PostgresStore):
    """An :class:`~wow_core.eventsourcing.EventStore` on PostgreSQL; see the module docstring."""

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> PostgresEventStore:
        return cls(settings.section(SECTION, PostgresSettings))

    def __init__(
        self,
        settings: PostgresSettings | None = None,
        *,
        codec: MessageCodec | None = None,
        pool: asyncpg.Pool | None = None,
    ) -> None:
        super().__init__(settings, codec=codec, pool=pool)
        events = self.names.events
        self._insert_sql = f"""
            INSERT INTO {events} (context_name, aggregate_name, tenant_id, aggregate_id, version,
                                  stream_id, request_id, command_id, create_time, payload)
            SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb
            WHERE COALESCE((SELECT max(version) FROM {events} WHERE {_WHERE_AGGREGATE}), 0) = $5 - 1
            RETURNING global_position"""
        key_class, key_table = self.names.append_lock
        # The protocol is in force while both triggers of migration 5 fire (not on a standby,
        # whose snapshots list no running xids and whose pg_locks shows none of the primary's).
        in_force = f"""NOT pg_is_in_recovery() AND (
                    SELECT count(*) FROM pg_trigger
                    WHERE tgrelid = to_regclass('{events}')
                      AND tgname IN ('{self.names.append_lock_trigger}', '{self.names.late_append_trigger}')
                      AND tgenabled IN ('O', 'A')) = 2"""
        self._read_all_sql = f"""
            WITH snapshot AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
            locks AS MATERIALIZED (
                SELECT locktype, pid, virtualtransaction, transactionid::text::bigint AS xid
                FROM pg_locks
                WHERE granted AND (
                    (locktype = 'transactionid' AND mode = 'ExclusiveLock')
                    OR (locktype = 'advisory' AND classid = {key_class & 0xFFFFFFFF}::oid
                        AND objid = {key_table & 0xFFFFFFFF}::oid AND objsubid = 2
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())))),
            cutoff AS MATERIALIZED (
                SELECT CASE WHEN {in_force}
                    THEN LEAST(pg_snapshot_xmax(s), (
                        SELECT min(running) FROM pg_snapshot_xip(s) AS running
                        WHERE NOT EXISTS (
                            SELECT FROM locks AS own
                            WHERE own.locktype = 'transactionid' AND own.pid IS NOT NULL
                              AND own.xid = running::text::bigint % 4294967296
                              AND NOT EXISTS (
                                  SELECT FROM locks AS appending
                                  WHERE appending.locktype = 'advisory'
                                    AND appending.virtualtransaction = own.virtualtransaction))))
                    ELSE pg_snapshot_xmin(s) END AS xid
                FROM snapshot)
            SELECT transaction_id::text::bigint AS tx, global_position, version, payload
            FROM {events}
            WHERE (transaction_id, global_position) > ($1::text::xid8, $2)
              AND transaction_id < (SELECT xid FROM cutoff)
            ORDER BY transaction_id, global_position
            LIMIT $3"""

    async def append(self, stream: DomainEventStream) -> None:
        await self.append_in(None, stream)

    def transactional_outbox(self) -> PostgresOutbox | None:
        """The outbox the command kernel appends through: one over this store with
        ``outbox_enabled``, else ``None`` (the kernel appends and publishes as usual)."""
        if not self.settings.outbox_enabled:
            return None
        from wow_postgres.outbox import PostgresOutbox

        return PostgresOutbox(self)

    async def append_in(
        self, connection: Connection | None, stream: DomainEventStream, *, retried: bool = False
    ) -> bool:
        """Append ``stream``; inside the caller's transaction on ``connection`` when given
        (the outbox writes its messages in the same one), else in its own, retried after a
        lost connection. Raises as :meth:`append`.

        Returns False only when ``retried`` and the stream is found already appended by an
        earlier attempt whose commit was lost in flight (nothing was written now)."""
        stream.header.with_read_only()
        payload = self.codec.encode(stream)
        args = (
            *_key(stream.aggregate_id),
            stream.version,
            stream.id,
            stream.request_id,
            stream.command_id,
            stream.create_time,
            payload,
        )
        if connection is not None:
            return await self._insert(connection, stream, args, retried=retried)
        attempts = 0

        async def attempt(conn: Connection) -> bool:
            nonlocal attempts
            attempts += 1
            return await self._insert(conn, stream, args, retried=attempts > 1)

        written: bool = await self._retry("event store append", attempt)
        return written

    async def _insert(
        self,
        connection: Connection,
        stream: DomainEventStream,
        args: tuple[Any, ...],
        *,
        retried: bool,
    ) -> bool:
        try:
            if connection.is_in_transaction():
                # a savepoint: a refused insert must not abort the caller's transaction
                async with connection.transaction():
                    position = await connection.fetchval(self._insert_sql, *args)
            else:
                position = await connection.fetchval(self._insert_sql, *args)
        except asyncpg.UniqueViolationError:
            position = None
        if position is not None:
            return True
        # Refused: say why. A recorded request id wins over a version conflict.
        original = await self._find(connection, stream.aggregate_id.named_aggregate, stream.request_id)
        if original is not None:
            request, stream_id = original
            if retried and stream_id == stream.id:
                return False  # our own earlier attempt committed before its connection was lost
            raise DuplicateRequestIdError(stream.request_id, request.aggregate_id, request.version)
        actual = await self._last_version(connection, stream.aggregate_id)
        raise EventVersionConflictError(stream.aggregate_id, stream.version - 1, actual)

    async def load(
        self, aggregate_id: AggregateId, head_version: int = 1, tail_version: int | None = None
    ) -> list[DomainEventStream]:
        check_range(head_version, tail_version)
        sql = (
            f"SELECT version, payload FROM {self.names.events} WHERE {_WHERE_AGGREGATE} "
            "AND version >= $5 AND ($6::integer IS NULL OR version <= $6) ORDER BY version"
        )

        async def fetch(conn: Connection) -> list[asyncpg.Record]:
            return list(await conn.fetch(sql, *_key(aggregate_id), head_version, tail_version))

        rows = await self._retry("event store load", fetch)
        streams = [self._stream(row) for row in rows]
        for offset, stream in enumerate(streams):
            if stream.aggregate_id != aggregate_id or stream.version != head_version + offset:
                raise EventStoreDataError(
                    f"the row of {aggregate_id} at version {rows[offset]['version']} is not the stream "
                    f"of version {head_version + offset}"
                )
        return streams

    async def load_by_time(
        self, aggregate_id: AggregateId, start_time: int, end_time: int | None = None
    ) -> list[DomainEventStream]:
        """The streams created (``create_time``, epoch ms) in ``start_time..end_time``
        (inclusive; ``None``: to now), in version order."""
        if end_time is not None and end_time < start_time:
            raise ValueError(f"end_time {end_time} is before start_time {start_time}")
        sql = (
            f"SELECT version, payload FROM {self.names.events} WHERE {_WHERE_AGGREGATE} "
            "AND create_time >= $5 AND ($6::bigint IS NULL OR create_time <= $6) ORDER BY version"
        )

        async def fetch(conn: Connection) -> list[asyncpg.Record]:
            return list(await conn.fetch(sql, *_key(aggregate_id), start_time, end_time))

        return [self._stream(row) for row in await self._retry("event store load", fetch)]

    async def read_all(self, after: GlobalPosition = START, limit: int = 1000) -> list[PositionedStream]:
        """Up to ``limit`` streams of every aggregate after ``after``, in commit order; pass
        the last one's position to read on. Streams of appends still in flight, and every
        stream ordered after one, are left for a later call; transactions that do not
        append hold nothing back.

        The guarantee: a stream ordered before the last position returned is never
        committed after this call, so a reader that moves on never skips one. Order:
        ``(transaction_id, global_position)``.

        Why (migration 5; a schema without it keeps the cluster-wide rule
        ``transaction_id < pg_snapshot_xmin``): every insert into the events table takes a
        shared advisory transaction lock (:func:`~wow_postgres.migrations.append_lock_key`)
        in a statement trigger, before its first row, and a transaction that already had
        an xid then gives its rows the xid of a subtransaction begun after the lock. The
        statement's cutoff is ``min(xmax, x)`` over the xids ``x`` of its snapshot's
        running transactions, leaving out those that ``pg_locks`` (read after the
        snapshot) shows running without the lock. A row committed later with a key
        ``k`` below the cutoff ``< xmax`` was keyed before the snapshot, by a
        transaction ``T`` running at the snapshot, whose lock came before ``k``: so ``T``
        held the lock at the snapshot and its top-level xid (``<= k``) is in the
        snapshot's running list; in ``pg_locks`` ``T`` is then either still holding the
        lock or ended (its xid lock gone, it goes before the advisory one), and either
        way the cutoff is at most ``T``'s xid ``<= k``: a contradiction. A transaction
        running without the lock can append only with a fresh key above ``xmax``. (The
        xid lock goes before the advisory one at the end of a transaction; a prepared
        transaction, whose locks go in no set order, is never left out.)
        One statement; ``pg_locks`` is read only when a transaction was running."""
        if not 1 <= limit <= 100_000:
            raise ValueError(f"limit must be in 1..100000, got {limit}")
        sql = self._read_all_sql

        async def fetch(conn: Connection) -> list[asyncpg.Record]:
            return list(await conn.fetch(sql, str(after.transaction_id), after.position, limit))

        rows = await self._retry("event store read", fetch)
        return [
            PositionedStream(GlobalPosition(int(row["tx"]), int(row["global_position"])), self._stream(row))
            for row in rows
        ]

    async def last_version(self, aggregate_id: AggregateId) -> int:
        async def fetch(conn: Connection) -> int:
            return await self._last_version(conn, aggregate_id)

        result: int = await self._retry("event store last version", fetch)
        return result

    async def find_request(self, named_aggregate: NamedAggregate, request_id: str) -> AppendedRequest | None:
        async def fetch(conn: Connection) -> tuple[AppendedRequest, str] | None:
            return await self._find(conn, named_aggregate, request_id)

        found: tuple[AppendedRequest, str] | None = await self._retry("event store find request", fetch)
        return None if found is None else found[0]

    async def _last_version(self, connection: Connection, aggregate_id: AggregateId) -> int:
        sql = f"SELECT COALESCE(max(version), 0) FROM {self.names.events} WHERE {_WHERE_AGGREGATE}"
        return int(await connection.fetchval(sql, *_key(aggregate_id)))

    async def _find(
        self, connection: Connection, named: NamedAggregate, request_id: str
    ) -> tuple[AppendedRequest, str] | None:
        row = await connection.fetchrow(
            f"SELECT tenant_id, aggregate_id, version, stream_id FROM {self.names.events} "
            "WHERE context_name = $1 AND aggregate_name = $2 AND request_id = $3",
            named.context_name,
            named.aggregate_name,
            request_id,
        )
        if row is None:
            return None
        aggregate_id = AggregateId(named, str(row["aggregate_id"]), str(row["tenant_id"]))
        return AppendedRequest(request_id, aggregate_id, int(row["version"])), str(row["stream_id"])

    def _stream(self, row: asyncpg.Record) -> DomainEventStream:
        stream = self.codec.decode(_wire_text(row["payload"]), TopicKind.EVENT)
        if not isinstance(stream, DomainEventStream):
            raise EventStoreDataError(f"the row at version {row['version']} holds no event stream")
        stream.header.with_read_only()
        return stream


def _wire_text(payload: str) -> str:
    """The wire text of a ``jsonb`` payload.

    ``jsonb`` keeps the JSON value, not its text: it reorders the keys and adds spaces,
    while the codec recognises a version 2 envelope by its first member (``{"v":``). The
    value is written back compactly with ``"v"`` first; a version 1 payload (no ``"v"``)
    is returned as it was read.
    """
    value = json.loads(payload)
    if not isinstance(value, dict) or "v" not in value:
        return payload
    ordered = {"v": value.pop("v"), **value}
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)


class PostgresSnapshotRepository(_PostgresStore):
    """A :class:`~wow_core.eventsourcing.SnapshotRepository` on PostgreSQL: one row per
    aggregate, replaced by an upsert only when the saved version is newer (the comparison
    is in the statement, so a late, older snapshot never replaces a newer one, whichever
    process writes it)."""

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> PostgresSnapshotRepository:
        return cls(settings.section(SECTION, PostgresSettings))

    async def load(self, aggregate_id: AggregateId) -> Snapshot | None:
        sql = (
            f"SELECT version, state_type, state, deleted, snapshot_time FROM {self.names.snapshots} "
            f"WHERE {_WHERE_AGGREGATE}"
        )

        async def fetch(conn: Connection) -> asyncpg.Record | None:
            return await conn.fetchrow(sql, *_key(aggregate_id))

        row = await self._retry("snapshot load", fetch)
        if row is None:
            return None
        try:
            state = self.codec.registry.load(str(row["state_type"]), json.loads(row["state"]))
            return Snapshot(
                aggregate_id=aggregate_id,
                version=int(row["version"]),
                state=state,
                deleted=bool(row["deleted"]),
                snapshot_time=int(row["snapshot_time"]),
            )
        except (ValueError, TypeError) as error:
            raise EventStoreDataError(
                f"the snapshot row of {aggregate_id} holds no snapshot: {error}"
            ) from error

    async def save(self, snapshot: Snapshot) -> bool:
        state_type, state = self.codec.registry.dump(snapshot.state)
        data = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
        table = self.names.snapshots
        sql = f"""
            INSERT INTO {table} AS held (context_name, aggregate_name, tenant_id, aggregate_id,
                                         version, state_type, state, deleted, snapshot_time)
            VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9)
            ON CONFLICT (context_name, aggregate_name, tenant_id, aggregate_id) DO UPDATE
                SET version = EXCLUDED.version, state_type = EXCLUDED.state_type, state = EXCLUDED.state,
                    deleted = EXCLUDED.deleted, snapshot_time = EXCLUDED.snapshot_time
                WHERE held.version < EXCLUDED.version
            RETURNING 1"""

        async def write(conn: Connection) -> bool:
            kept = await conn.fetchval(
                sql,
                *_key(snapshot.aggregate_id),
                snapshot.version,
                state_type,
                data,
                snapshot.deleted,
                snapshot.snapshot_time,
            )
            return kept is not None

        result: bool = await self._retry("snapshot save", write)
        return result
