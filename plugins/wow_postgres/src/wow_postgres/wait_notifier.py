"""``PostgresWaitNotifier``: wait signals between processes over ``LISTEN``/``NOTIFY``.

Each caller process listens on a channel of its own, ``wow_wait_<32 hex digits>`` (the
endpoint ``postgres:<channel>``), on a connection of its own (not pooled: a listening
connection cannot be shared). A process that reaches a stage of a command waited for
elsewhere sends the signal's JSON (:func:`wow_core.spi.encode_signal`) with
``pg_notify(channel, payload)`` on a sending connection of its own; notifications made
while one is in flight are sent together in the next statement (one round trip, one
commit, delivered in order).

Guaranteed: a signal notified while the caller listens reaches it once, in notification
order per sender. :meth:`PostgresWaitNotifier.start` returns once the ``LISTEN`` is in
place. Caller and senders must use the same database (``NOTIFY`` does not leave it).

Not guaranteed: PostgreSQL keeps no notification for a channel nobody listens to, so a
signal notified while the caller's listening connection is down (a restart, a failover,
a network cut) is lost: the caller reconnects with backoff (``WOW_POSTGRES__RETRY_*``)
and listens again, saying so in a warning, and what was notified meanwhile completes no
wait (those waits end at their deadlines with
:class:`~wow_core.command.CommandWaitTimeoutError`, although the commands went on). A
connection that died silently (no reset) is found by a ``SELECT 1`` every
:data:`CHECK_INTERVAL` seconds. A caller that died leaves nothing behind.

A payload must be shorter than 8000 bytes (PostgreSQL's limit): a larger signal (a big
``result``, many validation errors) is not sent: :meth:`~PostgresWaitNotifier.notify`
raises ``ValueError`` naming its size (logged and counted as a failed notification by the
core). Only channels of this form are notified: an endpoint naming anything else is
refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from typing import TYPE_CHECKING, Any

import asyncpg

from wow_core.spi import WaitEndpoint, WaitSignal, WaitSignalSink, encode_signal
from wow_postgres.connection import TRANSIENT, connect
from wow_postgres.settings import SECTION, PostgresSettings

if TYPE_CHECKING:
    from wow_core.spi import ProcessSettings

log = logging.getLogger("wow_postgres.wait")

KIND = "postgres"
CHANNEL_PREFIX = "wow_wait_"
MAX_PAYLOAD = 7999
"""Longest payload ``NOTIFY`` takes, in bytes (PostgreSQL: shorter than 8000)."""
CHECK_INTERVAL = 5.0
"""Seconds between two checks (``SELECT 1``) of the listening connection."""
SEND_BATCH = 256
"""Notifications sent in one statement at most."""
_NOTIFY = (
    "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(c, p, n) ORDER BY n"
)

_CHECK_FAILURES: tuple[type[BaseException], ...] = (*TRANSIENT, asyncpg.PostgresError)

_Pending = tuple[str, str, "asyncio.Future[None]"]


class PostgresWaitNotifier:
    """The ``postgres`` :class:`~wow_core.spi.CommandWaitNotifier`; see the module doc."""

    kind = KIND

    def __init__(self, settings: PostgresSettings | None = None, *, process_id: str | None = None) -> None:
        self.settings = settings or PostgresSettings()
        self.channel = CHANNEL_PREFIX + (process_id or secrets.token_hex(16))
        """This process's channel: the address of its endpoint."""
        self._accepted = re.compile(re.escape(CHANNEL_PREFIX) + r"[0-9a-f]{32}")
        self._listening: asyncpg.Connection[Any] | None = None
        self._lost = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._sending: asyncpg.Connection[Any] | None = None
        self._queue: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None
        self._sink: WaitSignalSink | None = None
        self.receiving = False
        """Whether the ``LISTEN`` is in place: a signal notified now reaches this process."""
        self.subscriptions = 0
        """How often this process (re)started listening: 1 after :meth:`start`, one more
        after each lost connection it recovered from."""

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> PostgresWaitNotifier:
        return cls(settings.section(SECTION, PostgresSettings))

    # -- receiving ------------------------------------------------------------------------

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        """Listen on this process's channel; returns once the ``LISTEN`` is in place
        (:class:`~wow_postgres.PostgresUnavailableError` when the server cannot be reached
        after the retries)."""
        self._sink = sink
        await self._listen()
        self._reader = asyncio.get_running_loop().create_task(self._keep_listening(), name=self.channel)
        return WaitEndpoint(KIND, self.channel)

    async def _listen(self) -> None:
        connection = await connect(self.settings, "wait LISTEN connect")
        lost = asyncio.Event()
        try:
            connection.add_termination_listener(lambda _: lost.set())
            await connection.add_listener(self.channel, self._notified)
        except BaseException:
            connection.terminate()
            raise
        self._listening, self._lost = connection, lost
        self.subscriptions += 1
        self.receiving = True

    def _notified(self, connection: object, pid: int, channel: str, payload: object) -> None:
        assert self._sink is not None
        self._sink(str(payload))  # never raises

    async def _keep_listening(self) -> None:
        """Check the listening connection; when it is lost, listen again on a new one."""
        settings = self.settings
        while True:
            connection = self._listening
            assert connection is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), CHECK_INTERVAL)
            if not self._lost.is_set():
                try:
                    await connection.fetchval("SELECT 1", timeout=settings.connect_timeout)
                    continue
                except _CHECK_FAILURES as error:
                    log.debug("wait channel %s: check failed: %r", self.channel, error)
            self.receiving = False
            connection.terminate()
            log.warning(
                "wait channel %s: the LISTEN connection to %s was lost; listening again (signals "
                "notified meanwhile are lost: their waits end at their deadlines)",
                self.channel,
                settings.masked_dsn,
            )
            delay = settings.retry_backoff
            while not self.receiving:
                try:
                    await self._listen()
                except Exception as error:  # unreachable after the retries, refused: try again
                    log.warning(
                        "wait channel %s: LISTEN failed (%s), again in %.2fs", self.channel, error, delay
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, settings.retry_backoff_max)

    # -- sending --------------------------------------------------------------------------

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        """``pg_notify`` the signal to the endpoint's channel; returns once committed. An
        address of another form, or a signal of 8000 bytes or more, is refused with
        ``ValueError``. Concurrent notifications share statements, sent in the order
        ``notify`` was called."""
        channel = endpoint.address
        if self._accepted.fullmatch(channel) is None:
            raise ValueError(f"not a wait channel: {channel[:120]!r}")
        payload = encode_signal(signal)
        size = len(payload.encode())
        if size > MAX_PAYLOAD:
            raise ValueError(
                f"the wait signal of {signal.command_id} is {size} bytes: NOTIFY takes at most "
                f"{MAX_PAYLOAD} (a smaller result or fewer errors fit)"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.append((channel, payload, future))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write(), name=f"{self.channel}:notify")
        await future

    async def _write(self) -> None:
        """Until the queue is empty: up to :data:`SEND_BATCH` notifications in one statement,
        again once on a new connection after a lost one."""
        while self._queue:
            batch, self._queue = self._queue[:SEND_BATCH], self._queue[SEND_BATCH:]
            try:
                try:
                    await self._send(batch)
                except TRANSIENT:
                    await self._send(batch)  # a stale connection: once more on a new one
            except Exception as error:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for _, _, future in batch:
                if not future.done():
                    future.set_result(None)

    async def _send(self, batch: list[_Pending]) -> None:
        if self._sending is None or self._sending.is_closed():
            self._sending = await connect(self.settings, "wait notify connect")
        try:
            await self._sending.execute(_NOTIFY, [c for c, _, _ in batch], [p for _, p, _ in batch])
        except TRANSIENT:
            self._sending.terminate()
            self._sending = None
            raise

    async def close(self) -> None:
        """Stop listening, fail the notifications still queued, close both connections."""
        self.receiving = False
        for task in (self._reader, self._writer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._reader = self._writer = None
        queued, self._queue = self._queue, []
        for _, _, future in queued:
            if not future.done():
                future.set_exception(ConnectionError("the PostgreSQL wait notifier is closed"))
        for connection in (self._listening, self._sending):
            if connection is not None and not connection.is_closed():
                try:
                    await asyncio.wait_for(connection.close(), 5)
                except Exception:  # closing anyway
                    connection.terminate()
        self._listening = self._sending = None
