"""``RedisWaitNotifier``: wait signals between processes over one Redis stream per caller.

Each process reads its own stream, ``<key_prefix>wow:waits:<process id>`` (the endpoint
``redis:<stream>``), with ``XREAD BLOCK`` from the last entry it read; a process that
reaches a stage of a command waited for elsewhere appends the signal's JSON
(:func:`wow_core.spi.encode_signal`) to the stream named in the command's header with
``XADD NOMKSTREAM MAXLEN ~ wait_stream_maxlen``. Notifications made while an ``XADD``
round trip is in flight are queued and written together in the next one, on one
connection (a service answering many waiting callers would otherwise spend a round trip,
and a pooled connection, per signal: more than its commands cost to process).

Guaranteed: a signal appended while the caller's stream exists reaches the caller once,
in append order per publisher, **also across a lost connection of either side**: the
caller reads on from its last entry when it is back, and a publisher retries nothing
itself but finds the stream there. The stream exists from :meth:`RedisWaitNotifier.start`
on (it returns once Redis created it) until :meth:`~RedisWaitNotifier.close` deletes it,
or until ``wait_stream_ttl`` after the caller last refreshed it (every third of the TTL
while it reads, so a caller away for less than about two thirds of the TTL loses nothing).
A caller that falls more than ``wait_stream_maxlen`` signals behind loses the oldest.

Not guaranteed: a signal appended when the stream does not exist is not kept (``XADD
NOMKSTREAM`` creates nothing; counted in ``undelivered``): the caller died, closed, was
away longer than the TTL, or the server lost its data (a restart without persistence, a
failover that lost the last writes) and the caller has not made its stream again yet (it
does on reconnecting, or at its next refresh). Such a signal completes no wait: the
caller's wait ends at its own deadline with
:class:`~wow_core.command.CommandWaitTimeoutError`, although the command itself went on
(its outcome can be read back from the aggregate, or the command sent again with the
same request id). A dead caller leaves at most its stream, trimmed to
``wait_stream_maxlen``, for ``wait_stream_ttl``.

Endpoints of the pub/sub form of earlier releases, ``<key_prefix>wow:wait:<process id>``,
are still notified, with ``PUBLISH`` (so a service upgraded before its callers answers
them); a caller of an earlier release cannot be answered in the stream form. Only
endpoints of these two forms under this key prefix are notified: anything else is
refused.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from wow_core.spi import WaitEndpoint, WaitSignal, WaitSignalSink, encode_signal
from wow_redis.connection import TRANSIENT_ERRORS, Backoff, create_client, deadline, pack, round_trip
from wow_redis.settings import SECTION, RedisSettings

if TYPE_CHECKING:
    from wow_core.spi import ProcessSettings

log = logging.getLogger("wow.redis.wait")

KIND = "redis"
SIGNAL_FIELD = b"s"
"""The field of a stream entry that holds a signal's JSON."""
OPENED_FIELD = b"o"
"""The field of the entry a caller appends when it makes its stream (read and skipped)."""
READ_COUNT = 512
"""Entries one XREAD returns at most."""


def _process_id() -> str:
    return secrets.token_hex(16)


class RedisWaitNotifier:
    """The ``redis`` :class:`~wow_core.spi.CommandWaitNotifier`; see the module doc."""

    kind = KIND

    def __init__(self, settings: RedisSettings | None = None, *, process_id: str | None = None) -> None:
        self.settings = settings or RedisSettings()
        prefix = self.settings.key_prefix
        self.stream = f"{prefix}wow:waits:{process_id or _process_id()}"
        """This process's wait stream: the address of its endpoint."""
        self._streams = re.compile(re.escape(f"{prefix}wow:waits:") + r"[0-9a-f]{32}")
        self._channels = re.compile(re.escape(f"{prefix}wow:wait:") + r"[0-9a-f]{32}")
        self._key = self.stream.encode()
        self._client: Redis | None = None
        self._reading: Redis | None = None
        self._reader: asyncio.Task[None] | None = None
        self._last = b"0-0"
        self._queue: list[tuple[bytes, asyncio.Future[Any]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._maxlen = str(self.settings.wait_stream_maxlen).encode()
        self._ttl_ms = max(1, int(self.settings.wait_stream_ttl * 1000))
        self.receiving = False
        """Whether the reader's stream exists and it reads it: a signal appended now
        reaches this process (false from a lost connection until the stream is checked
        again, and made again if the server lost it)."""
        self.subscriptions = 0
        """How often the reader (re)opened its stream: 1 after :meth:`start`, one more
        after each lost connection or lost stream it recovered from."""
        self.undelivered = 0
        """Signals notified to an endpoint whose stream (or channel) did not exist or had no
        subscriber: the caller is gone."""

    @property
    def channel(self) -> str:
        """The endpoint's address (the stream; the name of the pub/sub releases)."""
        return self.stream

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> RedisWaitNotifier:
        return cls(settings.section(SECTION, RedisSettings))

    def _connected(self) -> Redis:
        if self._client is None:
            self._client = create_client(self.settings)
        return self._client

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        """Make this process's stream; returns once Redis created it (a signal notified
        from then on reaches this process, see the module doc)."""
        self._reading = create_client(self.settings, client_name=f"wow-wait-{self.stream[-32:-24]}")
        try:
            await self._open()
        except TRANSIENT_ERRORS as error:
            await self.close()
            raise ConnectionError(
                f"Redis did not create the wait stream: {error!r} (WOW_REDIS__URL)"
            ) from error
        self._reader = asyncio.get_running_loop().create_task(self._read(sink), name=self.stream)
        return WaitEndpoint(KIND, self.stream)

    async def _open(self) -> None:
        """Make the stream if it is missing (a new one is read from the entry that made
        it; an existing one from the last entry read) and set its TTL."""
        client = self._reading
        assert client is not None
        key = self._key
        async with deadline(self.settings.socket_timeout, "wait stream XADD"):
            existed, made, _ = await round_trip(
                client,
                [
                    pack(b"EXISTS", key),
                    pack(b"XADD", key, b"MAXLEN", b"~", self._maxlen, b"*", OPENED_FIELD, b"1"),
                    pack(b"PEXPIRE", key, str(self._ttl_ms).encode()),
                ],
            )
        for reply in (existed, made):
            if isinstance(reply, Exception):
                raise reply
        if not existed:
            if self.subscriptions:
                log.warning(
                    "wait stream %s was gone (the server lost its data, or this process was away "
                    "longer than WOW_REDIS__WAIT_STREAM_TTL): made again; signals notified meanwhile "
                    "are lost",
                    self.stream,
                )
            self._last = made
        self.subscriptions += 1
        self.receiving = True

    async def _read(self, sink: WaitSignalSink) -> None:
        settings = self.settings
        client = self._reading
        assert client is not None
        backoff = Backoff(settings.reconnect_backoff, settings.reconnect_backoff_max)
        loop = asyncio.get_running_loop()
        refresh_every = settings.wait_stream_ttl / 3
        refresh_at = loop.time() + refresh_every
        # A read never blocks past the next refresh: the stream is refreshed at most two
        # thirds of its TTL apart, before it could expire under a caller that reads.
        block_ms = max(1, int(min(settings.block_time, refresh_every) * 1000))
        bound = settings.block_time + settings.socket_timeout
        key = self.stream
        while True:
            try:
                if not self.receiving:
                    await self._open()
                    refresh_at = loop.time() + refresh_every
                elif loop.time() >= refresh_at:
                    async with deadline(settings.socket_timeout, "wait stream PEXPIRE"):
                        kept = await client.pexpire(key, self._ttl_ms)
                    refresh_at = loop.time() + refresh_every
                    if not kept:  # the server lost it without dropping the connection
                        self.receiving = False
                        continue
                async with deadline(bound, "wait stream XREAD"):
                    reply: Any = await client.xread({key: self._last}, count=READ_COUNT, block=block_ms)
                backoff.reset()
            except TRANSIENT_ERRORS as error:
                # Signals appended meanwhile wait in the stream: read from the last entry
                # once the connection is back (and the stream made again if it was lost).
                self.receiving = False
                delay = backoff.next_delay()
                log.warning("wait stream %s: %r; reading again in %.1fs", self.stream, error, delay)
                await asyncio.sleep(delay)
                continue
            for _, entries in reply or ():
                for entry_id, fields in entries:
                    self._last = entry_id
                    data = fields.get(SIGNAL_FIELD)
                    if data is not None:
                        sink(data)  # never raises
                    elif OPENED_FIELD not in fields:
                        sink(b"")  # an entry of another form: counted as malformed

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        """Append the signal to the endpoint's stream (``PUBLISH`` it to an endpoint of the
        pub/sub form); returns on Redis's reply. An address of another form is refused with
        ``ValueError``. Concurrent notifications share round trips, written in the order
        ``notify`` was called."""
        address = endpoint.address
        data = encode_signal(signal).encode()
        if self._streams.fullmatch(address) is not None:
            packed = pack(
                b"XADD",
                address.encode(),
                b"NOMKSTREAM",
                b"MAXLEN",
                b"~",
                self._maxlen,
                b"*",
                SIGNAL_FIELD,
                data,
            )
        elif self._channels.fullmatch(address) is not None:
            packed = pack(b"PUBLISH", address.encode(), data)
        else:
            raise ValueError(f"not a wait stream of this key prefix: {address[:120]!r}")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((packed, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write(), name=f"{self.stream}:notify")
        reply = await future
        if reply is None or reply == 0:  # no stream (NOMKSTREAM), or no subscriber (PUBLISH)
            self.undelivered += 1

    async def _write(self) -> None:
        """Until the queue is empty: its commands (up to ``send_batch_size``) in one round
        trip, each reply (or the round trip's error) to its own notification."""
        client = self._connected()
        limit = self.settings.send_batch_size
        while self._queue:
            batch, self._queue = self._queue[:limit], self._queue[limit:]
            try:
                async with deadline(self.settings.socket_timeout, "wait signal XADD"):
                    replies = await round_trip(client, [packed for packed, _ in batch])
            except BaseException as error:
                failure = error if isinstance(error, Exception) else ConnectionError("notifier closed")
                for _, future in batch:
                    if not future.done():
                        future.set_exception(failure)
                if not isinstance(error, Exception):
                    raise
                continue
            for (_, future), reply in zip(batch, replies, strict=True):
                if future.done():
                    continue
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)

    async def close(self) -> None:
        """Stop reading, delete this process's stream (nothing is kept for it), fail the
        notifications still queued."""
        was_open = self.subscriptions > 0
        self.receiving = False
        for task in (self._reader, self._writer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._reader = self._writer = None
        queued, self._queue = self._queue, []
        for _, future in queued:
            if not future.done():
                future.set_exception(ConnectionError("the Redis wait notifier is closed"))
        reading, self._reading = self._reading, None
        if reading is not None:
            if was_open:
                try:
                    async with deadline(self.settings.socket_timeout, "wait stream DEL"):
                        await reading.delete(self.stream)
                except TRANSIENT_ERRORS as error:  # it expires after wait_stream_ttl instead
                    log.debug("wait stream %s not deleted: %r", self.stream, error)
            await reading.aclose()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
