"""The transactional outbox: events appended and their outgoing messages in one transaction,
and the relay that publishes the messages to the configured transport.

:class:`PostgresOutbox` writes a stream (through :class:`~wow_postgres.PostgresEventStore`'s
rules: version check, request-id de-duplication) and any number of
:class:`~wow_core.transport.TransportMessage` rows in the same transaction: either the
events and their messages are committed together, or neither is. There is no window in
which the events are history and their messages are lost with the process.

:class:`OutboxRelay` publishes the rows not sent yet, oldest first, with
``transport.send`` (Kafka, Redis, NATS, PostgreSQL: whatever ``WOW_TRANSPORT`` selects),
and marks a batch sent once every send of the batch returned. Guarantees:

- **at least once**: a row is marked sent only after its send returned; a relay killed
  mid-batch publishes that batch again when it (or another relay) runs next: duplicates
  are at most the batch that was in flight (``relay_batch``);
- **in batches**: the relay reads ``relay_batch`` rows in id order, sends the rows of
  each aggregate one after the other and different aggregates concurrently
  (``relay_concurrency`` at a time), and marks the sent rows in one statement;
- **in order per aggregate**: an aggregate's streams commit one after the other (the
  version check), so their rows are in id order, and one relay at a time publishes each
  aggregate's rows in id order (a failed send stops that aggregate's rows for the
  batch): the relay holds a session advisory lock on its own connection, and runs every
  statement of the outbox on that connection, so a relay that lost its connection (and
  with it the lock) cannot mark anything while another relay takes over;
- **lag as a metric**: ``wow.postgres.outbox.lag`` (gauge, seconds since the oldest row
  not sent was written; 0 when the outbox is empty) after every batch, and
  ``wow.postgres.outbox.published`` (counter).

Sent rows are kept ``outbox_retention`` seconds, then deleted by the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import asyncpg

from wow_core.metrics import Metrics, NoopMetrics
from wow_core.model import AggregateId, DomainEventStream
from wow_core.transport import TransportMessage
from wow_postgres.connection import TRANSIENT, Connection, Retrying
from wow_postgres.event_store import PostgresEventStore
from wow_postgres.migrations import Names, migrate
from wow_postgres.settings import PostgresSettings

if TYPE_CHECKING:
    from wow_core.transport.spi import Transport

log = logging.getLogger("wow_postgres")

LAG = "wow.postgres.outbox.lag"
"""Gauge: seconds since the oldest outbox row not sent yet was written (0: none)."""
PUBLISHED = "wow.postgres.outbox.published"
"""Counter: outbox rows published (a row published again after a relay crash counts again)."""


class PostgresOutbox:
    """Appends a stream and writes its outgoing messages in one transaction."""

    def __init__(self, store: PostgresEventStore) -> None:
        self.store = store
        self.names = store.names
        self._insert_sql = f"""
            INSERT INTO {self.names.outbox} (context_name, aggregate_name, tenant_id, aggregate_id,
                                             version, topic, key, payload, timestamp)
            SELECT $1, $2, $3, $4, $5, m.topic, m.key, m.payload, m.timestamp
            FROM unnest($6::text[], $7::text[], $8::text[], $9::bigint[])
                 AS m(topic, key, payload, timestamp)"""

    async def append(self, stream: DomainEventStream, messages: Sequence[TransportMessage]) -> None:
        """Append ``stream`` and write ``messages`` to the outbox, all in one transaction.

        Raises as :meth:`PostgresEventStore.append` (nothing is written then). Retried
        after a lost connection; an attempt whose commit was lost is recognised by the
        retry (its own stream id), so neither the stream nor its messages are written
        twice.
        """
        attempts = 0

        async def attempt(connection: Connection) -> None:
            nonlocal attempts
            attempts += 1
            async with connection.transaction():
                if await self.store.append_in(connection, stream, retried=attempts > 1):
                    await self.add(connection, messages, stream.aggregate_id, stream.version)

        await self.store.run("outbox append", attempt)

    async def add(
        self,
        connection: Connection,
        messages: Sequence[TransportMessage],
        aggregate_id: AggregateId,
        version: int,
    ) -> None:
        """Write ``messages`` in the caller's transaction on ``connection`` (``aggregate_id``
        and ``version`` say what they come from) and wake the relay at its commit."""
        if not messages:
            return
        named = aggregate_id.named_aggregate
        await connection.execute(
            self._insert_sql,
            named.context_name,
            named.aggregate_name,
            aggregate_id.tenant_id,
            aggregate_id.id,
            version,
            [m.topic for m in messages],
            [m.key for m in messages],
            [m.payload for m in messages],
            [m.timestamp for m in messages],
        )
        await connection.execute("SELECT pg_notify($1, '')", self.store.settings.outbox_channel)


class OutboxRelay:
    """Publishes the outbox to ``transport``; see the module docstring."""

    def __init__(
        self, settings: PostgresSettings, transport: Transport, *, metrics: Metrics | None = None
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.metrics: Metrics = metrics or NoopMetrics()
        self.names = Names.of(settings)
        self._wake = asyncio.Event()
        self._migrated = False
        outbox = self.names.outbox
        self._lock_key = f"wow-outbox:{settings.schema_name}.{settings.outbox_table}"
        self._batch_sql = f"""
            SELECT id, context_name, aggregate_name, tenant_id, aggregate_id, topic, key, payload, timestamp
            FROM {outbox} WHERE sent_at IS NULL ORDER BY id LIMIT $1"""
        self._mark_sql = f"UPDATE {outbox} SET sent_at = clock_timestamp() WHERE id = ANY($1::bigint[])"
        self._lag_sql = f"""
            SELECT COALESCE(EXTRACT(epoch FROM clock_timestamp() - min(created_at)), 0)::float8
            FROM {outbox} WHERE sent_at IS NULL"""
        self._prune_sql = f"""
            DELETE FROM {outbox} WHERE sent_at < clock_timestamp() - make_interval(secs => $1)"""

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Publish until ``stop`` is set (or the task is cancelled), reconnecting with backoff
        after a lost connection; waits as a standby while another relay holds the lock."""
        stop = stop or asyncio.Event()
        delay = self.settings.retry_backoff
        while not stop.is_set():
            try:
                await self._lead(stop)
                return
            except TRANSIENT as error:
                log.warning(
                    "outbox relay at %s: connection lost (%s: %s), retry in %.2fs",
                    self.settings.masked_dsn,
                    type(error).__name__,
                    error,
                    delay,
                )
                await _sleep_unless(stop, delay)
                delay = min(delay * 2, self.settings.retry_backoff_max)

    async def _connect(self) -> asyncpg.Connection[Any]:
        password = self.settings.password.get_secret_value() if self.settings.password else None

        async def connect() -> asyncpg.Connection[Any]:
            return await asyncpg.connect(
                self.settings.dsn,
                password=password,
                timeout=self.settings.connect_timeout,
                command_timeout=self.settings.command_timeout,
            )

        return await Retrying(self.settings, "outbox relay connect").run(connect)

    async def _lead(self, stop: asyncio.Event) -> None:
        connection = await self._connect()
        try:
            if self.settings.migrate_on_start and not self._migrated:
                await migrate(connection, self.settings)  # a relay may start before any store
                self._migrated = True
            while not await connection.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", self._lock_key):
                if await _sleep_unless(stop, self.settings.poll_interval):
                    return  # stopped while standing by
            log.info("outbox relay at %s: publishing", self.settings.masked_dsn)
            await connection.add_listener(self.settings.outbox_channel, self._notified)
            published_since_prune = 0
            while not stop.is_set():
                self._wake.clear()
                published = await self.publish_batch(connection)
                published_since_prune += published
                if published_since_prune >= 10 * self.settings.relay_batch:
                    await connection.execute(self._prune_sql, self.settings.outbox_retention)
                    published_since_prune = 0
                if published < self.settings.relay_batch:
                    waiting = asyncio.ensure_future(self._wake.wait())
                    stopping = asyncio.ensure_future(stop.wait())
                    try:
                        await asyncio.wait(
                            {waiting, stopping},
                            timeout=self.settings.poll_interval,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    finally:
                        waiting.cancel()
                        stopping.cancel()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), 5)  # releases the lock

    def _notified(self, connection: Connection, pid: int, channel: str, payload: object) -> None:
        self._wake.set()

    async def publish_batch(self, connection: Connection) -> int:
        """Publish the oldest ``relay_batch`` rows not sent, then mark the sent ones in one
        statement; return how many were sent. ``connection`` must hold the relay lock.

        The rows of one aggregate are sent one after the other, in id order; different
        aggregates concurrently, ``relay_concurrency`` at a time. A send that fails stops
        its aggregate's rows there (the later ones stay unsent, so the next batch starts
        with it, in order); the rows sent meanwhile are marked, then the error is raised.
        """
        rows = await connection.fetch(self._batch_sql, self.settings.relay_batch)
        lanes: dict[tuple[str, str, str, str], list[asyncpg.Record]] = {}
        for row in rows:
            aggregate = (row["context_name"], row["aggregate_name"], row["tenant_id"], row["aggregate_id"])
            lanes.setdefault(aggregate, []).append(row)
        sent: list[int] = []
        gate = asyncio.Semaphore(self.settings.relay_concurrency)

        async def publish(lane: list[asyncpg.Record]) -> None:
            async with gate:
                for row in lane:
                    await self.transport.send(
                        TransportMessage(
                            topic=str(row["topic"]),
                            key=str(row["key"]),
                            payload=str(row["payload"]),
                            timestamp=int(row["timestamp"]),
                        )
                    )
                    sent.append(int(row["id"]))

        outcomes = await asyncio.gather(*(publish(lane) for lane in lanes.values()), return_exceptions=True)
        if sent:
            await connection.execute(self._mark_sql, sent)
            self.metrics.increment(PUBLISHED, len(sent))
        await self.report_lag(connection)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return len(sent)

    async def report_lag(self, connection: Connection) -> None:
        """Set the lag gauge from the outbox as it is now."""
        self.metrics.gauge(LAG, float(await connection.fetchval(self._lag_sql)))


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` or until ``stop``; True when stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
