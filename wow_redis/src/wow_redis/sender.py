"""``StreamWriter``: XADDs of concurrent senders, pipelined into shared round trips.

Every ``add`` waits for its own XADD reply (SENT = "stream add completed"). Adds that
arrive while a round trip is in flight are queued and go together in the next
pipeline, so under concurrency the cost per entry approaches a raw pipelined XADD,
while a lone sender still gets one round trip. Entries of one pipeline are written in
the order they were queued, on one connection, so the order in which ``add`` was
called is the order in the stream.

A connection error fails the whole round trip; it is retried with backoff
(``send_retries`` times) and then raised to every sender of the batch. A retried
batch may have been applied before the connection broke: a retry can duplicate an
entry (at-least-once), it never loses one without an error reaching its sender.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from wow_core.messaging import BusClosedError
from wow_core.transport import TransportMessage
from wow_redis.connection import TRANSIENT_ERRORS, Backoff, bulk, deadline, pack, round_trip
from wow_redis.observer import RedisMessageBusObserver
from wow_redis.settings import RedisSettings


@dataclass(frozen=True, slots=True)
class GroupCreation:
    """``XGROUP CREATE <topic> <group> <start> MKSTREAM``; an existing group is reused.

    Its future resolves to ``True`` when this command created the group and ``False``
    when it existed (``BUSYGROUP``: another member, or an earlier run, created it; both
    mean the group is there and nothing about its position was changed). A creation
    retried after a lost reply may answer ``BUSYGROUP`` for a group it created itself.
    """

    topic: str
    group: str
    start: str


_Item = tuple["TransportMessage | GroupCreation", "asyncio.Future[Any]"]


_KEY_FIELD = bulk(b"key")
_TS_FIELD = bulk(b"ts")


class StreamWriter:
    """Batches XADDs; see the module docstring."""

    def __init__(self, client: Redis, settings: RedisSettings, observer: RedisMessageBusObserver) -> None:
        self._client = client
        self._settings = settings
        self._observer = observer
        self._queue: list[_Item] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._in_flight: list[_Item] = []
        self._idle = asyncio.Event()
        self._idle.set()
        trim = (b"MAXLEN", b"~", b"%d" % settings.maxlen) if settings.maxlen is not None else ()
        self._xadd_head = b"*%d\r\n" % (2 + len(trim) + 7) + bulk(b"XADD")
        self._xadd_middle = b"".join(bulk(part) for part in (*trim, b"*", b"msg"))

    async def add(self, message: TransportMessage) -> None:
        if self._closed:
            raise BusClosedError("the Redis transport is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((message, future))
        self._kick()
        await future

    def create_groups(self, group: str, topics: Sequence[str], start: str) -> asyncio.Future[list[bool]]:
        """Queue the creation of ``group`` on every topic, in order with the sends.

        Queued before a send that is called later, so the group (even one created at
        ``$``) holds that send's entry: a receiver whose ``ready()`` was called before a
        ``send`` on the same transport never misses it. Completes when every group
        exists, with one flag per topic: ``True`` if this call created the group there,
        ``False`` if it existed already (concurrent creation by two members is safe:
        one creates, the other finds it, both read the same group).
        """
        if self._closed:
            raise BusClosedError("the Redis transport is closed")
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[bool]] = []
        for topic in topics:
            future: asyncio.Future[bool] = loop.create_future()
            futures.append(future)
            self._queue.append((GroupCreation(topic, group, start), future))
        self._kick()
        return asyncio.gather(*futures)

    async def add_many(self, messages: Sequence[TransportMessage]) -> None:
        """Queue several entries in order; completes when every one was added."""
        if self._closed:
            raise BusClosedError("the Redis transport is closed")
        if not messages:
            return
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[None]] = []
        for message in messages:
            future: asyncio.Future[None] = loop.create_future()
            futures.append(future)
            self._queue.append((message, future))
        self._kick()
        await asyncio.gather(*futures)

    def _kick(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="wow-redis-writer")
        self._idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        limit = self._settings.send_batch_size
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                if len(self._queue) <= limit:
                    batch, self._queue = self._queue, []
                else:
                    batch, self._queue = self._queue[:limit], self._queue[limit:]
                self._in_flight = batch
                await self._flush(batch)
                self._in_flight = []
            self._idle.set()

    async def _flush(self, batch: list[_Item]) -> None:
        backoff = Backoff(self._settings.reconnect_backoff, self._settings.reconnect_backoff_max)
        packed: list[bytes] = []
        sent: list[_Item] = []
        for entry in batch:
            try:
                packed.append(self._pack(entry[0]))
            except UnicodeEncodeError as error:  # a lone surrogate: this send fails alone
                entry[1].set_exception(error)
                continue
            sent.append(entry)
        batch = sent
        if not batch:
            return
        while True:
            try:
                async with deadline(self._settings.socket_timeout, "XADD"):
                    replies = await round_trip(self._client, packed)
                break
            except TRANSIENT_ERRORS as error:
                if backoff.attempt >= self._settings.send_retries or self._closed:
                    self._fail(batch, error)
                    return
                delay = backoff.next_delay()
                self._observer.connection_error("XADD", error, backoff.attempt, delay)
                await asyncio.sleep(delay)
            except Exception as error:
                self._fail(batch, error)
                return
        failed = 0
        for (item, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(item, GroupCreation):
                if isinstance(reply, ResponseError):
                    if "BUSYGROUP" in str(reply):
                        future.set_result(False)  # it exists: reused as it is
                    else:
                        future.set_exception(reply)
                else:
                    future.set_result(True)
            elif isinstance(reply, RedisError):
                failed += 1
                future.set_exception(reply)
            else:
                future.set_result(None)
        if failed:
            first = next(
                r
                for (i, _), r in zip(batch, replies, strict=True)
                if not isinstance(i, GroupCreation) and isinstance(r, RedisError)
            )
            self._observer.send_failed(failed, first)

    def _pack(self, item: TransportMessage | GroupCreation) -> bytes:
        """The RESP bytes of one command; an XADD is assembled from pre-encoded parts.

        redis-py's generic ``pack_command`` checks and encodes every argument; the XADD
        of a send always has the same shape, so only its four values are encoded here.
        """
        if isinstance(item, GroupCreation):
            return pack(
                b"XGROUP",
                b"CREATE",
                item.topic.encode(),
                item.group.encode(),
                item.start.encode(),
                b"MKSTREAM",
            )
        return b"".join(
            (
                self._xadd_head,
                bulk(item.topic.encode()),
                self._xadd_middle,
                bulk(item.payload.encode()),
                _KEY_FIELD,
                bulk(item.key.encode()),
                _TS_FIELD,
                bulk(b"%d" % item.timestamp),
            )
        )

    def _fail(self, batch: list[_Item], error: BaseException) -> None:
        self._observer.send_failed(len(batch), error)
        for _, future in batch:
            if not future.done():
                future.set_exception(error)

    async def close(self, timeout: float) -> None:
        """Refuse new adds, wait (up to ``timeout``) for the queued ones, stop.

        A send still queued or in flight after ``timeout`` fails with
        :class:`~wow_core.messaging.BusClosedError` (it may or may not have been added).
        """
        self._closed = True
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        for _, future in (*self._in_flight, *self._queue):
            if not future.done():
                future.set_exception(BusClosedError("the Redis transport closed before this send completed"))
        self._in_flight = []
        self._queue.clear()
