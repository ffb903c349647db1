"""``NatsWaitNotifier``: wait signals between processes on core NATS subjects.

Each process subscribes to its own subject, ``<topic_prefix>wait.<process id>`` (the
endpoint ``nats:<subject>``), with plain core NATS (no JetStream: a signal is worth
nothing after its wait's deadline, so nothing is stored); a process that reaches a stage
of a command waited for elsewhere publishes the signal's JSON
(:func:`wow_core.spi.encode_signal`) to the subject named in the command's header.

Guaranteed: a signal published while the caller is subscribed reaches it at most once;
"subscribed" begins when :meth:`NatsWaitNotifier.start` returns: the server has the
subscription then, so a signal any connection publishes afterwards is delivered (short
of a disconnection). A signal that is not delivered completes no wait: the caller's wait
ends at its own deadline with :class:`~wow_core.command.CommandWaitTimeoutError`,
although the command went on.
Not guaranteed: delivery during a disconnection (nats-py buffers publishes while it
reconnects, up to its pending size; a subscriber that is away misses what was published
meanwhile, and those waits end at their deadlines), or to a caller that died (a publish
to a subject nobody subscribes to is dropped by the server: nothing grows). Only subjects
of this form under this prefix are published to: an endpoint naming anything else is
refused.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from typing import TYPE_CHECKING

from wow_core.spi import WaitEndpoint, WaitSignal, WaitSignalSink, encode_signal
from wow_nats.connection import NatsConnection
from wow_nats.settings import SECTION, NatsSettings

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from wow_core.spi import ProcessSettings

KIND = "nats"


class NatsWaitNotifier:
    """The ``nats`` :class:`~wow_core.spi.CommandWaitNotifier`; see the module doc.

    Its connection is a :class:`~wow_nats.connection.NatsConnection` of its own (the
    transport's connection setup, not the transport's connection: the notifier is started
    and closed on its own schedule)."""

    kind = KIND

    def __init__(self, settings: NatsSettings | None = None, *, topic_prefix: str = "wow.") -> None:
        self.settings = settings or NatsSettings()
        prefix = f"{topic_prefix}wait."
        self.subject = prefix + secrets.token_hex(16)
        self._accepted = re.compile(re.escape(prefix) + r"[0-9a-f]{32}")
        self._closed = False
        self._connection = NatsConnection(self.settings, closed=lambda: self._closed)

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> NatsWaitNotifier:
        return cls(settings.section(SECTION, NatsSettings), topic_prefix=settings.messaging.topic_prefix)

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        """Subscribe to this process's subject; returns once the server has the subscription
        (``ConnectionError`` when that is not confirmed within ``connect_timeout``).

        ``flush()`` is no proof of that: nats-py writes its ``PING`` straight to the socket,
        ahead of a ``SUB`` still in its write buffer, so its ``PONG`` can come back before
        the server has the subscription (signals published meanwhile by other
        connections were lost). A message this connection publishes to the subject after
        the ``SUB`` is: the server handles one connection's commands in order, so it comes
        back only once the subscription is in place."""
        client = await self._connection.client()
        confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        probe = b"wow-subscribed " + secrets.token_hex(16).encode()

        async def received(message: Msg) -> None:
            if not confirmed.done() and message.data == probe:
                confirmed.set_result(None)
                return
            sink(message.data)  # never raises

        await client.subscribe(self.subject, cb=received)
        await client.publish(self.subject, probe)
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                await confirmed
        except TimeoutError:
            raise ConnectionError(
                f"NATS did not confirm the wait subject's subscription within "
                f"{self.settings.connect_timeout}s (WOW_NATS__CONNECT_TIMEOUT)"
            ) from None
        return WaitEndpoint(KIND, self.subject)

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        """Publish the signal to the endpoint's subject (one of another form is refused
        with ``ValueError``). Returns once nats-py buffered it."""
        if self._accepted.fullmatch(endpoint.address) is None:
            raise ValueError(f"not a wait subject of this prefix: {endpoint.address[:120]!r}")
        client = await self._connection.client()
        await client.publish(endpoint.address, encode_signal(signal).encode())

    async def close(self) -> None:
        self._closed = True
        await self._connection.close()
