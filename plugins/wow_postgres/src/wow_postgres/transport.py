"""``PostgresTransport``: the wow-py Transport SPI over PostgreSQL queue tables.

Layout (see migration 2 in :mod:`wow_postgres.migrations`; names from ``queue_table``):

- ``<queue>_subscription (topic, group)``: which groups read a topic, written by a
  receiver's ``ready()``;
- ``<queue>``: one row per record *and group*: ``send`` copies the record to every group
  subscribed to its topic in one statement (one transaction) and notifies
  ``notify_channel`` with the topic; a row leaves the table when its group acknowledges it;
- ``<queue>_key (group, topic, key, owner, lease_until)``: which receiver of a group
  holds a key.

What ``send`` proves (SENT): the record is committed for every group subscribed to the
topic. A record sent to a topic no group has subscribed to yet is kept for the first
group that subscribes (as a broker keeps a topic's history for a group created later);
groups subscribing after that start with what is sent after their ``ready()``.

Receiving, per receiver (a member of a group): a claim is one transaction that takes the
keys nobody holds (``FOR UPDATE SKIP LOCKED`` on the key rows, so concurrent members
never block each other or take the same key), leases them, and then leases the oldest
rows of every key it holds, in order. While a receiver holds a key, no other member of
its group gets any record of it: records of one key reach one member at a time, in the
order they were committed, also across a member joining or leaving. The receiver renews
its leases every third of ``lease_time``, lets go of keys it holds no record of, and
deletes the key rows of its group that nobody holds and no record needs. A
receiver that closes hands back what it did not acknowledge at once (the next member
takes it, in order, ``delivery_count`` + 1); one that dies stops renewing, and its records
are taken again once the lease expired. Receivers sleep on ``LISTEN`` (one connection
per transport) and look again every ``poll_interval`` whatever happens, so a lost
notification or a lost listening connection delays a record, never loses it.

A record delivered ``max_deliveries`` times to a group without an acknowledgement is
poison: claims skip it, and the next lease renewal of the member holding its key moves it
to ``<topic>.dlq`` (the dead-letter topic of decode failures) with ``failed_deliveries``
and ``last_error``; records claimed ahead and handed back undelivered are not counted.

A record its consumer did not finish (its processing failed, or it stops) is released
(``PostgresRecord.release()``, the SPI's optional ``ReleasingRecord``): its row is handed
back to the group with a "not before" of now + ``release_delay_for(delivery_count)``
(``release_delay``, doubled per delivery, at most 60 s) and delivered again after it,
counted, so ``max_deliveries`` still moves a failure that never passes to ``<topic>.dlq``.
The key's order holds across the release: while the row waits, its member keeps the key,
claims take no later row of the key (of any member), and the later rows of the key read
ahead but not handed to the consumer yet are handed back too (uncounted), so the next
record of the key the group delivers is the released one; records of the key the consumer
already had are not recalled. The wait is kept in the row, not in the process: a member
that closes hands the row back at once (to the group's next claim), and one that dies
leaves it to the key's next holder once the delay passed. The hand-back is an ``UPDATE``
retried after a lost connection; failing that, the receiver's next claim or renewal
applies it first, in its own transaction. An ``ack()`` meanwhile deletes the row; a
release after ``ack()``, of a receiver that closes, or without ``release_delay`` does
nothing (the record then stays leased to its receiver until it closes or its lease
expires).

Acknowledging deletes the row; acknowledgements arriving while a deletion is under way
are deleted together by the next one (``ack_confirmed`` makes ``ack()`` wait for it).
``NOTIFY`` is sent after the send's commit, coalesced over concurrent sends (see
:class:`_Notifier`). Errors of the connection are retried with backoff (the ``retry_*``
settings); a ``send`` whose commit was lost in flight is retried, so a send is at least
once (a retried send may store the record twice), never silently lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import asyncpg

from wow_core.messaging.contract import BusClosedError
from wow_core.metrics import Metrics, NoopMetrics
from wow_core.transport import (
    DeadLetterReason,
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    TransportBase,
    TransportMessage,
)
from wow_core.transport.kit import ReadAhead, Readiness
from wow_postgres.connection import TRANSIENT, Connection, Retrying, create_pool
from wow_postgres.migrations import Names, migrate
from wow_postgres.settings import SECTION, PostgresSettings

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings

log = logging.getLogger("wow_postgres")

DEAD_LETTER_SUFFIX = ".dlq"
"""Poison records go to ``<topic>.dlq``, as the bus's decode failures do."""

UNROUTED = ""
"""The group of a row sent to a topic no group subscribed to yet: the first group takes it."""

RELEASED = "released unacknowledged by its consumer"
LAST_ERROR_CHARS = 2000
"""The most of an error's text a dead letter's ``last_error`` keeps."""
"""The ``last_error`` of a row its consumer released (:meth:`PostgresRecord.release`)."""

_WAKE_MARGIN = 0.01
"""Seconds after a released row's delay at which its receiver looks for it again."""


class _Release(NamedTuple):
    """A row its consumer released, until the hand-back commits."""

    topic: str
    key: str
    delay: float
    holds_back: bool
    """False for a row at ``max_deliveries``: it goes to ``<topic>.dlq``, the key goes on."""


class PostgresRecord:
    """One queued row delivered to this receiver; ``ack()`` deletes it."""

    __slots__ = (
        "_receiver",
        "delivery_count",
        "failed_deliveries",
        "key",
        "last_error",
        "payload",
        "row_id",
        "timestamp",
        "topic",
    )

    def __init__(
        self,
        receiver: PostgresReceiver,
        row_id: int,
        topic: str,
        key: str,
        payload: str,
        timestamp: int,
        delivery_count: int,
        failed_deliveries: int | None = None,
        last_error: str | None = None,
    ) -> None:
        self._receiver = receiver
        self.row_id = row_id
        self.topic = topic
        self.key = key
        self.payload = payload
        self.timestamp = timestamp
        self.delivery_count = delivery_count
        self.failed_deliveries = failed_deliveries
        """On a dead letter (``<topic>.dlq``): the deliveries the poison record had."""
        self.last_error = last_error
        """Why the record came back last (a lease expired, handed back unacknowledged)."""

    @property
    def position(self) -> str:
        return f"{self.topic}/{self.row_id}"

    async def ack(self) -> None:
        await self._receiver.acknowledge(self.row_id)

    def release(self) -> None:
        """Hand the record back unacknowledged (:class:`~wow_core.transport.ReleasingRecord`):
        delivered again to the group after ``release_delay_for(delivery_count)``, with
        ``delivery_count`` + 1 (``max_deliveries`` then ends it in ``<topic>.dlq``).

        Keeps the key's order: the key stays with this receiver while the row waits, no
        later record of the key is claimed before it is delivered again, and the later
        records of the key this receiver read ahead but did not hand to the consumer yet
        are handed back behind it (uncounted). Records of the key the consumer already
        has are its own. Returns at once and never raises: the ``UPDATE`` runs in the
        background, retried after a lost connection, and, failing that, by the next claim
        or lease renewal (an error is logged; until then the record stays leased to this
        receiver). Does nothing after ``ack()`` (an ``ack()`` after it deletes the row,
        waiting or not), while the receiver closes (the close hands the record back at
        once), or with no ``release_delay`` (the record stays leased to this receiver
        until it closes or dies)."""
        try:
            self._receiver.released(self)
        except Exception:
            log.exception(
                "releasing %r failed; it stays leased to its receiver until the receiver closes "
                "(handed back) or its lease expires",
                self,
            )

    def __repr__(self) -> str:
        return f"PostgresRecord({self.position} key={self.key!r} deliveries={self.delivery_count})"


DEAD_LETTERED = "wow.postgres.dead_lettered"
"""Counter (tag ``topic``): poison records moved to ``<topic>.dlq``."""


class _Listener:
    """The transport's one ``LISTEN`` connection: wakes the receivers of a notified topic.

    Reconnects with backoff when its connection is lost; the receivers' polling covers
    the gap.
    """

    def __init__(self, settings: PostgresSettings) -> None:
        self._settings = settings
        self._wakers: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._closed = False

    def register(self, topics: Sequence[str], event: asyncio.Event) -> None:
        for topic in topics:
            self._wakers.setdefault(topic, set()).add(event)

    def unregister(self, topics: Sequence[str], event: asyncio.Event) -> None:
        for topic in topics:
            self._wakers.get(topic, set()).discard(event)

    async def start(self) -> None:
        """Start listening; returns once the first LISTEN is in place (or failed once)."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name="wow-postgres-listen")
        await self._started.wait()

    def _notified(self, connection: Connection, pid: int, channel: str, payload: object) -> None:
        for event in self._wakers.get(str(payload), ()):
            event.set()

    async def _run(self) -> None:
        delay = self._settings.retry_backoff
        password = self._settings.password.get_secret_value() if self._settings.password else None
        while not self._closed:
            connection: asyncpg.Connection[Any] | None = None
            try:
                connection = await asyncpg.connect(
                    self._settings.dsn, password=password, timeout=self._settings.connect_timeout
                )
                lost = asyncio.Event()
                connection.add_termination_listener(functools.partial(_set_event, lost))
                await connection.add_listener(self._settings.notify_channel, self._notified)
                delay = self._settings.retry_backoff
                self._started.set()
                # Everything may have been missed while not listening: wake every receiver.
                for events in self._wakers.values():
                    for event in events:
                        event.set()
                await lost.wait()
            except TRANSIENT as error:
                log.warning(
                    "PostgreSQL at %s: LISTEN connection failed (%s), again in %.2fs",
                    self._settings.masked_dsn,
                    error,
                    delay,
                )
                self._started.set()  # receivers poll meanwhile
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._settings.retry_backoff_max)
            finally:
                if connection is not None and not connection.is_closed():
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(connection.close(), 5)

    async def close(self) -> None:
        self._closed = True
        self._started.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class _Notifier:
    """NOTIFY after the sends commit, coalesced: one statement per round trip for every
    topic sent to meanwhile.

    A ``NOTIFY`` inside each send's transaction would take PostgreSQL's notification lock
    at every commit, serialising the commits of every sender in the cluster; sent after
    the commit, many sends share one. A notification that fails is only a delay: the
    receivers poll.
    """

    def __init__(self, transport: PostgresTransport) -> None:
        self._transport = transport
        self._pending: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def notify(self, topic: str) -> None:
        self._pending.add(topic)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush(), name="wow-postgres-notify")

    async def _flush(self) -> None:
        channel = self._transport.settings.notify_channel
        while self._pending:
            topics, self._pending = sorted(self._pending), set()

            async def send(connection: Connection, topics: list[str] = topics) -> None:
                await connection.execute(
                    "SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t", channel, topics
                )

            try:
                await self._transport.run("notify", send)
            except Exception as error:  # the receivers poll
                log.warning(
                    "NOTIFY failed (%s: %s); receivers find the records by polling",
                    type(error).__name__,
                    error,
                )

    async def close(self) -> None:
        """Send what is pending (bounded), then stop."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), 5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _set_event(event: asyncio.Event, _: object) -> None:
    event.set()


class PostgresTransport(TransportBase["PostgresReceiver"]):
    """Queue tables on PostgreSQL; see the module docstring for what is guaranteed.

    Not guaranteed: order between records of two concurrent ``send`` calls (the caller
    decides order by awaiting), order across topics or keys.
    """

    label = "PostgreSQL"

    def __init__(
        self,
        settings: PostgresSettings | None = None,
        *,
        naming: TopicNaming | None = None,
        decode_failure_default: DecodeFailureDefault = DecodeFailureDefault.DEAD_LETTER,
        metrics: Metrics | None = None,
        pool: asyncpg.Pool | None = None,
    ) -> None:
        super().__init__(naming or DefaultTopicNaming(), decode_failure_default)
        self.settings = settings or PostgresSettings()
        self.names = Names.of(self.settings)
        self.metrics: Metrics = metrics or NoopMetrics()
        self._pool = pool
        self._owns_pool = pool is None
        self._opening = asyncio.Lock()
        self._migrated = False
        self.listener = _Listener(self.settings)
        self._notifier = _Notifier(self)
        names = self.names
        self._send_sql = _insert_for_groups(names)
        self._dead_letter_sql = _insert_for_groups(names, "failed_deliveries", "last_error")

    @classmethod
    def from_settings(cls, settings: ProcessSettings, *, metrics: Metrics | None = None) -> PostgresTransport:
        """Build from ``WOW_POSTGRES__*`` and the core's topic naming settings."""
        messaging = settings.messaging
        return cls(
            settings.section(SECTION, PostgresSettings),
            naming=DefaultTopicNaming(messaging.topic_prefix, messaging.context_aliases),
            metrics=metrics,
        )

    @property
    def name(self) -> str:
        return "postgres"

    async def pool(self) -> asyncpg.Pool:
        """The pool, opened (and the schema migrated, with ``migrate_on_start``) on first use."""
        if self._pool is not None and self._migrated:
            return self._pool
        async with self._opening:
            self._check_open()
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

    async def run(self, what: str, operation: Any) -> Any:
        """``operation(connection)`` on a pooled connection, retried after a lost connection."""
        pool = await self.pool()

        async def attempt() -> Any:
            async with pool.acquire() as connection:
                return await operation(connection)

        return await Retrying(self.settings, what).run(attempt)

    async def start(self) -> None:
        await self.pool()

    async def send(self, message: TransportMessage) -> None:
        """Commit the record for every group of its topic; return after the commit."""
        self._check_open()

        async def insert(connection: Connection) -> None:
            await connection.fetchrow(
                self._send_sql,
                message.topic,
                message.key,
                message.payload,
                message.timestamp,
            )

        await self.run("send", insert)
        self._notifier.notify(message.topic)

    async def send_dead_letter(self, message: TransportMessage, reason: DeadLetterReason) -> None:
        """:meth:`send` a dead letter of the decode-failure policy with why it is there, as
        a record past ``MAX_DELIVERIES`` has it: its ``failed_deliveries`` (the deliveries
        to the group that gave up) and its ``last_error``
        (``undecodable by group '<group>' at <position>: <error>``)."""
        self._check_open()
        error = f"{reason.reason} by group {reason.group!r} at {reason.position}"
        if reason.error:
            error = f"{error}: {reason.error}"

        async def insert(connection: Connection) -> None:
            await connection.fetchrow(
                self._dead_letter_sql,
                message.topic,
                message.key,
                message.payload,
                message.timestamp,
                reason.deliveries,
                error[:LAST_ERROR_CHARS],
            )

        await self.run("send", insert)
        self._notifier.notify(message.topic)

    def notify(self, topic: str) -> None:
        """Wake the receivers of ``topic`` (after a commit that wrote to it)."""
        self._notifier.notify(topic)

    def open(self, group: str, topics: Sequence[str]) -> PostgresReceiver:
        self._check_open()
        if not group:
            raise ValueError("a group name is needed")
        if not topics:
            raise ValueError(f"group {group!r} opens no topic")
        return self._track(PostgresReceiver(self, group, list(dict.fromkeys(topics))))

    async def close(self) -> None:
        """Close every receiver (handing back what they hold), stop listening, close the pool."""
        if not self._mark_closed():
            return
        for receiver in self._open_receivers():
            await receiver.close()
        await self._notifier.close()
        await self.listener.close()
        if self._pool is not None and self._owns_pool:
            pool, self._pool = self._pool, None
            await pool.close()


def _insert_for_groups(names: Names, *more: str) -> str:
    """The statement that stores a record (``$1`` topic, ``$2`` key, ``$3`` payload, ``$4``
    timestamp, then ``more`` columns from ``$5`` on) for every group subscribed to its
    topic, or for the first group to subscribe when there is none yet."""
    columns = ", ".join(("group_name", "topic", "key", "payload", "timestamp", *more))
    values = ", ".join(f"${n}" for n in range(1, 5 + len(more)))
    return f"""
            WITH groups AS (
                SELECT group_name FROM {names.subscriptions} WHERE topic = $1
                UNION ALL SELECT '{UNROUTED}' WHERE NOT EXISTS (
                    SELECT 1 FROM {names.subscriptions} WHERE topic = $1)
            ), stored AS (
                INSERT INTO {names.queue} ({columns})
                SELECT group_name, {values} FROM groups RETURNING 1
            )
            SELECT count(*) FROM stored"""


class PostgresReceiver:
    """A member of ``group`` reading ``topics``; see :class:`PostgresTransport`."""

    def __init__(self, transport: PostgresTransport, group: str, topics: list[str]) -> None:
        if group == UNROUTED:
            raise ValueError("a group name is needed")
        self._transport = transport
        self.group = group
        self.topics = topics
        self.owner = uuid.uuid4().hex
        settings = transport.settings
        self._settings = settings
        self._what = f"the PostgreSQL receiver of {group!r}"
        self._readiness: Readiness[None] = Readiness(self._subscribe, what=self._what)
        self._buffer: ReadAhead[PostgresRecord] = ReadAhead(settings.read_ahead)
        self._wake = asyncio.Event()
        self._processing = False
        self._closing = False
        self._closed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()  # claims and renewals of this receiver, one at a time
        self._acks: list[int] = []
        self._held: set[int] = set()
        """Rows claimed by this receiver and not yet deleted by an acknowledgement."""
        self._yielded: set[int] = set()
        """Rows of ``_held`` handed to the consumer (the others are read ahead, undelivered)."""
        self._acked: asyncio.Future[None] | None = None
        self._ack_task: asyncio.Task[None] | None = None
        self._acking: set[int] = set()
        """Rows whose acknowledgement is queued or under way."""
        self._unyielded: dict[int, PostgresRecord] = {}
        """Records claimed and waiting in the read-ahead buffer, by row id."""
        self._releasing: dict[int, _Release] = {}
        """Rows the consumer released whose hand-back is not committed yet."""
        self._returning: set[int] = set()
        """Rows read ahead behind a released row of their key, to hand back undelivered."""
        self._recalled: set[PostgresRecord] = set()
        """Records of ``_returning`` still in the buffer: skipped, never yielded."""
        self._release_task: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        """Wake-ups of the read loop once a released row's delay passed."""
        self._sql = _ReceiverSql(transport.names)

    # -- the TransportReceiver protocol ---------------------------------------------------

    async def ready(self) -> None:
        """Subscribe the group to the topics (committed: every later send reaches it) and
        start listening."""
        if self._closing:
            raise BusClosedError(f"{self._what} is closed")
        await self._readiness.wait()

    async def _subscribe(self) -> None:
        sql = self._sql

        async def subscribe(connection: Connection) -> None:
            async with connection.transaction():
                for topic in self.topics:
                    await connection.execute(sql.subscribe, topic, self.group)

        await self._transport.run("subscribe", subscribe)
        self._transport.listener.register(self.topics, self._wake)
        await self._transport.listener.start()

    def open_processing(self) -> None:
        if self._closing or self._processing:
            return
        self._processing = True
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(
                self._buffer.guard(self._read_loop(), what=self._what, logger=log), name="wow-postgres-claim"
            ),
            loop.create_task(self._renew_loop(), name="wow-postgres-renew"),
        ]

    def __aiter__(self) -> AsyncIterator[PostgresRecord]:
        return self._records()

    async def _records(self) -> AsyncIterator[PostgresRecord]:
        while True:
            try:
                record = await self._buffer.get()
            except StopAsyncIteration:
                return
            if self._recalled and record in self._recalled:  # handed back behind a released row
                self._recalled.discard(record)
                continue
            if self._unyielded.get(record.row_id) is record:
                del self._unyielded[record.row_id]
            self._yielded.add(record.row_id)
            yield record

    async def close(self) -> None:
        """Stop claiming, hand back every record not acknowledged (the group's next claim
        takes them, in order); idempotent."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            await self._readiness.close()
            self._buffer.close()
            for handle in self._timers:
                handle.cancel()
            self._timers.clear()
            tasks = [*self._tasks, *([self._release_task] if self._release_task is not None else [])]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._recalled.clear()
            self._unyielded.clear()
            self._transport.listener.unregister(self.topics, self._wake)
            if self._ack_task is not None:  # what was acknowledged is deleted before the rest is handed back
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(self._ack_task), self._settings.command_timeout)
            if self._processing:
                await self._release()
        finally:
            self._transport.receiver_closed(self)
            self._closed.set()

    # -- acknowledgement ------------------------------------------------------------------

    async def acknowledge(self, row_id: int) -> None:
        """Queue the row's deletion: acknowledgements that arrive while a deletion is under
        way go together in the next one (one ``DELETE``, one commit). Returns at once,
        or, with ``ack_confirmed``, once the deletion committed (raising its error). An
        acknowledgement lost with the process (a crash before its deletion) only delivers
        the record again."""
        self._releasing.pop(row_id, None)  # released, not handed back yet: no need any more
        self._acking.add(row_id)
        self._acks.append(row_id)
        if self._acked is None:
            self._acked = asyncio.get_running_loop().create_future()
        future = self._acked
        if self._ack_task is None or self._ack_task.done():
            self._ack_task = asyncio.get_running_loop().create_task(
                self._flush_acks(), name="wow-postgres-ack"
            )
        if self._settings.ack_confirmed:
            await asyncio.shield(future)

    async def _flush_acks(self) -> None:
        while self._acks:
            ids, self._acks = self._acks, []
            future, self._acked = self._acked, None

            async def delete(connection: Connection, ids: list[int] = ids) -> None:
                await connection.execute(self._sql.ack, ids)

            try:
                await self._transport.run("ack", delete)
            except Exception as error:
                self._acking.difference_update(ids)
                log.warning("%s: %d acknowledgement(s) failed: %s", self._what, len(ids), error)
                if future is not None and not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved here: only a confirming caller raises it
            else:
                self._acking.difference_update(ids)
                self._held.difference_update(ids)
                self._yielded.difference_update(ids)
                if future is not None and not future.done():
                    future.set_result(None)

    # -- the loops --------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        await self._readiness.wait()
        while not self._closing:
            await self._buffer.wait_for_room()
            if self._closing:
                return
            self._wake.clear()
            room = min(self._buffer.room, self._settings.claim_batch)
            records = await self._claim(room) if room > 0 else []
            for record in records:
                self._buffer.put_nowait(record)
            if len(records) < room:  # nothing more for now: sleep until notified or the poll
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._settings.poll_interval)

    async def _claim(self, limit: int) -> list[PostgresRecord]:
        sql = self._sql
        lease = self._settings.lease_time

        attempts = 0

        async def claim(connection: Connection) -> list[asyncpg.Record]:
            nonlocal attempts
            attempts += 1
            async with connection.transaction():
                # Released rows first: their keys' later rows are held back behind them below.
                await self._hand_back(connection, releases, returns)
                if attempts > 1:
                    # The previous attempt may have committed and lost its answer: rows leased
                    # to this receiver that it never got are handed back (their keys stay
                    # held, so they come next, in order).
                    await connection.execute(sql.recover, self.group, self.owner, list(self._held))
                await connection.execute(sql.adopt, self.topics, self.group)
                await connection.execute(sql.add_keys, self.group, self.topics, 4 * limit)
                await connection.execute(sql.take_keys, self.group, self.topics, self.owner, limit, lease)
                return list(
                    await connection.fetch(
                        sql.take_rows,
                        self.group,
                        self.topics,
                        self.owner,
                        limit,
                        lease,
                        self._settings.max_deliveries,
                    )
                )

        async with self._lock:
            releases, returns = self._pending_hand_backs()
            rows = await self._transport.run("claim", claim)
            self._handed_back(releases, returns)
            rows.sort(key=lambda row: row["id"])
            self._held.update(int(row["id"]) for row in rows)
            records = self._behind_late_releases(self._records_of(rows))
            for record in records:
                self._unyielded[record.row_id] = record
            return records

    def _records_of(self, rows: list[asyncpg.Record]) -> list[PostgresRecord]:
        return [
            PostgresRecord(
                self,
                int(row["id"]),
                str(row["topic"]),
                str(row["key"]),
                str(row["payload"]),
                int(row["timestamp"]),
                int(row["delivery_count"]),
                row["failed_deliveries"],
                row["last_error"],
            )
            for row in rows
        ]

    def _dead_lettered(self, rows: list[asyncpg.Record]) -> None:
        for row in rows:
            topic = str(row["topic"]).removesuffix(DEAD_LETTER_SUFFIX)
            log.warning(
                "%s: a record of %s (key %r) dead-lettered to %s after %d deliveries without an "
                "acknowledgement (max_deliveries %d); last error: %s",
                self._what,
                topic,
                row["key"],
                row["topic"],
                row["failed_deliveries"],
                self._settings.max_deliveries,
                row["last_error"],
            )
            self._transport.metrics.increment(DEAD_LETTERED, tags={"topic": topic})
        for topic in {str(row["topic"]) for row in rows}:
            self._transport.notify(topic)

    async def _renew_loop(self) -> None:
        interval = self._settings.lease_time / 3
        while not self._closing:
            await asyncio.sleep(interval)
            try:
                await self._renew()
            except Exception as error:  # the next renewal tries again; the lease covers the gap
                log.warning("%s: lease renewal failed: %s: %s", self._what, type(error).__name__, error)

    async def _renew(self) -> None:
        sql = self._sql
        lease = self._settings.lease_time

        async def renew(connection: Connection) -> list[asyncpg.Record]:
            async with connection.transaction():
                await self._hand_back(connection, releases, returns)
                await connection.execute(sql.renew_rows, self.group, self.owner, lease)
                await connection.execute(sql.renew_keys, self.group, self.owner, lease)
                dead = await connection.fetch(
                    sql.dead_letter, self.group, self.topics, self.owner, self._settings.max_deliveries
                )
                await connection.execute(sql.release_idle_keys, self.group, self.owner)
                await connection.execute(sql.forget_keys, self.group)
                return list(dead)

        async with self._lock:
            releases, returns = self._pending_hand_backs()
            dead = await self._transport.run("lease renewal", renew)
            self._handed_back(releases, returns)
        if dead:
            self._dead_lettered(dead)

    async def _release(self) -> None:
        sql = self._sql

        async def release(connection: Connection) -> None:
            async with connection.transaction():
                await connection.execute(sql.release_rows, self.group, self.owner, list(self._yielded))
                await connection.execute(sql.release_waiting, self.group, self.owner)
                await connection.execute(sql.release_keys, self.group, self.owner)

        try:
            await self._transport.run("release", release)
        except Exception as error:  # the leases expire instead
            log.warning("%s: handing back failed (%s); the leases expire instead", self._what, error)

    # -- releasing ------------------------------------------------------------------------

    def released(self, record: PostgresRecord) -> None:
        """The consumer released ``record`` unacknowledged: queue the hand-back of its row
        (delivered again after ``release_delay_for(delivery_count)``) and of the rows of
        its key read ahead behind it; see :meth:`PostgresRecord.release`. Nothing when the
        record is not this receiver's to release (acknowledged, released already), while
        closing, or without a release delay."""
        row_id = record.row_id
        if (
            self._closing
            or row_id not in self._yielded
            or row_id in self._acking
            or row_id in self._releasing
        ):
            return
        delay = self._settings.release_delay_for(record.delivery_count)
        if delay is None:
            return
        # A row at max_deliveries is not delivered again (claims skip it, the next renewal
        # dead-letters it): the key's later rows need not wait for it.
        holds_back = record.delivery_count < self._settings.max_deliveries
        self._releasing[row_id] = _Release(record.topic, record.key, delay, holds_back)
        if holds_back:
            for ahead in list(self._unyielded.values()):
                if ahead.row_id > row_id and ahead.key == record.key and ahead.topic == record.topic:
                    del self._unyielded[ahead.row_id]
                    self._recalled.add(ahead)
                    self._returning.add(ahead.row_id)
        self._flush_hand_backs()

    def _flush_hand_backs(self) -> None:
        if self._release_task is None or self._release_task.done():
            self._release_task = asyncio.get_running_loop().create_task(
                self._hand_back_pending(), name="wow-postgres-release"
            )

    async def _hand_back_pending(self) -> None:
        """Commit the queued hand-backs, one transaction per round, until none is left."""
        while (self._releasing or self._returning) and not self._closing:
            try:
                async with self._lock:
                    if not await self._hand_back_once():  # a claim or renewal applied them
                        return
            except Exception as error:  # kept: the next claim or renewal applies them first
                log.warning(
                    "%s: handing back %d released record(s) failed (%s: %s); they stay leased to "
                    "this receiver until its next claim or lease renewal hands them back",
                    self._what,
                    len(self._releasing),
                    type(error).__name__,
                    error,
                )
                return

    async def _hand_back_once(self) -> bool:
        """One transaction of the queued hand-backs (under ``_lock``); False: none queued."""
        releases, returns = self._pending_hand_backs()
        if not releases and not returns:
            return False

        async def hand_back(connection: Connection) -> None:
            async with connection.transaction():
                await self._hand_back(connection, releases, returns)

        await self._transport.run("release", hand_back)
        self._handed_back(releases, returns)
        return True

    def _pending_hand_backs(self) -> tuple[dict[int, _Release], set[int]]:
        """What to hand back in the next transaction (called under ``_lock``)."""
        releases = dict(self._releasing)
        return releases, self._returning - releases.keys()

    async def _hand_back(
        self, connection: Connection, releases: dict[int, _Release], returns: set[int]
    ) -> None:
        """Un-lease the released rows (not before their delay) and the returned ones (at
        once, uncounted), inside the caller's transaction; only rows this receiver still
        holds (idempotent: a retry after a lost commit changes nothing)."""
        if not releases and not returns:
            return
        ids = [*releases, *returns]
        delays: list[float | None] = [release.delay for release in releases.values()]
        delays.extend(None for _ in returns)
        await connection.execute(self._sql.hand_back, self.group, self.owner, ids, delays)

    def _handed_back(self, releases: dict[int, _Release], returns: set[int]) -> None:
        """The hand-back of ``releases`` and ``returns`` committed (called under ``_lock``)."""
        for row_id, release in releases.items():
            self._releasing.pop(row_id, None)
            self._held.discard(row_id)
            self._yielded.discard(row_id)
            if release.holds_back:
                self._wake_after(release.delay + _WAKE_MARGIN)
        if returns:
            self._returning.difference_update(returns)
            self._held.difference_update(returns)
            self._wake.set()  # behind a released row, or free again if it was acknowledged

    def _behind_late_releases(self, records: list[PostgresRecord]) -> list[PostgresRecord]:
        """``records`` less those claimed behind a row released while the claim ran (not in
        the database yet when it took them): those are handed back with it."""
        if not self._releasing:
            return records
        barriers: dict[tuple[str, str], int] = {}
        for row_id, release in self._releasing.items():
            barrier = barriers.get((release.topic, release.key))
            if release.holds_back and (barrier is None or row_id < barrier):
                barriers[release.topic, release.key] = row_id
        kept: list[PostgresRecord] = []
        for record in records:
            barrier = barriers.get((record.topic, record.key))
            if barrier is not None and record.row_id > barrier:
                self._returning.add(record.row_id)
            else:
                kept.append(record)
        if len(kept) < len(records):
            self._flush_hand_backs()
        return kept

    def _wake_after(self, delay: float) -> None:
        loop = asyncio.get_running_loop()

        def wake() -> None:
            self._timers.discard(handle)
            self._wake.set()

        handle = loop.call_later(delay, wake)
        self._timers.add(handle)


class _ReceiverSql:
    """The statements of a receiver (``$1`` group, ``$2`` topics, ``$3`` owner...)."""

    def __init__(self, names: Names) -> None:
        queue, keys, subscriptions = names.queue, names.keys, names.subscriptions
        self.subscribe = (
            f"INSERT INTO {subscriptions} (topic, group_name) VALUES ($1, $2) ON CONFLICT DO NOTHING"
        )
        # Rows sent before any group subscribed belong to the topic's first group.
        self.adopt = f"""
            UPDATE {queue} SET group_name = $2
            WHERE group_name = '{UNROUTED}' AND topic = ANY($1::text[]) AND topic IN (
                SELECT s.topic FROM {subscriptions} s WHERE s.topic = ANY($1::text[]) AND s.group_name = $2
                AND NOT EXISTS (
                    SELECT 1 FROM {subscriptions} e WHERE e.topic = s.topic
                    AND (e.created_at, e.group_name) < (s.created_at, s.group_name)
                )
            )"""
        # Every key with unclaimed rows has a key row to lock (a released key's row was kept).
        self.add_keys = f"""
            INSERT INTO {keys} (group_name, topic, key)
            SELECT DISTINCT group_name, topic, key FROM (
                SELECT group_name, topic, key FROM {queue}
                WHERE group_name = $1 AND topic = ANY($2::text[]) AND owner IS NULL
                ORDER BY id LIMIT $3
            ) pending
            WHERE NOT EXISTS (  -- an index probe; ON CONFLICT alone costs a speculative insert each
                SELECT 1 FROM {keys} k
                WHERE k.group_name = pending.group_name AND k.topic = pending.topic AND k.key = pending.key
            )
            ON CONFLICT DO NOTHING"""
        # Keys nobody live holds, with rows this owner does not hold yet; never a locked one.
        self.take_keys = f"""
            WITH free AS (
                SELECT k.ctid AS row FROM {keys} k
                WHERE k.group_name = $1 AND k.topic = ANY($2::text[])
                  AND (k.owner IS NULL OR k.owner <> $3 AND k.lease_until < clock_timestamp())
                  AND EXISTS (
                      SELECT 1 FROM {queue} q
                      WHERE q.group_name = k.group_name AND q.topic = k.topic AND q.key = k.key
                  )
                LIMIT $4
                FOR UPDATE OF k SKIP LOCKED
            )
            UPDATE {keys} k SET owner = $3, lease_until = clock_timestamp() + make_interval(secs => $5)
            FROM free WHERE k.ctid = free.row"""  # by ctid: the row is locked, it cannot move
        # The oldest rows of every key this owner holds that it has not been given yet, up to
        # the first one released and still waiting for its delay (an unleased row with a
        # lease_until in the future): the key's later rows do not overtake it.
        self.take_rows = f"""
            UPDATE {queue} q
            SET owner = $3, lease_until = clock_timestamp() + make_interval(secs => $5),
                delivery_count = q.delivery_count + 1,
                last_error = CASE WHEN q.owner IS NOT NULL THEN 'the lease of a receiver expired'
                                  ELSE q.last_error END
            WHERE q.id IN (
                SELECT r.id FROM {keys} k CROSS JOIN LATERAL (
                    SELECT c.id FROM (
                        SELECT c.id, bool_or(c.waiting) OVER (ORDER BY c.id) AS held_back FROM (
                            SELECT r.id,
                                   coalesce(r.owner IS NULL AND r.lease_until > clock_timestamp(),
                                            false) AS waiting
                            FROM {queue} r
                            WHERE r.group_name = k.group_name AND r.topic = k.topic AND r.key = k.key
                              AND r.owner IS DISTINCT FROM $3 AND r.delivery_count < $6
                            ORDER BY r.id LIMIT $4
                        ) c
                    ) c
                    WHERE NOT c.held_back
                ) r
                WHERE k.group_name = $1 AND k.topic = ANY($2::text[]) AND k.owner = $3
                ORDER BY r.id LIMIT $4
            )
            RETURNING q.id, q.topic, q.key, q.payload, q.timestamp, q.delivery_count, q.failed_deliveries,
                      q.last_error"""
        # Rows of this owner's keys that were delivered max_deliveries times already (and came
        # back: handed back or their lease expired) move to <topic>.dlq, for the groups that
        # read it (or the first that will), keeping their deliveries and last error. A claim
        # skips them (take_rows: delivery_count < $6), so the key's later records go on at
        # once; the next lease renewal moves them.
        self.dead_letter = f"""
            WITH poison AS (
                DELETE FROM {queue} q USING {keys} k
                WHERE k.group_name = $1 AND k.topic = ANY($2::text[]) AND k.owner = $3
                  AND q.group_name = k.group_name AND q.topic = k.topic AND q.key = k.key
                  AND q.owner IS DISTINCT FROM $3 AND q.delivery_count >= $4
                RETURNING q.id, q.topic, q.key, q.payload, q.timestamp, q.delivery_count, q.owner,
                          q.last_error
            ), routed AS (
                SELECT p.*, COALESCE(s.group_name, '{UNROUTED}') AS target
                FROM poison p LEFT JOIN {subscriptions} s ON s.topic = p.topic || '{DEAD_LETTER_SUFFIX}'
            )
            INSERT INTO {queue} (group_name, topic, key, payload, timestamp, failed_deliveries, last_error)
            SELECT target, topic || '{DEAD_LETTER_SUFFIX}', key, payload, timestamp, delivery_count,
                   CASE WHEN owner IS NOT NULL THEN 'the lease of a receiver expired'
                        ELSE last_error END
            FROM routed ORDER BY id
            RETURNING topic, key, failed_deliveries, last_error"""
        self.ack = f"DELETE FROM {queue} WHERE id = ANY($1::bigint[])"
        self.recover = f"""
            UPDATE {queue} SET owner = NULL, lease_until = NULL,
                delivery_count = greatest(delivery_count - 1, 0)
            WHERE group_name = $1 AND owner = $2 AND NOT (id = ANY($3::bigint[]))"""
        self.renew_rows = f"""
            UPDATE {queue} SET lease_until = clock_timestamp() + make_interval(secs => $3)
            WHERE group_name = $1 AND owner = $2"""
        self.renew_keys = f"""
            UPDATE {keys} SET lease_until = clock_timestamp() + make_interval(secs => $3)
            WHERE group_name = $1 AND owner = $2"""
        # A key whose rows this owner no longer holds is let go (others may take it); not
        # while a released row of it waits for its delay (it comes back to this owner).
        self.release_idle_keys = f"""
            UPDATE {keys} k SET owner = NULL, lease_until = NULL
            WHERE k.group_name = $1 AND k.owner = $2 AND NOT EXISTS (
                SELECT 1 FROM {queue} q
                WHERE q.group_name = k.group_name AND q.topic = k.topic AND q.key = k.key
                  AND (q.owner = $2 OR q.owner IS NULL AND q.lease_until > clock_timestamp())
            )"""
        # Released rows ($4: their delays) wait, unleased, until now + delay, counted and
        # marked; rows read ahead behind them (delay NULL) are handed back at once, uncounted.
        self.hand_back = f"""
            UPDATE {queue} q SET owner = NULL,
                lease_until = clock_timestamp() + make_interval(secs => r.delay),
                delivery_count = CASE WHEN r.delay IS NULL THEN greatest(q.delivery_count - 1, 0)
                                      ELSE q.delivery_count END,
                last_error = CASE WHEN r.delay IS NULL THEN q.last_error ELSE '{RELEASED}' END
            FROM unnest($3::bigint[], $4::float8[]) AS r(id, delay)
            WHERE q.id = r.id AND q.group_name = $1 AND q.owner = $2"""
        # Key rows of the group that nobody holds and no row needs are deleted (a bounded
        # number at a time), so the table follows the keys in use, not every key ever sent.
        self.forget_keys = f"""
            DELETE FROM {keys} k USING (
                SELECT f.topic, f.key FROM {keys} f
                WHERE f.group_name = $1 AND f.owner IS NULL AND NOT EXISTS (
                    SELECT 1 FROM {queue} q
                    WHERE q.group_name = f.group_name AND q.topic = f.topic AND q.key = f.key
                )
                LIMIT 1000
                FOR UPDATE OF f SKIP LOCKED
            ) idle
            WHERE k.group_name = $1 AND k.topic = idle.topic AND k.key = idle.key"""
        # Rows read ahead and never handed to the consumer were not delivered: not counted.
        self.release_rows = f"""
            UPDATE {queue} SET owner = NULL, lease_until = NULL,
                delivery_count = CASE WHEN id = ANY($3::bigint[]) THEN delivery_count
                                      ELSE greatest(delivery_count - 1, 0) END,
                last_error = CASE WHEN id = ANY($3::bigint[])
                                  THEN 'handed back unacknowledged by a closing receiver'
                                  ELSE last_error END
            WHERE group_name = $1 AND owner = $2"""
        # A closing receiver's released rows waiting on its keys are deliverable at once.
        self.release_waiting = f"""
            UPDATE {queue} q SET lease_until = NULL FROM {keys} k
            WHERE k.group_name = $1 AND k.owner = $2
              AND q.group_name = k.group_name AND q.topic = k.topic AND q.key = k.key
              AND q.owner IS NULL AND q.lease_until IS NOT NULL"""
        self.release_keys = f"""
            UPDATE {keys} SET owner = NULL, lease_until = NULL WHERE group_name = $1 AND owner = $2"""
