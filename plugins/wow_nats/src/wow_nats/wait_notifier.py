"""``NatsWaitNotifier``: wait signals between processes, kept for their caller by JetStream.

Each caller process has its own subject, ``<topic_prefix>wait.<32 hex digits>`` (the
endpoint ``nats:<subject>``). A process that reaches a stage of a command waited for
elsewhere publishes the signal's JSON (:func:`wow_core.spi.encode_signal`) to the subject
named in the command's header, with a plain core NATS publish (no round trip).

One JetStream stream per topic prefix, ``<stream_prefix><topic prefix>wait_signals``
(``wow_wait_signals``), captures every such subject: the server stores each signal as it
arrives, whether its caller is connected or not, for ``WOW_NATS__WAIT_STREAM_MAX_AGE``
(60 s) and at most ``WOW_NATS__WAIT_STREAM_MAX_PER_CALLER`` (10,000) per caller, in
``WOW_NATS__WAIT_STREAM_STORAGE`` (``file``: kept through a server restart). The caller
reads its own subject through a consumer of its own (``wow-wait-<hex>``, gone after
``max_age`` without a read: a dead caller leaves nothing behind), pulling without a break
and acknowledging what it handed on.

Guaranteed: every signal published after :meth:`NatsWaitNotifier.start` returned reaches
the caller once, in publication order, while the caller lives and comes back within
``max_age``: across a lost connection (a network blip, a proxy's idle timeout, a server
restart with file storage), what was published meanwhile is read when the connection is
back. A signal read and lost on its way (the connection broke under it) is delivered again
after a few seconds and handed on once (the stream sequence is remembered). A consumer
that went (removed, or the server lost it) is made again from the signal after the last
one handed on; a stream that went is made again, and a warning says what may have been
lost. Not guaranteed: a signal to a caller away for longer than ``max_age``, or published
while no stream existed (the server lost a memory stream in a restart, until the caller
made it again), or to a caller that died (its signals expire with the stream's age
limit). A signal that is not delivered completes no wait: the caller's wait ends at its
own deadline with :class:`~wow_core.command.CommandWaitTimeoutError`, although the command
went on.

Compatible both ways with the pub/sub form of earlier releases: the subjects are the same,
and a core subscriber to its subject still gets what is published to it. Only subjects
of this form under this prefix are published to: an endpoint naming anything else is
refused. The bounded context name ``wait`` is taken under the topic prefix: a transport
stream for ``<topic_prefix>wait`` would overlap this one (whichever is made second fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
from typing import TYPE_CHECKING, Any

import nats.js.errors
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    StorageType,
    StreamConfig,
)

from wow_core.spi import WaitEndpoint, WaitSignal, WaitSignalSink, encode_signal
from wow_nats.connection import NatsConnection
from wow_nats.errors import StreamSubjectsTakenError
from wow_nats.receiver import RECOVERY_PAUSE
from wow_nats.settings import SECTION, NatsSettings
from wow_nats.topics import SUBJECTS_OVERLAP, stream_holders, subjects_taken

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription
    from nats.js import JetStreamContext

    from wow_core.spi import ProcessSettings

log = logging.getLogger("wow_nats")

KIND = "nats"
PULL_BATCH = 1000
"""Signals one pull request asks for: they are delivered as they are stored, the request
ends when it has them all or at its expiry (``fetch_timeout``)."""
ACK_WAIT = 3.0
"""Seconds before a signal read and not acknowledged (lost with the connection) is
delivered again."""
ACK_EVERY = 256
"""A busy reader acknowledges at least every this many signals (else when it has read
all that arrived)."""
_STATUS = "Status"
_DESCRIPTION = "Description"


WAIT_STREAM_SUFFIX = "wait_signals"


def wait_stream_name(stream_prefix: str, topic_prefix: str) -> str:
    """The wait stream of a topic prefix (``wow.`` -> ``wow_wait_signals``)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", topic_prefix)
    return f"{stream_prefix}{safe}{WAIT_STREAM_SUFFIX}"


class NatsWaitNotifier:
    """The ``nats`` :class:`~wow_core.spi.CommandWaitNotifier`; see the module doc.

    Its connection is a :class:`~wow_nats.connection.NatsConnection` of its own (the
    transport's connection setup, not the transport's connection: the notifier is started
    and closed on its own schedule)."""

    kind = KIND

    def __init__(self, settings: NatsSettings | None = None, *, topic_prefix: str = "wow.") -> None:
        self.settings = settings or NatsSettings()
        prefix = f"{topic_prefix}wait."
        token = secrets.token_hex(16)
        self.subject = prefix + token
        self.stream = wait_stream_name(self.settings.stream_prefix, topic_prefix)
        self._consumer_base = f"wow-wait-{token}"
        self.consumer = self._consumer_base
        """This caller's consumer (``-<n>`` after its ``n``-th remake)."""
        self._stream_subject = prefix + "*"
        self._topic_prefix = topic_prefix
        self._accepted = re.compile(re.escape(prefix) + r"[0-9a-f]{32}")
        self._closed = False
        self._connection = NatsConnection(self.settings, closed=lambda: self._closed)
        self._connection.on_reconnected(self._reconnected)
        self._sink: WaitSignalSink | None = None
        self._inbox: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._request_done = asyncio.Event()
        self._requested = self._delivered = 0
        self._consumer_gone = False
        self._stream_created: object = None
        self._last = 0
        """Stream sequence of the last signal handed on (a redelivery at or below it is not)."""
        self._unacked = 0
        self._reply = ""
        """The reply subject of the last signal read (acknowledging it acknowledges all)."""
        self.received = 0
        """Signals handed to the sink."""
        self.duplicates = 0
        """Signals delivered again after they were handed on (not handed on twice)."""
        self.recovered = 0
        """Times the consumer (or the stream) was made again."""

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> NatsWaitNotifier:
        return cls(settings.section(SECTION, NatsSettings), topic_prefix=settings.messaging.topic_prefix)

    @property
    def reading(self) -> bool:
        """Whether this caller's reader runs (started, not closed)."""
        return self._task is not None and not self._task.done()

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        """Make sure the wait stream exists and make this caller's consumer; returns once
        they do: a signal published to the endpoint afterwards, by any connection, is
        stored for this caller (``ConnectionError`` when the server cannot be reached
        within ``connect_timeout``; ``RuntimeError`` when the stream cannot be made, with
        the server's reason)."""
        self._sink = sink
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                client = await self._connection.client()
                await self._ensure_stream()
                await self._make_consumer()
                self._inbox = await client.subscribe(client.new_inbox(), cb=self._on_message)
        except TimeoutError:
            raise ConnectionError(
                f"NATS did not make the wait stream {self.stream!r} and its consumer within "
                f"{self.settings.connect_timeout}s (WOW_NATS__CONNECT_TIMEOUT)"
            ) from None
        self._task = asyncio.create_task(self._read(), name=f"wow-nats-wait-{self.consumer}")
        return WaitEndpoint(KIND, self.subject)

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        """Publish the signal to the endpoint's subject (one of another form is refused
        with ``ValueError``). Returns once nats-py buffered it: the server stores it on
        arrival (the wait stream captures the subject)."""
        if self._accepted.fullmatch(endpoint.address) is None:
            raise ValueError(f"not a wait subject of this prefix: {endpoint.address[:120]!r}")
        client = await self._connection.client()
        await client.publish(endpoint.address, encode_signal(signal).encode())

    async def close(self) -> None:
        """Stop reading, remove this caller's consumer (its stored signals expire with
        the stream's age limit), close the connection; idempotent."""
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._inbox is not None and self._connection.js is not None:
            with contextlib.suppress(Exception):
                await self._ack_now()
                async with asyncio.timeout(2.0):
                    await self._connection.js.delete_consumer(self.stream, self.consumer)
        self._inbox = None
        await self._connection.close()

    # -- the stream and the consumer ------------------------------------------------------

    async def _ensure_stream(self) -> None:
        """Make the wait stream, or take the one there (made by another caller): its
        subjects must be this prefix's wait subjects; its limits are whoever made it
        first's (a difference is logged)."""
        js = await self._connection.jetstream()
        settings = self.settings
        config = StreamConfig(
            name=self.stream,
            description="wow wait signals, kept for their callers",
            subjects=[self._stream_subject],
            storage=StorageType.FILE if settings.wait_stream_storage == "file" else StorageType.MEMORY,
            num_replicas=settings.replicas,
            max_age=settings.wait_stream_max_age,
            max_msgs_per_subject=settings.wait_stream_max_per_caller,
            discard=DiscardPolicy.OLD,
            duplicate_window=1.0,
        )
        try:
            info = await js.add_stream(config)
        except nats.js.errors.APIError as error:
            try:
                info = await js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                if error.err_code == SUBJECTS_OVERLAP:
                    raise await self._subjects_taken(js, error) from None
                raise RuntimeError(
                    f"the NATS wait stream {self.stream!r} for {self._stream_subject} cannot be "
                    f"made: {error.description}"
                ) from None
            if info.config.subjects != [self._stream_subject]:
                raise RuntimeError(
                    f"the NATS stream {self.stream!r} holds {info.config.subjects}, not the wait "
                    f"subjects {self._stream_subject}"
                ) from None
            if (info.config.max_age, info.config.max_msgs_per_subject) != (
                config.max_age,
                config.max_msgs_per_subject,
            ):
                log.info(
                    "the wait stream %s keeps signals %ss, %s per caller (its maker's limits, not "
                    "this process's)",
                    self.stream,
                    info.config.max_age,
                    info.config.max_msgs_per_subject,
                )
        created = info.created
        if self._stream_created is not None and created != self._stream_created:
            log.warning(
                "the NATS wait stream %s was made again: signals published to %s while it was "
                "gone are lost (those waits end at their deadlines)",
                self.stream,
                self.subject,
            )
            self._last = 0  # a new stream counts its sequences from 1 again
        self._stream_created = created

    async def _subjects_taken(self, js: JetStreamContext, error: Exception) -> StreamSubjectsTakenError:
        """The error for wait subjects another stream holds: the wait stream of this topic
        prefix under another stream prefix (another application with the same topic
        prefix), or the stream of a bounded context named ``wait``."""
        subjects = [self._stream_subject]
        holders = await stream_holders(js, subjects)
        hint = ""
        if any(not holder.endswith(WAIT_STREAM_SUFFIX) for holder in holders):
            hint = (
                f" A stream of a bounded context named 'wait' holds them: under the topic prefix "
                f"{self._topic_prefix!r} that context name is the wait notifier's."
            )
        return subjects_taken(
            self.stream,
            subjects,
            holders,
            error,
            topic_prefix=self._topic_prefix,
            stream_prefix=self.settings.stream_prefix,
            hint=hint,
        )

    async def _make_consumer(self) -> None:
        """This caller's consumer: from the first signal stored for it, or (made again)
        from the one after the last handed on."""
        js = await self._connection.jetstream()
        start: dict[str, Any] = {"deliver_policy": DeliverPolicy.ALL}
        if self._last:
            start = {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": self._last + 1}
        config = ConsumerConfig(
            name=self.consumer,
            description=f"wow wait signals of {self.subject}"[:256],
            filter_subject=self.subject,
            ack_policy=AckPolicy.ALL,
            ack_wait=ACK_WAIT,
            max_deliver=-1,
            max_ack_pending=-1,
            inactive_threshold=self.settings.wait_stream_max_age,
            num_replicas=0,
            **start,
        )
        await js.add_consumer(self.stream, config)

    async def _recover(self) -> None:
        """The consumer (or its stream) is gone: make them again, from the signal after the
        last handed on."""
        js = await self._connection.jetstream()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_consumer(self.stream, self.consumer)
        # the news of a removed consumer may come while the server is still removing its
        # stream: a stream made again before that finished stores but never delivers
        # (NATS 2.9), so let the removal end first
        await asyncio.sleep(RECOVERY_PAUSE)
        await self._ensure_stream()
        # a name of its own: NATS 2.9 may not deliver to a consumer made under the name of
        # one removed with its stream moments before (its pull requests expire empty)
        self.recovered += 1
        self.consumer = f"{self._consumer_base}-{self.recovered}"
        await self._make_consumer()
        log.warning(
            "the NATS wait consumer %s was gone: made again after stream sequence %d",
            self.consumer,
            self._last,
        )

    # -- reading --------------------------------------------------------------------------

    def _reconnected(self) -> None:
        # the outstanding pull request went with the old connection: ask again at once
        self._request_done.set()

    async def _read(self) -> None:
        expires = self.settings.fetch_timeout
        backoff = 0.05
        while not self._closed:
            try:
                if self._consumer_gone:
                    await self._recover()
                    self._consumer_gone = False
                inbox = self._inbox
                assert inbox is not None
                self._requested, self._delivered = PULL_BATCH, 0
                self._request_done.clear()
                request = json.dumps({"batch": PULL_BATCH, "expires": int(expires * 1e9)}).encode()
                client = await self._connection.client()
                subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}"
                await client.publish(subject, request, reply=inbox.subject)
                try:
                    async with asyncio.timeout(expires + 1.0):
                        await self._request_done.wait()
                except TimeoutError:
                    # JetStream answers an expired request: silence means the request was
                    # lost with the connection, or the consumer is gone
                    await self._verify()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a broken connection, a server that refused: retry
                if self._closed:
                    return
                # while nats-py reconnects, the connection's own warning has said it
                away = self._connection.reconnecting
                log.log(
                    logging.DEBUG if away else logging.WARNING,
                    "reading the NATS wait signals of %s failed: %r; retrying",
                    self.subject,
                    error,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _verify(self) -> None:
        js = await self._connection.jetstream()
        try:
            await js.consumer_info(self.stream, self.consumer)
        except nats.js.errors.NotFoundError:
            self._consumer_gone = True

    async def _on_message(self, message: Msg) -> None:
        headers = message.headers
        status = headers.get(_STATUS) if headers else None
        if status:
            if status == "100":  # an idle heartbeat
                return
            description = (headers or {}).get(_DESCRIPTION, "")
            if (status == "409" and "deleted" in description.lower()) or status == "503":
                self._consumer_gone = True  # 503: no consumer answers the request
            elif status not in ("404", "408", "409"):
                log.warning("pull of the wait signals answered %s %s", status, description)
            self._request_done.set()
            return
        self._delivered += 1
        if self._delivered >= self._requested:
            self._request_done.set()
        try:
            sequence = message.metadata.sequence.stream
        except Exception:  # not a JetStream delivery: nothing to order it by
            log.warning("a message without JetStream metadata on the wait inbox was dropped")
            return
        self._reply = message.reply
        self._unacked += 1
        if sequence <= self._last:
            self.duplicates += 1
        else:
            self._last = sequence
            self.received += 1
            assert self._sink is not None
            self._sink(message.data)  # never raises
        inbox = self._inbox
        if self._unacked >= ACK_EVERY or inbox is None or inbox.pending_msgs == 0:
            with contextlib.suppress(Exception):  # not acknowledged: delivered again, then skipped
                await self._ack_now()

    async def _ack_now(self) -> None:
        """Acknowledge every signal read so far (the consumer acknowledges all up to one)."""
        if not self._unacked or not self._reply:
            return
        self._unacked = 0
        client = await self._connection.client()
        await client.publish(self._reply, b"+ACK")
