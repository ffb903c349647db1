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

from redis.asyncio import Redis
from redis.exceptions import RedisError

from wow_core.messaging import BusClosedError
from wow_redis.connection import TRANSIENT_ERRORS, Backoff, deadline
from wow_redis.observer import RedisMessageBusObserver
from wow_redis.settings import RedisSettings

_Item = tuple[str, str, str, "asyncio.Future[None] | None"]


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
        if settings.maxlen is not None:
            self._trim: tuple[object, ...] = ("MAXLEN", "~", settings.maxlen)
        else:
            self._trim = ()

    async def add(self, stream: str, key: str, payload: str) -> None:
        if self._closed:
            raise BusClosedError("the Redis transport is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((stream, key, payload, future))
        self._kick()
        await future

    async def add_many(self, items: Sequence[tuple[str, str, str]]) -> None:
        """Queue several entries in order; completes when every one was added."""
        if self._closed:
            raise BusClosedError("the Redis transport is closed")
        if not items:
            return
        last: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        futures: list[asyncio.Future[None]] = []
        for stream, key, payload in items[:-1]:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            futures.append(future)
            self._queue.append((stream, key, payload, future))
        stream, key, payload = items[-1]
        self._queue.append((stream, key, payload, last))
        futures.append(last)
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
        trim = self._trim
        while True:
            try:
                async with (
                    deadline(self._settings.socket_timeout, "XADD"),
                    self._client.pipeline(transaction=False) as pipe,
                ):
                    for stream, key, payload, _ in batch:
                        pipe.execute_command("XADD", stream, *trim, "*", "msg", payload, "key", key)
                    replies = await pipe.execute(raise_on_error=False)
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
        for (_, _, _, future), reply in zip(batch, replies, strict=True):
            if future is None or future.done():
                continue
            if isinstance(reply, RedisError):
                failed += 1
                future.set_exception(reply)
            else:
                future.set_result(None)
        if failed:
            self._observer.send_failed(failed, next(r for r in replies if isinstance(r, RedisError)))

    def _fail(self, batch: list[_Item], error: BaseException) -> None:
        self._observer.send_failed(len(batch), error)
        for _, _, _, future in batch:
            if future is not None and not future.done():
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
        for _, _, _, future in (*self._in_flight, *self._queue):
            if future is not None and not future.done():
                future.set_exception(BusClosedError("the Redis transport closed before this send completed"))
        self._in_flight = []
        self._queue.clear()
