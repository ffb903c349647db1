"""``NatsTransport``: the wow-py Transport SPI over NATS JetStream (nats-py).

What ``send`` proves (SENT): JetStream stored the record in the context's stream and
answered with a publish ack (stream and sequence), received through the transport's own
reply inbox (:mod:`wow_nats.acks`). It does not prove that any group received, processed
or acknowledged it.

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
from nats.js.api import PubAck

from wow_core.metrics import Metrics, NoopMetrics
from wow_core.transport import (
    DeadLetterReason,
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    TransportBase,
    TransportMessage,
)
from wow_nats.acks import Ack, PublishAcks, pub_ack
from wow_nats.connection import NatsConnection
from wow_nats.hpub import MSG_ID_HEADER, record_header
from wow_nats.layout import StreamLayout
from wow_nats.record import (
    DELIVERIES_HEADER,
    ERROR_HEADER,
    GROUP_HEADER,
    POSITION_HEADER,
    REASON_HEADER,
    TIMESTAMP_HEADER,
    dead_letter_id,
    header_text,
    key_headers,
)
from wow_nats.settings import SECTION, NatsSettings
from wow_nats.topics import NatsTopics

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings
    from wow_nats.receiver import NatsReceiver

log = logging.getLogger("wow_nats")

_PUBLISH_ATTEMPTS = 3
_TRANSIENT = (nats.errors.TimeoutError, nats.errors.ConnectionReconnectingError, TimeoutError)


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
        self._connection = NatsConnection(self.settings, closed=lambda: self._closed)
        self._topics = NatsTopics(self._connection, self.layout, self.settings)
        self._ready = self._topics.ready
        """Topics whose stream exists (topic -> stream): the fast path of ``send``."""
        self._id_prefix = uuid.uuid4().hex[:16] + "-"
        self._id_counter = itertools.count()
        self._deduplicate = self.settings.deduplicate
        self._acks = PublishAcks(self.settings.publish_timeout, self.settings.max_pending_publishes)

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
        await self._start_acks()

    async def send(self, message: TransportMessage) -> None:
        """Publish to the topic's subject; return on JetStream's publish ack."""
        self._check_open()
        # unique per record, reused by retries: JetStream stores a retried record once
        msg_id = self._id_prefix + str(next(self._id_counter)) if self._deduplicate else None
        data = message.payload.encode("utf-8")
        if self._acks.direct:
            header = record_header(message.key, message.timestamp, msg_id)
            await self._publish(message.topic, data, None, header)
            return
        headers = key_headers(message.key)
        headers[TIMESTAMP_HEADER] = str(message.timestamp)
        if msg_id is not None:
            headers[MSG_ID_HEADER] = msg_id
        await self.publish(message.topic, data, headers)

    async def send_dead_letter(self, message: TransportMessage, reason: DeadLetterReason) -> None:
        """:meth:`send` a dead letter (the record's bytes, key and timestamp) with why it is
        there in its headers, as a poison record's own dead letter has them
        (``Wow-Dlq-Reason``, ``-Group``, ``-Position``, ``-Deliveries``, and
        ``Wow-Dlq-Error`` with the decode error), and one message id per group and
        record: a record dead-lettered again (its acknowledgement lost) is stored once."""
        self._check_open()
        headers = key_headers(message.key)
        headers[TIMESTAMP_HEADER] = str(message.timestamp)
        headers[REASON_HEADER] = reason.reason
        headers[GROUP_HEADER] = header_text(reason.group)
        headers[POSITION_HEADER] = reason.position
        headers[DELIVERIES_HEADER] = str(reason.deliveries)
        if reason.error:
            headers[ERROR_HEADER] = header_text(reason.error)
        headers[MSG_ID_HEADER] = dead_letter_id(reason.group, reason.position)
        await self.publish(message.topic, message.payload.encode("utf-8", "surrogateescape"), headers)

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
        receiver = NatsReceiver(
            group,
            [self.layout.subject(topic) for topic in topics],
            settings=self.settings,
            layout=self.layout,
            connection=self._connection,
            topic_admin=self._topics,
            publish=self.publish,
            metrics=self.metrics,
            on_close=self.receiver_closed,
        )
        return self._track(receiver)

    async def close(self) -> None:
        """Close every receiver, flush what is buffered, close the connection."""
        if not self._mark_closed():
            return
        for receiver in self._open_receivers():
            await receiver.close()
        self._topics.cancel()
        await self._connection.close()  # flushes the last acks and publishes
        self._acks.close()

    # -- shared with the receivers and tools ----------------------------------------------

    async def jetstream(self) -> JetStreamContext:
        """The JetStream context of the one connection, connecting on first use."""
        return await self._connection.jetstream()

    async def connection(self) -> NatsClient:
        """The one NATS connection, connecting on first use."""
        return await self._connection.client()

    async def ensure_stream(self, topic: str) -> str:
        """Create the stream of ``topic``'s context, or add its subjects; return its name."""
        return await self._topics.ensure(topic)

    def forget_stream(self, topic: str) -> None:
        """Drop the memo of ``topic``'s stream (it was deleted behind our back)."""
        self._topics.forget(topic)

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> PubAck:
        """JetStream publish, completed by its ack; transient failures are tried again.

        The ack comes back through the transport's own reply inbox
        (:class:`~wow_nats.acks.PublishAcks`: one subscription, one deadline timer);
        at most ``max_pending_publishes`` acks are awaited at once, a publish beyond
        waits for room.
        """
        return pub_ack(await self._publish(subject, data, headers, None))

    async def _publish(
        self, subject: str, data: bytes, headers: dict[str, str] | None, header: bytes | None
    ) -> Ack:
        """:meth:`publish` of either a header dict or a header block written by
        :func:`~wow_nats.hpub.record_header` (when the inbox writes directly)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                if subject not in self._ready:
                    await self._topics.ensure(subject)
                acks = self._acks
                if not acks.started:
                    await self._start_acks()
                if header is not None and acks.direct:
                    return await acks.publish_record(subject, data, header)
                if headers is None:
                    raise RuntimeError("a header block needs the inbox's direct writes")
                return await acks.publish_raw(subject, data, headers)
            except nats.js.errors.NoStreamResponseError:
                if attempt >= _PUBLISH_ATTEMPTS or self._closed:
                    raise
                # the stream vanished (deleted) or JetStream is still recovering
                self._topics.forget(subject)
                log.warning("no stream answered a publish to %s; attempt %d", subject, attempt)
            except _TRANSIENT as error:
                if attempt >= _PUBLISH_ATTEMPTS or self._closed:
                    raise
                log.warning("publish to %s failed (%r); attempt %d", subject, error, attempt)
                await asyncio.sleep(self.settings.reconnect_time_wait)

    async def _start_acks(self) -> None:
        client = await self._connection.client()
        await self._acks.start(client, self.settings.connect_timeout)
