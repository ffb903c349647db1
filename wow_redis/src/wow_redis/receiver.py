"""The receiving side of :class:`~wow_redis.transport.RedisStreamTransport`.

A :class:`RedisStreamReceiver` is one member (one Redis *consumer*) of a consumer group
over some streams. What it guarantees:

- ``ready()`` returns once the group exists on every stream (created with
  ``MKSTREAM``, or reused): an entry added after that is delivered to the group. A
  group that does not exist yet is created at the stream's first retained entry
  (``group_start=earliest``, the default: ``0``), so nothing sent before any member
  created it is skipped; with ``latest`` it is created at the stream's end (``$``) and
  skips what the stream held. Two members creating one new group at once is safe: one
  creates it, the other finds it (``BUSYGROUP``) and reuses it as it is. An existing
  group is never moved; one destroyed while reading is created again the same way,
  so its retained entries are delivered again rather than skipped. Per stream, the
  first ``ready()`` logs at INFO where the group starts and why: ``existing group``,
  ``new group at the beginning`` or ``new group at the end``.
- Nothing is read before ``open_processing()``; entries not read stay in the stream
  for the other members of the group.
- Entries are read with ``XREADGROUP ... >``. First the consumer re-reads its own
  pending entries (``0``), so a restart under the same consumer name resumes them, and
  claims the entries closed members handed back, so a key's order survives the
  hand-over; after a lost connection it re-reads its pending entries past the last one
  it read, so a reply lost on the wire strands nothing.
- ``close()`` hands the entries it read and did not acknowledge back to the group
  (``XCLAIM ... IDLE``): the next member to start takes them before new entries, and a
  running member within about ``block_time`` (a scan of one page per stream between
  reads, whether recovery is on or off), possibly after newer entries of their key.
- Recovery (``claim_idle_time``): entries pending in any consumer of the group for
  longer than the idle time are claimed with ``XAUTOCLAIM`` and delivered again, so a
  crashed member's work is done by the living ones. Entries that wait in this receiver's
  read-ahead are claimed by its own scan too (their idle time restarts) but not delivered
  a second time. The claim itself (``JUSTID``) counts no delivery; only the entries then
  delivered again are fetched (``XCLAIM``), which counts one, so an entry waiting behind
  slow handlers does not near ``max_deliveries`` unhandled. An entry deleted from the
  stream (``XDEL``, ``MAXLEN``) before it is fetched is reported as trimmed, once, whether
  the claim or the fetch found it gone; one acknowledged meanwhile was handled and is
  neither delivered nor reported. An entry delivered more than
  ``max_deliveries`` times is copied to ``<stream>.dlq`` and acknowledged, atomically,
  instead of being delivered forever.
- An entry that is not a message (no UTF-8 ``msg`` field) is reported through the
  :class:`~wow_redis.observer.RedisMessageBusObserver` and left pending: it is never
  acknowledged as if consumed; recovery brings it back until it is dead-lettered.
- ``record.ack()`` is an ``XACK``; acks are batched into one round trip per stream.
  By default ``ack()`` returns once queued (flushed within a round trip and by
  ``close()``); with ``ack_confirmed`` it waits for the reply. An XACK that meets a lost
  connection is retried with backoff until it is sent or the receiver closes (then the
  entry stays pending and is handed back), so an outage of the server leaves no entry
  that was processed here pending once the server is back.
- A failure the reader does not retry (the stream key replaced by another type) ends
  the iteration with that error, logged; it never leaves the consumer waiting.
- Connection errors are retried with backoff, reported to the observer, and never
  drop an entry: an entry is either yielded, pending, or acknowledged.

What it does not guarantee: exactly-once. An entry whose handler takes longer than
``claim_idle_time`` is claimed by another member and processed twice; a crash between
processing and ``XACK`` delivers it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from wow_core.messaging import BusClosedError
from wow_core.transport.kit import ReadAhead, Readiness
from wow_redis.connection import TRANSIENT_ERRORS, Backoff, command, deadline, pack, round_trip
from wow_redis.naming import dead_letter_stream
from wow_redis.observer import RedisMessageBusObserver
from wow_redis.record import KEY_FIELD, MSG_FIELD, TIMESTAMP_FIELD, RedisRecord, entry_timestamp
from wow_redis.scripts import DEAD_LETTER_SCRIPT, FETCH_CLAIMED_SCRIPT
from wow_redis.settings import GroupStart, RedisSettings

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

log = logging.getLogger("wow_redis")

READ_AHEAD = 2
"""Reads (of up to ``batch_size`` entries each) read and not yet taken by an iterator."""

HANDED_BACK_IDLE_MS = 10**12
"""Idle time given to the entries a closing consumer hands back: older than any claim threshold."""
HANDED_BACK_MIN_IDLE_S = HANDED_BACK_IDLE_MS / 1000 / 2
"""A starting consumer claims at least the entries handed back (idle past this), recovery on or off."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class _Acker:
    """Batches XACKs: every ack queued while a flush is in flight goes in the next one."""

    def __init__(self, receiver: RedisStreamReceiver) -> None:
        self._receiver = receiver
        self._pending: dict[str, list[str]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, topic: str, entry_id: str, confirm: bool) -> asyncio.Future[None] | None:
        ids = self._pending.get(topic)
        if ids is None:
            self._pending[topic] = [entry_id]
        else:
            ids.append(entry_id)
        self._idle.clear()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="wow-redis-acker")
        self._wake.set()
        if not confirm:
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending, {}
                waiters, self._waiters = self._waiters, []
                error = await self._receiver.flush_acks(batch)
                for waiter in waiters:
                    if not waiter.done():
                        if error is None:
                            waiter.set_result(None)
                        else:
                            waiter.set_exception(error)
            self._idle.set()

    async def drain(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)

    async def stop(self) -> None:
        """Stop flushing; acks still queued stay pending (handed back by the close)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(BusClosedError("the receiver closed before this XACK was sent"))


class RedisStreamReceiver:
    """One consumer of ``group`` over ``topics``; see the module docstring."""

    def __init__(
        self,
        *,
        client: Redis,
        settings: RedisSettings,
        group: str,
        topics: Sequence[str],
        consumer: str,
        observer: RedisMessageBusObserver,
        create_groups: Callable[[str, Sequence[str], str], asyncio.Future[Any]],
        on_close: Callable[[RedisStreamReceiver], None] | None = None,
    ) -> None:
        if not topics:
            raise ValueError("a receiver needs at least one stream")
        self._client = client
        self._settings = settings
        self.group = group
        self.topics = tuple(dict.fromkeys(topics))
        self.consumer = consumer
        self._observer = observer
        self._on_close = on_close
        self._what = f"receiver {group}/{consumer}"
        self._buffer: ReadAhead[list[RedisRecord]] = ReadAhead(READ_AHEAD)
        """Read-ahead, whole reads at a time: at most ``READ_AHEAD`` reads wait to be taken;
        past that the reader stops, so unread entries stay for the other members."""
        self._create_groups = create_groups
        self._readiness: Readiness[Any] = Readiness(self._create, what=self._what)
        self._group_start = "$" if settings.group_start is GroupStart.LATEST else "0"
        self._processing = asyncio.Event()
        self._closed = asyncio.Event()
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []
        self._acker = _Acker(self)
        self._last_read: dict[str, str] = {}
        """Per stream, the last entry id a ``>`` read returned: after a lost connection only
        the own pending entries past it are read again (a reply lost on the wire)."""
        self._dead_letter: AsyncScript | None = None
        self._fetch_claimed: AsyncScript | None = None
        self._handed_back: set[tuple[str, str]] = set()
        self._waiting: set[tuple[str, str]] = set()
        """The entries read into the read-ahead and not yet yielded (topic, id): in flight
        here, so a recovery scan that claims them (their idle time counts while they wait)
        does not deliver them a second time."""
        self._current: deque[RedisRecord] = deque()
        """The rest of the read being yielded, shared by every iteration: one left mid-read
        (a ``break``) leaves it here, and the next iteration yields it first, so a key's
        entries keep their order and none waits for recovery."""
        self._released: dict[tuple[str, str], asyncio.TimerHandle] = {}
        """Entries the consumer released, waiting for their redelivery here (topic, id)."""
        self._redeliveries: set[asyncio.Task[None]] = set()
        self._hand_back_cursor: dict[str, str] = {}
        """Per stream, where the next scan for handed-back entries goes on (``XAUTOCLAIM``)."""
        self._read_ids_new = [">"] * len(self.topics)
        self._timeout = settings.socket_timeout

    # -- the TransportReceiver protocol -----------------------------------------------

    async def ready(self) -> None:
        """Create or reuse the group on every stream; raises after the retries failed.

        The creation is queued with the transport's sends as this is called, so an
        entry sent on the same transport after ``ready()`` was called is not missed.
        """
        if self._closing:
            raise BusClosedError(f"{self._what} is closed")
        await self._readiness.wait()  # a failure is tried again by the next call

    def _create(self) -> asyncio.Future[Any]:
        """Queue the creation of the group on every stream (in place as ``ready()`` is called)."""
        groups = self._create_groups(self.group, self.topics, self._group_start)
        groups.add_done_callback(self._log_starts)
        return groups

    def _log_starts(self, groups: asyncio.Future[Any]) -> None:
        """Per stream, where the group starts and why (once the creations answered)."""
        if groups.cancelled() or groups.exception() is not None:
            return
        new = (
            "at its end, skipping what it held (new group at the end)"
            if self._group_start == "$"
            else "at its first retained entry (new group at the beginning)"
        )
        for topic, created in zip(self.topics, groups.result(), strict=True):
            log.info(
                "Redis receiver %s of group %r: stream %s starts %s",
                self.consumer,
                self.group,
                topic,
                new if created else "where the group is (existing group)",
            )

    def open_processing(self) -> None:
        if self._closing:
            return
        self._processing.set()
        self._start()

    @property
    def processing_open(self) -> bool:
        return self._processing.is_set()

    def __aiter__(self) -> AsyncIterator[RedisRecord]:
        return self._records()

    async def close(self) -> None:
        """Stop reading, flush queued acks, hand back what was not acknowledged; idempotent.

        Entries read and not acknowledged (in flight, left pending by the decode-failure
        policy, or read ahead and never yielded) are handed back: marked idle so that
        the next member of the group to start, or any member's next recovery scan,
        claims them and delivers them again in order. An acknowledgement arriving
        after the close is still sent, as one XACK.
        """
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._tasks.clear()
            for handle in self._released.values():
                handle.cancel()  # still pending here: handed back below
            self._released.clear()
            redeliveries = list(self._redeliveries)
            for task in redeliveries:
                task.cancel()
            await asyncio.gather(*redeliveries, return_exceptions=True)
            await self._readiness.close()
            await self._acker.drain(self._settings.socket_timeout)
            await self._acker.stop()
            self._release_unread()
            await self._hand_back()
        finally:
            self._closed.set()
            if self._on_close is not None:
                self._on_close(self)

    # -- reading ----------------------------------------------------------------------

    async def _records(self) -> AsyncIterator[RedisRecord]:
        buffer = self._buffer
        current = self._current
        while True:
            if not current:
                try:
                    batch = await buffer.get()  # a loop's failure is raised here, once
                except StopAsyncIteration:
                    return
                current.extend(batch)
            while current:
                if self._closing:
                    return  # taken but not yielded: pending, handed back by the close
                record = current.popleft()
                self._waiting.discard((record.topic, record.entry_id))
                yield record

    async def _push(self, records: list[RedisRecord]) -> None:
        """Hand one read to the iterators; wait while ``READ_AHEAD`` reads are untaken."""
        await self._buffer.put(records)

    def _start(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        guard = self._buffer.guard  # a failure the loop does not retry ends the iteration with it
        read = guard(self._read_loop(), what=self._what, logger=log)
        self._tasks.append(loop.create_task(read, name=f"wow-redis-read:{self.group}"))
        if self._settings.claim_idle_time is not None:
            claim = guard(self._claim_loop(), what=self._what, logger=log)
            self._tasks.append(loop.create_task(claim, name=f"wow-redis-claim:{self.group}"))

    async def _read_loop(self) -> None:
        await self._processing.wait()
        backoff = Backoff(self._settings.reconnect_backoff, self._settings.reconnect_backoff_max)
        settings = self._settings
        block_ms = int(settings.block_time * 1000)
        own_pending = True
        first = True
        clock = asyncio.get_running_loop().time
        next_hand_back_scan = clock() + settings.block_time
        while not self._closing:
            try:
                if not self._readiness.succeeded:
                    await self.ready()
                if own_pending:
                    await self._read_own_pending()
                    own_pending = False
                if first:
                    # Entries handed back by closed members (and, with recovery on, idle
                    # ones) come before new entries, so a key's order survives a hand-over.
                    idle = settings.claim_idle_time
                    await self.claim_idle(HANDED_BACK_MIN_IDLE_S if idle is None else idle)
                    first = False
                elif clock() >= next_hand_back_scan:
                    # A running member takes what a closing member handed back within about
                    # a block time, not only at its next recovery scan (or never, without one).
                    next_hand_back_scan = clock() + settings.block_time
                    await self._claim_handed_back()
                response = await self._read_group(self.topics, self._read_ids_new, block_ms)
                backoff.reset()
            except TRANSIENT_ERRORS as error:
                delay = backoff.next_delay()
                self._observer.connection_error("XREADGROUP", error, backoff.attempt, delay)
                await asyncio.sleep(delay)
                own_pending = True
                continue
            except ResponseError as error:
                if "NOGROUP" not in str(error):
                    raise
                log.warning("consumer group %s vanished, creating it again: %s", self.group, error)
                self._readiness.reset()
                continue
            for stream, entries in response:
                topic = _text(stream)
                if entries:
                    self._last_read[topic] = _text(entries[-1][0])
                await self._deliver(topic, entries, None)

    async def _read_group(self, topics: Sequence[str], ids: Sequence[str], block_ms: int | None) -> Any:
        """One ``XREADGROUP`` of this consumer, the reply as parsed, without redis-py's
        response callback: ``[[stream, [[id, [field, value, ...] | None], ...]], ...]``."""
        block = () if block_ms is None else (b"BLOCK", b"%d" % block_ms)
        timeout = self._timeout + (0 if block_ms is None else block_ms / 1000)
        packed = pack(
            b"XREADGROUP",
            b"GROUP",
            self.group.encode(),
            self.consumer.encode(),
            b"COUNT",
            b"%d" % self._settings.batch_size,
            *block,
            b"STREAMS",
            *(topic.encode() for topic in topics),
            *(entry_id.encode() for entry_id in ids),
        )
        async with deadline(timeout, "XREADGROUP"):
            [reply] = await round_trip(self._client, [packed])
        if isinstance(reply, ResponseError):
            raise reply
        return reply or []

    async def _read_own_pending(self) -> None:
        """Re-read this consumer's pending entries: all of them at start (id ``0``), after a
        lost connection only those past the last entry read (the ones before are in flight
        here already)."""
        for topic in self.topics:
            cursor = self._last_read.get(topic, "0")
            while not self._closing:
                response = await self._read_group([topic], [cursor], None)
                entries = response[0][1] if response else []
                if not entries:
                    break
                cursor = _text(entries[-1][0])
                counts = await self._delivery_counts(topic, [_text(entry[0]) for entry in entries])
                await self._deliver(topic, entries, counts)

    def _pending_page(self, topic: str, low: str, high: str, count: int) -> bytes:
        """``XPENDING`` of this consumer's entries from ``low`` to ``high``, ``count`` at most."""
        return pack(
            b"XPENDING",
            topic.encode(),
            self.group.encode(),
            low.encode(),
            high.encode(),
            b"%d" % count,
            self.consumer.encode(),
        )

    def _page_size(self, ids: Sequence[str]) -> int:
        """Rows asked per ``XPENDING`` page over ``ids``: room for the own entries between them."""
        return len(ids) + len(self._waiting) + 16

    async def _delivery_counts(self, topic: str, ids: Sequence[str]) -> dict[str, int]:
        """XPENDING's times-delivered of ``ids`` (ascending, pending in this consumer).

        Further pages are read only while some id is missing from a full one.
        """
        size = self._page_size(ids)
        low, high = ids[0], ids[-1]
        counts: dict[str, int] = {}
        while True:
            async with deadline(self._timeout, "XPENDING"):
                [rows] = await round_trip(self._client, [self._pending_page(topic, low, high, size)])
            if isinstance(rows, ResponseError):
                raise rows
            for row in rows:
                counts[_text(row[0])] = int(row[3])
            if len(rows) < size or all(entry_id in counts for entry_id in ids):
                return counts
            low = "(" + _text(rows[-1][0])

    async def _deliver(
        self, topic: str, entries: Sequence[Any], counts: dict[str, int] | None, *, claimed: bool = False
    ) -> None:
        """Push ``entries`` to the read-ahead; ``claimed``: skip those already waiting there."""
        records: list[RedisRecord] = []
        waiting = self._waiting
        released = self._released
        for raw_id, fields in entries:
            entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
            if claimed and (topic, entry_id) in waiting:
                continue  # claimed from this very consumer while it waits in the read-ahead
            if not fields:
                await self._trimmed(topic, entry_id)
                continue
            if released:  # delivered again meanwhile (recovery): not twice
                self._cancel_release(topic, entry_id)
            deliveries = 1 if counts is None else counts.get(entry_id, 1)
            if deliveries > self._settings.max_deliveries:
                await self._send_to_dead_letter(topic, entry_id, deliveries, "max deliveries exceeded")
                continue
            record = self._record(topic, entry_id, fields, deliveries)
            if record is not None:
                records.append(record)
                waiting.add((topic, entry_id))
        if records:
            await self._push(records)

    def _record(self, topic: str, entry_id: str, fields: list[Any], deliveries: int) -> RedisRecord | None:
        raw = raw_key = raw_ts = None
        for index in range(0, len(fields) - 1, 2):
            name = fields[index]
            if name == MSG_FIELD:
                raw = fields[index + 1]
            elif name == KEY_FIELD:
                raw_key = fields[index + 1]
            elif name == TIMESTAMP_FIELD:
                raw_ts = fields[index + 1]
        if raw is None:
            self._observer.undecodable(topic, self.group, entry_id, "no msg field")
            return None
        try:
            payload = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            key = raw_key.decode("utf-8") if isinstance(raw_key, bytes) else str(raw_key or "")
        except UnicodeDecodeError as error:
            self._observer.undecodable(topic, self.group, entry_id, f"not UTF-8: {error}")
            return None
        try:
            timestamp = int(raw_ts) if raw_ts is not None else entry_timestamp(entry_id)
        except ValueError:
            timestamp = entry_timestamp(entry_id)
        return RedisRecord(self, topic, entry_id, key, payload, deliveries, timestamp)

    async def _trimmed(self, topic: str, entry_id: str) -> None:
        """A pending entry whose content retention (MAXLEN) removed: nothing left to process."""
        self._observer.dead_lettered(topic, self.group, entry_id, 0, "trimmed before processing")
        with contextlib.suppress(*TRANSIENT_ERRORS):
            await command(self._client, "XACK", topic, self.group, entry_id, timeout=self._timeout)

    # -- recovery ---------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        await self._processing.wait()
        idle = self._settings.claim_idle_time
        interval = self._settings.resolved_claim_interval()
        assert idle is not None
        assert interval is not None
        backoff = Backoff(self._settings.reconnect_backoff, self._settings.reconnect_backoff_max)
        while not self._closing:
            try:
                await asyncio.sleep(interval)
                await self.claim_idle(idle)
                backoff.reset()
            except TRANSIENT_ERRORS as error:
                delay = backoff.next_delay()
                self._observer.connection_error("XAUTOCLAIM", error, backoff.attempt, delay)
                await asyncio.sleep(delay)
            except ResponseError as error:
                if "NOGROUP" not in str(error):
                    raise
                await asyncio.sleep(interval)

    async def claim_idle(self, idle_seconds: float) -> int:
        """Claim entries idle longer than ``idle_seconds`` in any consumer; deliver them again.

        Returns how many entries were claimed (dead-lettered ones included). Runs
        periodically when recovery is on; callable directly.
        """
        idle_ms = max(int(idle_seconds * 1000), 1)
        total = 0
        for topic in self.topics:
            cursor = "0-0"
            scanned = 0
            while not self._closing:
                cursor, claimed = await self._claim_page(topic, idle_ms, cursor)
                total += claimed
                scanned += self._settings.batch_size
                if cursor == "0-0" or scanned >= self._settings.batch_size * 16:
                    break
        return total

    async def _claim_handed_back(self) -> None:
        """Claim one page (``batch_size``) per stream of the entries closed members handed back.

        Bounded work per call: one ``XAUTOCLAIM`` per stream, which scans at most ten pages
        of the pending list; the scan cursor is kept between calls, so successive calls
        cover the whole pending list.
        """
        idle_ms = int(HANDED_BACK_MIN_IDLE_S * 1000)
        for topic in self.topics:
            if self._closing:
                return
            cursor = self._hand_back_cursor.get(topic, "0-0")
            self._hand_back_cursor[topic], _ = await self._claim_page(topic, idle_ms, cursor)

    async def _claim_page(self, topic: str, idle_ms: int, cursor: str) -> tuple[str, int]:
        """One ``XAUTOCLAIM`` page from ``cursor``; returns the next cursor and how many were claimed.

        The claim is ``JUSTID``, which counts no delivery: it resets the idle time of the
        entries waiting in this receiver's read-ahead (claimed from itself; they are
        delivered once, from there). The others, to be delivered now (a dead consumer's,
        handed back, or in flight here past the idle time), are fetched with ``XCLAIM``,
        which counts the delivery, in one script with the ``XPENDING`` that gives their
        counts (see :meth:`_redeliver`): one round trip when nothing is claimed or all of
        it waits here, two otherwise. Entries deleted from the stream that ``XAUTOCLAIM``
        reports (and drops from the pending list) are reported as trimmed, and so are
        those deleted between the claim and the fetch.
        """
        packed = pack(
            b"XAUTOCLAIM",
            topic.encode(),
            self.group.encode(),
            self.consumer.encode(),
            b"%d" % idle_ms,
            cursor.encode(),
            b"COUNT",
            b"%d" % self._settings.batch_size,
            b"JUSTID",
        )
        async with deadline(self._timeout, "XAUTOCLAIM"):
            [reply] = await round_trip(self._client, [packed])
        if isinstance(reply, ResponseError):
            raise reply
        next_cursor, ids = _text(reply[0]), [_text(entry_id) for entry_id in reply[1]]
        for entry_id in (reply[2] if len(reply) > 2 else None) or ():  # Redis 7: deleted entries
            self._observer.dead_lettered(topic, self.group, _text(entry_id), 0, "trimmed before processing")
        if ids:
            self._observer.claimed(topic, self.group, self.consumer, len(ids))
            waiting = self._waiting
            deliver = [entry_id for entry_id in ids if (topic, entry_id) not in waiting]
            if deliver:
                await self._redeliver(topic, deliver)
        return next_cursor, len(ids)

    async def _redeliver(self, topic: str, ids: list[str]) -> None:
        """Fetch ``ids`` (claimed by this consumer, ascending) with ``XCLAIM``, counting a
        delivery, and deliver them with their counts; report the deleted ones as trimmed.

        One script (:data:`~wow_redis.scripts.FETCH_CLAIMED_SCRIPT`), one round trip: it
        reads which ids are pending here and their counts, then runs the ``XCLAIM``, in one
        step. An id pending here just before and not returned was deleted meanwhile (Redis 7
        drops it from the pending list, Redis 6.2 returns nil for it): trimmed, reported
        once. One no longer pending was acknowledged meanwhile (handled): nothing to do.
        """
        if self._fetch_claimed is None:
            self._fetch_claimed = self._client.register_script(FETCH_CLAIMED_SCRIPT)
        async with deadline(self._timeout, "XCLAIM"):
            entries, counts, trimmed = await self._fetch_claimed(
                keys=[topic], args=[self.group, self.consumer, self._page_size(ids), *ids]
            )
        delivered = {_text(entry[0]): int(count) for entry, count in zip(entries, counts, strict=True)}
        await self._deliver(topic, entries, delivered, claimed=True)
        for entry_id in trimmed:
            await self._trimmed(topic, _text(entry_id))

    def released(self, topic: str, entry_id: str, deliveries: int) -> None:
        """The consumer released ``entry_id`` unacknowledged after its ``deliveries``-th
        delivery: deliver it again here after ``release_delay_for(deliveries)``, with
        ``XCLAIM`` (a delivery counted, so ``max_deliveries`` ends a failure that does not
        pass). Nothing while closing (the close hands it back) or with no release delay
        (recovery claims it after ``claim_idle_time``). Acknowledged meanwhile: cancelled
        (and an acknowledgement racing the ``XCLAIM`` leaves nothing pending to deliver);
        delivered again meanwhile by recovery: not a second time."""
        delay = self._settings.release_delay_for(deliveries)
        if self._closing or delay is None:
            return
        key = (topic, entry_id)
        self._cancel_release(topic, entry_id)
        loop = asyncio.get_running_loop()
        self._released[key] = loop.call_later(delay, self._start_redelivery, topic, entry_id)

    def _cancel_release(self, topic: str, entry_id: str) -> None:
        """An entry acknowledged after its release: its redelivery is not needed."""
        handle = self._released.pop((topic, entry_id), None)
        if handle is not None:
            handle.cancel()

    def _start_redelivery(self, topic: str, entry_id: str) -> None:
        if self._released.pop((topic, entry_id), None) is None or self._closing:
            return
        task = asyncio.get_running_loop().create_task(
            self._redeliver_released(topic, entry_id), name=f"wow-redis-redeliver:{self.group}"
        )
        self._redeliveries.add(task)
        task.add_done_callback(self._redeliveries.discard)

    async def _redeliver_released(self, topic: str, entry_id: str) -> None:
        """:meth:`_redeliver` of one released entry, retried through lost connections."""
        backoff = Backoff(self._settings.reconnect_backoff, self._settings.reconnect_backoff_max)
        while not self._closing:
            try:
                await self._redeliver(topic, [entry_id])
                return
            except TRANSIENT_ERRORS as error:
                delay = backoff.next_delay()
                self._observer.connection_error("XCLAIM", error, backoff.attempt, delay)
                await asyncio.sleep(delay)
            except Exception as error:  # recovery still claims it
                log.warning(
                    "%s: could not deliver released entry %s/%s again (recovery claims it after "
                    "the claim idle time): %r",
                    self._what,
                    topic,
                    entry_id,
                    error,
                )
                return

    async def _send_to_dead_letter(self, topic: str, entry_id: str, deliveries: int, reason: str) -> None:
        if self._dead_letter is None:
            self._dead_letter = self._client.register_script(DEAD_LETTER_SCRIPT)
        maxlen = self._settings.dead_letter_maxlen or 0
        async with deadline(self._timeout, "dead letter"):
            moved = await self._dead_letter(
                keys=[topic, dead_letter_stream(topic)],
                args=[self.group, self.consumer, entry_id, deliveries, reason, maxlen],
            )
        if moved:
            self._observer.dead_lettered(topic, self.group, entry_id, deliveries, reason)

    # -- acknowledging ----------------------------------------------------------------

    @property
    def fast_ack(self) -> bool:
        """An ack only needs queueing: open, and acks are not confirmed."""
        return not self._closing and not self._settings.ack_confirmed

    def ack_queued(self, topic: str, entry_id: str) -> None:
        if self._released:
            self._cancel_release(topic, entry_id)
        self._acker.add(topic, entry_id, False)

    async def acknowledge(self, topic: str, entry_id: str) -> None:
        if self._released:
            self._cancel_release(topic, entry_id)
        if self._closing:
            await self._late_ack(topic, entry_id)
            return
        waiter = self._acker.add(topic, entry_id, self._settings.ack_confirmed)
        if waiter is not None:
            await waiter

    async def flush_acks(self, batch: dict[str, list[str]]) -> BaseException | None:
        """Send the queued XACKs in one pipeline, retrying connection errors until they are
        sent or the receiver closes.

        XACK is idempotent, so a retry after a reply lost on the wire is harmless. Giving
        up while the receiver runs would strand entries already processed: pending in this
        consumer, past the last read, so neither the re-read after a reconnect nor anything
        short of recovery (``claim_idle_time`` later, handled a second time) brings them back.
        """
        backoff = Backoff(self._settings.reconnect_backoff, self._settings.reconnect_backoff_max)
        while True:
            try:
                group = self.group.encode()
                packed = [
                    pack(b"XACK", topic.encode(), group, *(i.encode() for i in ids))
                    for topic, ids in batch.items()
                ]
                async with deadline(self._timeout, "XACK"):
                    replies = await round_trip(self._client, packed)
                errors = [reply for reply in replies if isinstance(reply, ResponseError)]
                if errors:
                    raise errors[0]
                return None
            except TRANSIENT_ERRORS as error:
                if self._closing:  # close() gave the acks its time: the rest stay pending, handed back
                    for topic, ids in batch.items():
                        self._observer.ack_failed(topic, self.group, len(ids), error)
                    return error
                delay = backoff.next_delay()
                self._observer.connection_error("XACK", error, backoff.attempt, delay)
                await asyncio.sleep(delay)
            except Exception as error:
                for topic, ids in batch.items():
                    self._observer.ack_failed(topic, self.group, len(ids), error)
                return error

    async def _late_ack(self, topic: str, entry_id: str) -> None:
        """An ack after close: one XACK (XACK needs no consumer), errors reported."""
        try:
            await command(self._client, "XACK", topic, self.group, entry_id, timeout=self._timeout)
        except Exception as error:
            self._observer.ack_failed(topic, self.group, 1, error)

    # -- closing ----------------------------------------------------------------------

    def _release_unread(self) -> None:
        """Drop reads never taken (they stay pending here, handed back); end the iterators."""
        self._buffer.close()
        self._current.clear()

    async def _hand_back(self) -> None:
        """Mark this consumer's pending entries idle for the others, or forget the consumer.

        ``XCLAIM ... IDLE <long> JUSTID`` to itself keeps each entry's delivery count
        and makes it older than any claim threshold. A consumer without pending entries
        is deleted from the group (generated names are unique per process; without this
        every restart would leave one more empty consumer behind).
        """
        for topic in self.topics:
            try:
                holds_entries = False
                while True:
                    async with deadline(self._timeout, "XPENDING"):
                        rows = await self._client.xpending_range(
                            topic, self.group, min="-", max="+", count=1000, consumername=self.consumer
                        )
                    ids = [_text(row["message_id"]) for row in rows]  # type: ignore[arg-type]
                    holds_entries = holds_entries or bool(ids)
                    fresh = [i for i in ids if (topic, i) not in self._handed_back]
                    if fresh:
                        await command(
                            self._client,
                            "XCLAIM",
                            topic,
                            self.group,
                            self.consumer,
                            0,
                            *fresh,
                            "IDLE",
                            HANDED_BACK_IDLE_MS,
                            "JUSTID",
                            timeout=self._timeout,
                            parse_justid=True,
                        )
                        self._handed_back.update((topic, i) for i in fresh)
                    if len(rows) < 1000 or not fresh:
                        break
                if not holds_entries:
                    await command(
                        self._client,
                        "XGROUP",
                        "DELCONSUMER",
                        topic,
                        self.group,
                        self.consumer,
                        timeout=self._timeout,
                    )
            except (ResponseError, *TRANSIENT_ERRORS) as error:
                log.warning(
                    "could not hand back the pending entries of %s on %s (they come back after the "
                    "claim idle time): %s",
                    self.consumer,
                    topic,
                    error,
                )
