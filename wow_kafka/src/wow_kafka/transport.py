"""``KafkaTransport``: the Transport SPI over aiokafka.

One topic per named aggregate and message kind (named by :attr:`naming`, by default
``<prefix><context>.<aggregate>.<kind>``); the record key is the aggregate id, so one
aggregate's records share a partition and keep their order; the value is the message
JSON as given.

SENT evidence: :meth:`send` returns when the producer's result succeeded, that is the
partition leader (with ``acks=all``: every in-sync replica) acknowledged the batch that
holds the record. It proves nothing about any consumer receiving, acknowledging or
processing it. When the producer does not get that acknowledgement (broker down past
``request_timeout_ms``, an authorization failure) :meth:`send` raises
:class:`~wow_kafka.errors.KafkaSendError` with the producer's error as cause, as does
every other send whose record was in the same batch; a record over
``max_request_size`` is refused alone, before it is queued.

Concurrent sends to one partition go out together: each record waits in its
partition's lane and is handed to aiokafka in one batch with the records queued
meanwhile (:mod:`wow_kafka.lanes`: one future per batch, records of one key in the
order they were sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from wow_core.transport import (
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    TransportBase,
    TransportMessage,
)
from wow_kafka.connection import common_config, consumer_config, producer_config
from wow_kafka.errors import KafkaConnectError, KafkaSendError, KafkaTopicError
from wow_kafka.lanes import PartitionLanes
from wow_kafka.log_reader import KafkaLogReader
from wow_kafka.receiver import KafkaTransportReceiver
from wow_kafka.settings import KafkaSettings
from wow_kafka.topics import KafkaTopics

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings

log = logging.getLogger(__name__)

SECTION = "kafka"


def _bytes(text: str) -> bytes:
    # The inverse of the receiver's decoding: a dead letter keeps the original bytes.
    return text.encode("utf-8", "surrogateescape")


class KafkaTransport(TransportBase[KafkaTransportReceiver]):
    """Moves strings through Kafka; see the module docstring for what SENT means."""

    name = "kafka"
    label = "Kafka"
    owns_partitions = True
    """Each key partition of a group's topic belongs to one member (the cluster intake needs it)."""

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        naming: TopicNaming | None = None,
        decode_failure_default: DecodeFailureDefault = DecodeFailureDefault.DEAD_LETTER,
    ) -> None:
        self.settings = settings if settings is not None else KafkaSettings()
        naming = naming if naming is not None else DefaultTopicNaming(self.settings.topic_prefix or "wow.")
        super().__init__(naming, decode_failure_default)
        #: Prefix of every consumer group id: groups are cluster-wide on Kafka, so by default
        #: they live in the topic prefix's namespace (``WOW_KAFKA__GROUP_PREFIX``).
        if self.settings.group_prefix is not None:
            self.group_prefix = self.settings.group_prefix
        elif isinstance(naming, DefaultTopicNaming):
            self.group_prefix = naming.prefix
        else:
            self.group_prefix = self.settings.topic_prefix or "wow."
        self._common = common_config(self.settings)
        self.topics = KafkaTopics(self.settings, self._common)
        self._producer: AIOKafkaProducer | None = None
        self._lanes: PartitionLanes | None = None
        self._start_lock = asyncio.Lock()
        self._log_readers: set[KafkaLogReader] = set()

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> KafkaTransport:
        """Build from ``WOW_KAFKA__*``; the topic prefix defaults to ``WOW_MESSAGING__TOPIC_PREFIX``."""
        kafka = settings.section(SECTION, KafkaSettings)
        prefix = kafka.topic_prefix if kafka.topic_prefix is not None else settings.messaging.topic_prefix
        naming = DefaultTopicNaming(prefix, settings.messaging.context_aliases)
        return cls(kafka, naming=naming)

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        await self._started()

    async def _started(self) -> PartitionLanes:
        self._check_open()
        lanes = self._lanes
        if lanes is not None:
            return lanes
        async with self._start_lock:
            if self._lanes is not None:
                return self._lanes
            self._check_open()
            producer = AIOKafkaProducer(**producer_config(self.settings, self._common))
            try:
                await producer.start()
            except KafkaError as error:
                with contextlib.suppress(Exception):
                    await producer.stop()
                hint = (
                    " (the broker may not support idempotent producers: "
                    "try WOW_KAFKA__ENABLE_IDEMPOTENCE=false)"
                    if self.settings.enable_idempotence
                    else ""
                )
                raise KafkaConnectError(
                    f"the Kafka producer could not start against {self.settings.bootstrap_servers} "
                    f"(WOW_KAFKA__BOOTSTRAP_SERVERS, WOW_KAFKA__REQUEST_TIMEOUT_MS): {error}{hint}",
                    error,
                ) from error
            self._producer = producer
            self._lanes = PartitionLanes(producer)
            return self._lanes

    async def close(self) -> None:
        """Close every receiver, flush the producer, release the connections; idempotent."""
        if not self._mark_closed():
            return
        for receiver in self._open_receivers():
            await receiver.close()
        for reader in list(self._log_readers):
            await reader.close()
        async with self._start_lock:
            producer, self._producer = self._producer, None
            lanes, self._lanes = self._lanes, None
        try:
            if lanes is not None:
                await lanes.close()  # every queued record handed to the producer (or failed)
            if producer is not None:
                await producer.stop()  # flushes them: each is acknowledged or fails
        finally:
            await self.topics.close()

    # -- send -------------------------------------------------------------------------

    async def send(self, message: TransportMessage) -> None:
        """Return when the broker acknowledged the record (see the module docstring).

        The record waits in its partition's lane and goes out in one batch with the
        records other senders queued meanwhile (:mod:`wow_kafka.lanes`); the batch's
        acknowledgement is this record's. Raises :class:`~wow_kafka.errors.KafkaSendError`
        when the batch failed, or alone when the record is over ``max_request_size``.
        """
        lanes = self._lanes or await self._started()
        topic = message.topic
        if not self.topics.known(topic):
            await self.topics.ensure((topic,))
        try:
            if not lanes.partitions_known(topic):
                await lanes.partitions_for(topic)
            await lanes.queue(topic, _bytes(message.key), _bytes(message.payload), message.timestamp)
        except KafkaError as error:
            raise self._send_error(message, error) from error

    async def check_co_partitioned(self, topic: str, others: Sequence[str]) -> None:
        """Raise :class:`~wow_kafka.errors.KafkaTopicError` unless ``topic`` has as many
        partitions as each of ``others`` (the cluster intake: its command topic and the
        event topics of its context, so that a key's partition is the same number on all;
        the producer's partitioner, a murmur2 hash of the key, is the same for every topic)."""
        counts = await self.topics.partition_counts([topic, *others])
        wrong = {other: counts[other] for other in others if counts[other] != counts[topic]}
        if wrong:
            raise KafkaTopicError(
                f"{topic} has {counts[topic]} partitions but "
                + ", ".join(f"{name} has {count}" for name, count in sorted(wrong.items()))
                + ": a command would run where its aggregate's log partition is not owned; give them the "
                "same partition count"
            )

    async def send_many(self, messages: Sequence[TransportMessage]) -> None:
        """Send all ``messages``; return when every one was acknowledged.

        Records are queued in order, so records of one key keep their order. If any
        fails, the first failure is raised after all have completed; the others may have
        been sent. A record refused when queued (over ``max_request_size``) stops the
        queueing: the records after it are not sent.
        """
        if not messages:
            return
        lanes = self._lanes or await self._started()
        topics = {message.topic for message in messages}
        await self.topics.ensure(topics)
        futures: list[asyncio.Future[None]] = []
        first_error: BaseException | None = None
        failed: TransportMessage | None = None
        try:
            for topic in topics:
                if not lanes.partitions_known(topic):
                    await lanes.partitions_for(topic)
        except KafkaError as error:
            raise self._send_error(messages[0], error) from error
        for message in messages:
            try:
                futures.append(
                    lanes.queue(
                        message.topic, _bytes(message.key), _bytes(message.payload), message.timestamp
                    )
                )
            except KafkaError as error:
                first_error, failed = error, message
                break
        results = await asyncio.gather(*futures, return_exceptions=True)
        for message, result in zip(messages, results, strict=False):
            if isinstance(result, BaseException) and first_error is None:
                first_error, failed = result, message
        if first_error is not None and failed is not None:
            if isinstance(first_error, KafkaError):
                raise self._send_error(failed, first_error) from first_error
            raise first_error

    def _send_error(self, message: TransportMessage, error: KafkaError) -> KafkaSendError:
        if isinstance(error, KafkaTopicError):
            return KafkaSendError(str(error), error)
        if isinstance(error, MessageSizeTooLargeError):
            return KafkaSendError(
                f"the record for topic {message.topic!r} (key {message.key!r}) was not sent: over "
                f"WOW_KAFKA__MAX_REQUEST_SIZE={self.settings.max_request_size} bytes: {error}",
                error,
            )
        return KafkaSendError(
            f"Kafka did not acknowledge the record for topic {message.topic!r} (key {message.key!r}) "
            f"at {self.settings.bootstrap_servers} within WOW_KAFKA__REQUEST_TIMEOUT_MS="
            f"{self.settings.request_timeout_ms}: {error}",
            error,
        )

    # -- receive ----------------------------------------------------------------------

    def open(self, group: str, topics: Sequence[str]) -> KafkaTransportReceiver:
        """A new member of consumer group ``group`` for ``topics``; it connects on ``ready()``.

        The Kafka group id is ``group_prefix + group`` (see :attr:`group_prefix`).
        """
        self._check_open()
        group = f"{self.group_prefix}{group}"
        receiver = KafkaTransportReceiver(
            group,
            topics,
            self.settings,
            consumer_config(self.settings, self._common, group),
            self.topics,
            on_close=self.receiver_closed,
        )
        return self._track(receiver)

    # -- topics kept as logs -------------------------------------------------------------

    async def ensure_retained(self, topic: str) -> None:
        """Make sure ``topic`` keeps every record: created with ``retention.ms=-1`` (and
        ``retention.bytes=-1``, ``cleanup.policy=delete``) when missing, refused with
        :class:`~wow_kafka.errors.KafkaTopicError` when it exists with configs under which
        the broker deletes records (:meth:`~wow_kafka.topics.KafkaTopics.ensure_retained`)."""
        self._check_open()
        await self.topics.ensure_retained(topic)

    def read_from_start(self, topics: Sequence[str]) -> KafkaLogReader:
        """A reader of every partition of ``topics`` from the first record, in no consumer
        group (:class:`~wow_kafka.log_reader.KafkaLogReader`): nothing committed, nothing
        left on the broker when it closes; it connects on ``ready()``."""
        self._check_open()
        reader = KafkaLogReader(
            topics, self.settings, self._common, self.topics, on_close=self._log_readers.discard
        )
        self._log_readers.add(reader)
        return reader

    def __repr__(self) -> str:
        return f"KafkaTransport({self.settings.bootstrap_servers})"
