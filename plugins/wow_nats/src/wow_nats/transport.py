"""``NatsTransport``: the wow-py Transport SPI over NATS JetStream (nats-py).

What ``send`` proves (SENT): JetStream stored the record in the context's stream and
answered with a publish ack (stream and sequence). It does not prove that any group
received, processed or acknowledged it.

The transport owns one NATS connection. Streams are created (or their subjects added)
the first time a topic of their context is sent to or opened; consumers are created by
the receivers (:mod:`wow_nats.receiver`). nats-py reconnects by itself; a send that
times out or finds no stream responder while the connection is re-established is tried
again with the same ``Nats-Msg-Id`` (``deduplicate``, on by default), so JetStream's
duplicate window keeps the retry
from storing the record twice.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import PubAck, StorageType, StreamConfig

from wow_core.messaging import BusClosedError
from wow_core.metrics import Metrics, NoopMetrics
from wow_core.transport import (
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    TransportBase,
    TransportMessage,
)
from wow_nats.layout import StreamLayout
from wow_nats.record import TIMESTAMP_HEADER, key_headers
from wow_nats.settings import SECTION, NatsSettings

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings
    from wow_nats.receiver import NatsReceiver

log = logging.getLogger("wow_nats")

MSG_ID_HEADER = "Nats-Msg-Id"
_PUBLISH_ATTEMPTS = 3
_TRANSIENT = (nats.errors.TimeoutError, nats.errors.ConnectionReconnectingError, TimeoutError)


class StreamSubjectsTakenError(RuntimeError):
    """Another stream on the server already holds subjects this transport's stream needs.

    JetStream lets one subject belong to one stream only. The message names the stream
    that could not be created or extended, the stream holding each subject, and the
    setting that separates two applications (or two stream prefixes) on one server.
    """


def _expire(future: asyncio.Future[PubAck]) -> None:
    if not future.done():
        future.set_exception(nats.errors.TimeoutError())


class NatsTransport(TransportBase["NatsReceiver"]):
    """A stream per bounded context, a subject per topic, a durable pull consumer per group.

    Guarantees: a completed ``send`` is stored by JetStream; a record reaches every group
    that had a consumer when it was stored (at least once; see
    :class:`~wow_nats.receiver.NatsReceiver` for order and redelivery).
    Not guaranteed: order between records of two concurrent ``send`` calls (the caller
    decides order by awaiting), order across topics.
    """

    label = "NATS"

    def __init__(
        self,
        settings: NatsSettings | None = None,
        *,
        naming: TopicNaming | None = None,
        topic_prefix: str | None = None,
        decode_failure_default: DecodeFailureDefault = DecodeFailureDefault.DEAD_LETTER,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(naming or DefaultTopicNaming(), decode_failure_default)
        self.settings = settings or NatsSettings()
        prefix = topic_prefix if topic_prefix is not None else getattr(self._naming, "prefix", "wow.")
        self.layout = StreamLayout(str(prefix), self.settings.stream_prefix)
        self.metrics: Metrics = metrics or NoopMetrics()
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._connect_lock = asyncio.Lock()
        self._streams: dict[str, asyncio.Future[None]] = {}
        self._ready: dict[str, str] = {}
        """Topics whose stream exists (topic -> stream): the fast path of ``send``."""
        self._id_prefix = uuid.uuid4().hex[:16] + "-"
        self._id_counter = itertools.count()
        self._deduplicate = self.settings.deduplicate

    @classmethod
    def from_settings(cls, settings: ProcessSettings, *, metrics: Metrics | None = None) -> NatsTransport:
        """Build from ``WOW_NATS__*`` and the core's topic naming settings."""
        messaging = settings.messaging
        return cls(
            settings.section(SECTION, NatsSettings),
            naming=DefaultTopicNaming(messaging.topic_prefix, messaging.context_aliases),
            topic_prefix=messaging.topic_prefix,
            metrics=metrics,
        )

    # -- the Transport protocol ---------------------------------------------------------

    @property
    def name(self) -> str:
        return "nats"

    async def start(self) -> None:
        await self.jetstream()

    async def send(self, message: TransportMessage) -> None:
        """Publish to the topic's subject; return on JetStream's publish ack."""
        self._check_open()
        headers = key_headers(message.key)
        headers[TIMESTAMP_HEADER] = str(message.timestamp)
        if self._deduplicate:
            # unique per record, reused by retries: JetStream stores a retried record once
            headers[MSG_ID_HEADER] = self._id_prefix + str(next(self._id_counter))
        await self.publish(message.topic, message.payload.encode("utf-8"), headers)

    async def send_many(self, messages: Sequence[TransportMessage]) -> None:
        """Publish every message, pipelined on the one connection, in the given order.

        Completes when every publish was acked; fails with the first failure (the others
        may have been stored). A retried publish may land after a later one of the batch.
        """
        self._check_open()
        if messages:
            await asyncio.gather(*(self.send(message) for message in messages))

    def open(self, group: str, topics: Sequence[str]) -> NatsReceiver:
        from wow_nats.receiver import NatsReceiver

        self._check_open()
        if not topics:
            raise ValueError(f"group {group!r} opens no topic")
        return self._track(NatsReceiver(self, group, [self.layout.subject(topic) for topic in topics]))

    async def close(self) -> None:
        """Close every receiver, flush what is buffered, close the connection."""
        if not self._mark_closed():
            return
        for receiver in self._open_receivers():
            await receiver.close()
        for future in self._streams.values():
            future.cancel()
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.flush(timeout=2)  # the last acks and publishes
            except Exception as error:  # the connection may be gone; nothing left to save
                log.debug("flush before close failed: %r", error)
            await nc.close()

    # -- shared with the receivers ------------------------------------------------------

    async def jetstream(self) -> JetStreamContext:
        """The JetStream context of the one connection, connecting on first use."""
        js = self._js
        if js is not None:
            return js
        async with self._connect_lock:
            self._check_open()
            if self._js is None:
                self._nc = await self._connect()
                self._js = self._nc.jetstream(publish_async_max_pending=self.settings.max_pending_publishes)
            return self._js

    async def connection(self) -> NatsClient:
        """The one NATS connection, connecting on first use."""
        await self.jetstream()
        nc = self._nc
        if nc is None:
            raise BusClosedError("the NATS transport is closed")
        return nc

    async def ensure_stream(self, topic: str) -> str:
        """Create the stream of ``topic``'s context, or add its subjects; return its name."""
        stream = self._ready.get(topic)
        if stream is not None:
            return stream
        base = self.layout.base(topic)  # validates the topic
        name = self.layout.stream_for_base(base)
        future = self._streams.get(name)
        if future is None or (future.done() and (future.cancelled() or future.exception() is not None)):
            future = self._streams[name] = asyncio.ensure_future(self._create_or_update_stream(name, base))
        await asyncio.shield(future)
        self._ready[topic] = name
        return name

    def forget_stream(self, topic: str) -> None:
        """Drop the memo of ``topic``'s stream (it was deleted behind our back)."""
        name = self.layout.stream(topic)
        self._streams.pop(name, None)
        for known in [known for known, stream in self._ready.items() if stream == name]:
            del self._ready[known]

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> PubAck:
        """JetStream publish, completed by its ack; transient failures are tried again.

        At most ``max_pending_publishes`` acks are awaited at once (nats-py's bound on
        asynchronous publishes); a publish beyond waits for room.
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                if subject not in self._ready:
                    await self.ensure_stream(subject)
                js = self._js or await self.jetstream()
                future = await js.publish_async(subject, data, headers=headers)
                return await self._ack_of(future)
            except nats.js.errors.NoStreamResponseError:
                if attempt >= _PUBLISH_ATTEMPTS or self._closed:
                    raise
                # the stream vanished (deleted) or JetStream is still recovering
                self.forget_stream(subject)
                log.warning("no stream answered a publish to %s; attempt %d", subject, attempt)
            except _TRANSIENT as error:
                if attempt >= _PUBLISH_ATTEMPTS or self._closed:
                    raise
                log.warning("publish to %s failed (%r); attempt %d", subject, error, attempt)
                await asyncio.sleep(self.settings.reconnect_time_wait)

    async def _ack_of(self, future: asyncio.Future[PubAck]) -> PubAck:
        # one timer per publish, not the task and future of wait_for
        timer = asyncio.get_running_loop().call_later(self.settings.publish_timeout, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()

    # -- internals ----------------------------------------------------------------------

    async def _connect(self) -> NatsClient:
        settings = self.settings
        connected = False

        async def on_error(error: Exception) -> None:
            # Before the first connection the failure is start()'s ConnectionError, once.
            log.log(logging.WARNING if connected else logging.DEBUG, "NATS connection error: %r", error)

        async def on_disconnected() -> None:
            if not self._closed:
                log.warning("NATS connection lost; reconnecting")

        async def on_reconnected() -> None:
            log.info("NATS connection re-established")

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

    async def _subjects_taken(
        self, js: JetStreamContext, name: str, subjects: list[str], error: Exception
    ) -> StreamSubjectsTakenError:
        """The error for subjects of stream ``name`` that other streams hold, naming them."""
        holders: dict[str, list[str]] = {}
        for subject in subjects:
            try:
                holder = await js.find_stream_name_by_subject(subject)
            except Exception:  # not held, or the lookup failed: name what is known
                continue
            holders.setdefault(holder, []).append(subject)
        held = "; ".join(f"stream {holder!r} holds {', '.join(subs)}" for holder, subs in holders.items())
        return StreamSubjectsTakenError(
            f"cannot create NATS stream {name!r} for the subjects {', '.join(subjects)}: "
            f"{held or 'another stream holds them'} (JetStream gives a subject to one stream only; "
            "it is another application, or the same one with another WOW_NATS__STREAM_PREFIX, on "
            f"this server). Subjects are the topic names: give each its own "
            f"WOW_MESSAGING__TOPIC_PREFIX (now {self.layout.topic_prefix!r}), or use the "
            f"stream prefix of the stream that holds them. Server: {error}"
        )

    async def _create_or_update_stream(self, name: str, base: str) -> None:
        js = await self.jetstream()
        settings = self.settings
        subjects = self.layout.stream_subjects(base)
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            config = StreamConfig(
                name=name,
                subjects=subjects,
                storage=StorageType(settings.storage),
                num_replicas=settings.replicas,
                max_age=settings.max_age or None,
            )
            try:
                await js.add_stream(config)
                log.info("created stream %s for %s", name, ", ".join(subjects))
                return
            except nats.js.errors.BadRequestError as error:
                # another process created it first (fall through and reconcile), or
                # another stream holds the subjects
                try:
                    info = await js.stream_info(name)
                except nats.js.errors.NotFoundError:
                    raise await self._subjects_taken(js, name, subjects, error) from error
        current = info.config
        missing = [subject for subject in subjects if subject not in (current.subjects or [])]
        wanted_age = float(settings.max_age)
        if missing or float(current.max_age or 0) != wanted_age or current.num_replicas != settings.replicas:
            updated = current.evolve(
                subjects=[*(current.subjects or []), *missing],
                max_age=wanted_age or None,
                num_replicas=settings.replicas,
            )
            try:
                await js.update_stream(updated)
            except nats.js.errors.BadRequestError as error:
                if not missing:
                    raise
                raise await self._subjects_taken(js, name, missing, error) from error
            log.info("updated stream %s (subjects %s)", name, ", ".join(updated.subjects or []))
        storage = str(getattr(current.storage, "value", current.storage or settings.storage))
        if storage != settings.storage:
            log.warning(
                "stream %s uses %s storage, WOW_NATS__STORAGE asks for %s: storage cannot be changed",
                name,
                storage,
                settings.storage,
            )
