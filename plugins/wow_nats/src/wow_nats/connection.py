"""How the NATS transport connects: one connection, opened on first use.

:class:`NatsConnection` is what the transport and its receivers share: the one nats-py
client and its JetStream context. The first ``jetstream()`` (or ``client()``) connects,
within ``connect_timeout`` (a wrong URL fails instead of hanging); concurrent first calls
connect once. nats-py reconnects by itself afterwards. Once the transport is closed, a
call that would connect raises ``BusClosedError``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from wow_core.messaging import BusClosedError
from wow_nats.settings import NatsSettings

log = logging.getLogger("wow_nats")


def _guard_writelines_after_connection_lost() -> None:
    """CPython 3.12 and 3.13 (cpython#136234; seen on 3.12.1 and 3.13.0) let ``writelines`` on a
    socket transport whose connection is lost buffer the data and register a writer for a
    socket that is then closed; the selector keeps that writer, and the next socket of the
    process given the same file descriptor is never woken for writing (nats-py's flusher
    writes with ``writelines``: after a lost connection its reconnect, or any other
    connection made meanwhile, waited out its connect timeout). Such writes are dropped
    instead, as ``write`` drops them (and as 3.11 did, whose ``writelines`` is ``write``)."""
    if sys.version_info < (3, 12):
        return
    from asyncio import selector_events

    # private to asyncio, and typed differently by each version's stubs
    transport: Any = vars(selector_events)["_SelectorSocketTransport"]
    writelines = transport.writelines

    def guarded(self: Any, list_of_data: Any) -> None:
        if self._conn_lost:
            self.write(b"".join(list_of_data))  # dropped and counted, as write() does
            return
        writelines(self, list_of_data)

    transport.writelines = guarded


_guard_writelines_after_connection_lost()  # once: a module is imported once


class NatsConnection:
    """The one NATS connection of a transport and its JetStream context.

    ``closed`` tells whether the owning transport is closed: no new connection is made
    then, and a lost connection is not reported as one.
    """

    def __init__(self, settings: NatsSettings, *, closed: Callable[[], bool]) -> None:
        self.settings = settings
        self._closed = closed
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._connect_lock = asyncio.Lock()
        self._reconnected: list[Callable[[], None]] = []

    @property
    def js(self) -> JetStreamContext | None:
        """The JetStream context if connected (the fast path of a publish), else None."""
        return self._js

    async def jetstream(self) -> JetStreamContext:
        """The JetStream context of the one connection, connecting on first use."""
        js = self._js
        if js is not None:
            return js
        async with self._connect_lock:
            if self._closed():
                raise BusClosedError("the NATS transport is closed")
            if self._js is None:
                self._nc = await self._connect()
                self._js = self._nc.jetstream(publish_async_max_pending=self.settings.max_pending_publishes)
            return self._js

    async def client(self) -> NatsClient:
        """The one NATS connection, connecting on first use."""
        await self.jetstream()
        nc = self._nc
        if nc is None:
            raise BusClosedError("the NATS transport is closed")
        return nc

    @property
    def reconnecting(self) -> bool:
        """Whether the connection is lost and nats-py is reconnecting (or none is open)."""
        nc = self._nc
        return nc is None or nc.is_reconnecting or not nc.is_connected

    def on_reconnected(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop, must not raise) each time nats-py has
        re-established the connection (its subscriptions are sent again by then)."""
        self._reconnected.append(callback)

    async def close(self) -> None:
        """Flush what is buffered (the last acks and publishes), then close; idempotent."""
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.flush(timeout=2)
            except Exception as error:  # the connection may be gone; nothing left to save
                log.debug("flush before close failed: %r", error)
            await nc.close()

    async def _connect(self) -> NatsClient:
        settings = self.settings
        connected = False

        async def on_error(error: Exception) -> None:
            # Before the first connection the failure is start()'s ConnectionError, once.
            log.log(logging.WARNING if connected else logging.DEBUG, "NATS connection error: %r", error)

        async def on_disconnected() -> None:
            if not self._closed():
                log.warning("NATS connection lost; reconnecting")

        async def on_reconnected() -> None:
            log.info("NATS connection re-established")
            for callback in self._reconnected:
                try:
                    callback()
                except Exception:  # a listener's defect must not end nats-py's reconnect
                    log.exception("a reconnect listener failed")

        options: dict[str, object] = {
            "servers": settings.servers,
            "name": settings.connection_name,
            "connect_timeout": settings.connect_timeout,
            "reconnect_time_wait": settings.reconnect_time_wait,
            "max_reconnect_attempts": settings.max_reconnect_attempts,
            "error_cb": on_error,
            "disconnected_cb": on_disconnected,
            "reconnected_cb": on_reconnected,
        }
        if settings.user is not None:
            options["user"] = settings.user
        if settings.password is not None:
            options["password"] = settings.password.get_secret_value()
        if settings.token is not None:
            options["token"] = settings.token.get_secret_value()
        if settings.credentials is not None:
            options["user_credentials"] = settings.credentials
        # nats-py retries the first connection forever when reconnects are unlimited:
        # bound it, so a wrong URL fails instead of hanging.
        try:
            async with asyncio.timeout(settings.connect_timeout):
                client = await nats.connect(**options)  # type: ignore[arg-type]
            connected = True
            return client
        except TimeoutError:
            raise ConnectionError(
                f"no NATS server answered at {', '.join(settings.servers)} within "
                f"{settings.connect_timeout}s (WOW_NATS__SERVERS, WOW_NATS__CONNECT_TIMEOUT)"
            ) from None
