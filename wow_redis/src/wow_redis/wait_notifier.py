"""``RedisWaitNotifier``: wait signals between processes over Redis pub/sub.

Each process subscribes to its own channel, ``<key_prefix>wow:wait:<process id>`` (the
endpoint ``redis:<channel>``); a process that reaches a stage of a command waited for
elsewhere ``PUBLISH``-es the signal's JSON (:func:`wow_core.spi.encode_signal`) to the
channel named in the command's header. Notifications made while a ``PUBLISH`` round
trip is in flight are queued and written together in the next one, on one connection (a
service answering many waiting callers would otherwise spend a round trip, and a pooled
connection, per signal: more than its commands cost to process).

Guaranteed: a signal published while the caller is subscribed reaches it once, in
publish order per publisher. "Subscribed" means Redis confirmed the subscription on the
connection the notifier reads: :meth:`RedisWaitNotifier.start` returns only then, and
after a lost connection :attr:`RedisWaitNotifier.receiving` is true again (and
:attr:`RedisWaitNotifier.subscriptions` counts one more) only once the reader has read
the confirmation on its new connection. The server may count a subscriber earlier (the
client library resubscribes while it reconnects, before the notifier closes that
connection and subscribes afresh): that count is no promise of delivery.

Not guaranteed: delivery across a disconnection of either side (pub/sub keeps nothing).
A signal published while the caller is not receiving is lost for good: the caller's
wait is not completed by it and ends at its own deadline with
:class:`~wow_core.command.CommandWaitTimeoutError`, although the command itself went
on (its outcome can be read back from the aggregate, or the command sent again with
the same request id); nor to a
caller that died (``PUBLISH`` reaches no subscriber and is forgotten: nothing is kept for
a dead endpoint, nothing grows). Only channels of this form under this key prefix are
published to: an endpoint naming anything else is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from wow_core.spi import WaitEndpoint, WaitSignal, WaitSignalSink, encode_signal
from wow_redis.connection import TRANSIENT_ERRORS, Backoff, create_client, deadline, pack, round_trip
from wow_redis.settings import SECTION, RedisSettings

if TYPE_CHECKING:
    from wow_core.spi import ProcessSettings

log = logging.getLogger("wow.redis.wait")

KIND = "redis"


def _process_id() -> str:
    return secrets.token_hex(16)


class RedisWaitNotifier:
    """The ``redis`` :class:`~wow_core.spi.CommandWaitNotifier`; see the module doc."""

    kind = KIND

    def __init__(self, settings: RedisSettings | None = None, *, process_id: str | None = None) -> None:
        self.settings = settings or RedisSettings()
        prefix = f"{self.settings.key_prefix}wow:wait:"
        self.channel = prefix + (process_id or _process_id())
        self._accepted = re.compile(re.escape(prefix) + r"[0-9a-f]{32}")
        self._client: Redis | None = None
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._queue: list[tuple[bytes, asyncio.Future[int]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.receiving = False
        """Whether the reader holds a subscription Redis confirmed on its connection: a
        signal published now reaches this process (false between a lost connection and
        the confirmation of the new subscription)."""
        self.subscriptions = 0
        """Subscriptions Redis confirmed to the reader: 1 after :meth:`start`, one more
        after each lost connection it recovered from."""
        self.undelivered = 0
        """Signals published to a channel nobody listens on (the caller is gone)."""

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> RedisWaitNotifier:
        return cls(settings.section(SECTION, RedisSettings))

    def _connected(self) -> Redis:
        if self._client is None:
            self._client = create_client(self.settings)
        return self._client

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        """Subscribe to this process's channel; returns once Redis confirmed the
        subscription (a signal published from then on reaches this process)."""
        pubsub = self._connected().pubsub(ignore_subscribe_messages=False)
        self._pubsub = pubsub
        try:
            async with asyncio.timeout(self.settings.socket_timeout):
                await pubsub.subscribe(self.channel)
                while not self._confirms(await pubsub.get_message(timeout=self.settings.socket_timeout)):
                    pass
        except (*TRANSIENT_ERRORS, TimeoutError) as error:
            await self.close()
            raise ConnectionError(
                f"Redis did not accept the wait channel subscription: {error!r} (WOW_REDIS__URL)"
            ) from error
        self._reader = asyncio.get_running_loop().create_task(self._read(pubsub, sink), name=self.channel)
        return WaitEndpoint(KIND, self.channel)

    def _confirms(self, message: Any) -> bool:
        """Whether ``message`` is Redis's confirmation of this channel's subscription
        (counted: from now on the reader receives what is published)."""
        if message is None or message.get("type") != "subscribe":
            return False
        self.subscriptions += 1
        self.receiving = True
        return True

    async def _read(self, pubsub: PubSub, sink: WaitSignalSink) -> None:
        backoff = Backoff(self.settings.reconnect_backoff, self.settings.reconnect_backoff_max)
        while True:
            try:
                if not pubsub.subscribed:  # the connection was lost: subscribe again
                    await pubsub.subscribe(self.channel)
                message: Any = await pubsub.get_message(timeout=self.settings.block_time)
                backoff.reset()
            except TRANSIENT_ERRORS as error:
                # Signals published meanwhile are lost (pub/sub keeps nothing): those waits
                # end at their deadlines. redis-py may have resubscribed on a new connection
                # before raising: that one is closed too, and the subscription made afresh
                # counts only once its confirmation is read.
                self.receiving = False
                delay = backoff.next_delay()
                log.warning("wait channel %s: %r; subscribing again in %.1fs", self.channel, error, delay)
                with contextlib.suppress(*TRANSIENT_ERRORS):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                await asyncio.sleep(delay)
                continue
            if message is None or self._confirms(message) or message.get("type") != "message":
                continue
            sink(message["data"])  # never raises

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        """``PUBLISH`` the signal to the endpoint's channel; returns on Redis's reply (a
        channel of another form is refused with ``ValueError``). Concurrent notifications
        share round trips, written in the order ``notify`` was called."""
        if self._accepted.fullmatch(endpoint.address) is None:
            raise ValueError(f"not a wait channel of this key prefix: {endpoint.address[:120]!r}")
        packed = pack(b"PUBLISH", endpoint.address.encode(), encode_signal(signal).encode())
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append((packed, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._write(), name=f"{self.channel}:publish"
            )
        receivers = await future
        if receivers == 0:
            self.undelivered += 1

    async def _write(self) -> None:
        """Until the queue is empty: its PUBLISHes (up to ``send_batch_size``) in one round
        trip, each reply (or the round trip's error) to its own notification."""
        client = self._connected()
        limit = self.settings.send_batch_size
        while self._queue:
            batch, self._queue = self._queue[:limit], self._queue[limit:]
            try:
                async with deadline(self.settings.socket_timeout, "PUBLISH"):
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
                    future.set_result(int(reply))

    async def close(self) -> None:
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
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(*TRANSIENT_ERRORS):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
