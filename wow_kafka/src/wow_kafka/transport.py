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

A send to a topic whose partitions the producer does not know yet (the first sends to
it, or the first after the producer started) waits at that topic's *gate*: its record
joins the topic's pending list in the order of the calls, one task makes sure the topic
exists and looks its partitions up, and then queues every pending record into the lanes
in one synchronous step, so records of one key keep the order of the calls here too
(a send that arrives while the gate is open joins it even if the partitions became
known meanwhile). A failed look-up fails every pending send with its error; a pending
send that is cancelled takes its record out.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from wow_core.transport import (
    DeadLetterReason,
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    TransportBase,
    TransportMessage,
)
from wow_kafka.connection import common_config, consumer_config, producer_config
from wow_kafka.dead_letters import dead_letter_headers
from wow_kafka.errors import KafkaConnectError, KafkaSendError, KafkaTopicError, KafkaTransportError
from wow_kafka.lanes import NO_HEADERS, Headers, PartitionLanes
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


class _Pending:
    """A record sent to a topic whose partitions are not known yet, and its sender's future."""

    __slots__ = ("future", "headers", "message")

    def __init__(self, message: TransportMessage, future: asyncio.Future[None], headers: Headers) -> None:
        self.message = message
        self.future = future
        self.headers = headers


class _Gate:
    """The records sent to one topic while it is looked up, in the order of the calls."""

    __slots__ = ("pending", "task")

    def __init__(self) -> None:
        self.pending: list[_Pending] = []
        self.task: asyncio.Task[None] | None = None


def _copied(error: BaseException) -> BaseException:
    """A copy of ``error`` for one of many awaiters (one object raised by each would pile
    up their tracebacks), keeping its cause."""
    try:
        copied = copy.copy(error)
    except Exception:
        return error
    copied.__cause__ = error.__cause__
    return copied


def _chain(queued: asyncio.Future[None], future: asyncio.Future[None]) -> None:
    """``future`` (a pending sender's) completes as ``queued`` (the lane's) does; cancelling
    ``future`` cancels ``queued`` (a record still in its lane is then taken out)."""

    def settle(done: asyncio.Future[None]) -> None:
        if future.done():
            return
        if done.cancelled():
            future.set_exception(KafkaError("the record's delivery was cancelled"))
            return
        error = done.exception()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(None)

    def cancelled(done: asyncio.Future[None]) -> None:
        if done.cancelled():
            queued.cancel()

    queued.add_done_callback(settle)
    future.add_done_callback(cancelled)


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
        # the topics being looked up, with the records sent to them meanwhile
        self._gates: dict[str, _Gate] = {}
        self._start_lock = asyncio.Lock()
        self._log_readers: set[KafkaLogReader] = set()

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> KafkaTransport:
        """Build from ``WOW_KAFKA__*``; the topic prefix defaults to ``WOW_MESSAGING__TOPIC_PREFIX``."""
        kafka = settings.section(SECTION, KafkaSettings)
        prefix = kafka.topic_prefix if kafka.topic_prefix is not None else settings.messaging.topic_prefix
        naming = DefaultTopicNaming(prefix, settings.messaging.context_aliases)
        return cls(kafka, naming=naming)

    def application_topic(self, name: str, topic_prefix: str) -> str:
        """The topic of application transport ``name``: ``<prefix>application.<name>``,
        the prefix ``WOW_KAFKA__TOPIC_PREFIX`` when set (as for every topic), else the
        messaging ``topic_prefix``."""
        prefix = self.settings.topic_prefix if self.settings.topic_prefix is not None else topic_prefix
        return f"{prefix}application.{name}"

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
        """Close every receiver, flush the producer, release the connections; idempotent.

        Sends still waiting at a topic's gate are flushed too: ``close`` waits until each
        topic's look-up ended, so their records are queued and flushed with the others (or
        fail with the look-up's error). A send that starts after ``close`` and would
        wait at a gate is refused (``BusClosedError``).
        """
        if not self._mark_closed():
            return
        for receiver in self._open_receivers():
            await receiver.close()
        for reader in list(self._log_readers):
            await reader.close()
        while self._gates:  # no new gate opens once closed
            tasks = [gate.task for gate in self._gates.values() if gate.task is not None]
            if not tasks:
                break
            await asyncio.gather(*tasks, return_exceptions=True)
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
        While the topic is looked up, the record waits at its gate (see the module
        docstring): records of one key keep the order of the calls either way. The
        topic's own errors (:class:`~wow_kafka.errors.KafkaTopicError`) and the
        producer's failure to start (:class:`~wow_kafka.errors.KafkaConnectError`) are
        raised as they are.
        """
        try:
            await self._queued(message)
        except KafkaTransportError:
            raise
        except KafkaError as error:
            raise self._send_error(message, error) from error

    async def send_dead_letter(self, message: TransportMessage, reason: DeadLetterReason) -> None:
        """:meth:`send` ``message`` (a dead letter: the original record's key, payload and
        timestamp) with why it is there in its record headers: ``wow-dlq-reason``,
        ``wow-dlq-group``, ``wow-dlq-position`` (``partition:offset``),
        ``wow-dlq-deliveries`` and, where known, ``wow-dlq-error`` (UTF-8, at most
        :data:`~wow_kafka.dead_letters.DEAD_LETTER_ERROR_BYTES` bytes of it)."""
        try:
            await self._queued(message, dead_letter_headers(reason))
        except KafkaTransportError:
            raise
        except KafkaError as error:
            raise self._send_error(message, error) from error

    def _queued(self, message: TransportMessage, headers: Headers = NO_HEADERS) -> asyncio.Future[None]:
        """Queue ``message`` (with ``headers``) in its lane, or at its topic's gate while
        the topic is not known (or is being looked up); synchronous, so records keep the
        order of the calls.

        Raises ``MessageSizeTooLargeError`` at once for a record over ``max_request_size``.
        """
        lanes = self._lanes
        topic = message.topic
        key, value = _bytes(message.key), _bytes(message.payload)
        if (
            lanes is not None
            and topic not in self._gates
            and self.topics.known(topic)
            and lanes.partitions_known(topic)
        ):
            return lanes.queue(topic, key, value, message.timestamp, headers)
        if self.closed:
            raise self._closed_error(topic)
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers))
        if size > self.settings.max_request_size:  # as the producer would refuse it, at once
            raise MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the maximum "
                "request size you have configured with the max_request_size configuration"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        gate = self._gates.get(topic)
        if gate is None:
            gate = self._gates[topic] = _Gate()
            gate.task = loop.create_task(self._open_gate(topic, gate), name=f"kafka-topic {topic}")
        gate.pending.append(_Pending(message, future, headers))
        return future

    async def _open_gate(self, topic: str, gate: _Gate) -> None:
        """Start the producer if needed, make sure ``topic`` exists and its partitions are
        known, then queue every pending record in order, in one step (or fail them all)."""
        try:
            lanes = self._lanes or await self._started()
            if not self.topics.known(topic):
                await self.topics.ensure((topic,))
            if not lanes.partitions_known(topic):
                await lanes.partitions_for(topic)
        except BaseException as error:
            if self._gates.get(topic) is gate:
                del self._gates[topic]
            failure = error if isinstance(error, Exception) else KafkaError(f"the look-up of {topic} stopped")
            for pending in gate.pending:
                if not pending.future.done():
                    pending.future.set_exception(_copied(failure))
            gate.pending = []
            if not isinstance(error, Exception):
                raise
            return
        # no await from here on: the records reach their lanes in the order of the calls,
        # before any send that comes after the gate closes
        if self._gates.get(topic) is gate:
            del self._gates[topic]
        for pending in gate.pending:
            if pending.future.done():
                continue  # its sender was cancelled: the record is not sent
            message = pending.message
            try:
                queued = lanes.queue(
                    topic, _bytes(message.key), _bytes(message.payload), message.timestamp, pending.headers
                )
            except KafkaError as error:  # too large, or the producer is closing
                pending.future.set_exception(error)
                continue
            _chain(queued, pending.future)
        gate.pending = []

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

        Records are queued in order, in one synchronous step (each in its lane, or at its
        topic's gate while the topic is looked up), so records of one key keep their
        order, also among concurrent sends. If any fails, the first failure is raised
        after all have completed; the others may have been sent. A record refused when
        queued (over ``max_request_size``) stops the queueing: the records after it are
        not sent.
        """
        if not messages:
            return
        if self._lanes is None:
            self._check_open()
        futures: list[asyncio.Future[None]] = []
        first_error: BaseException | None = None
        failed: TransportMessage | None = None
        for message in messages:
            try:
                futures.append(self._queued(message))
            except Exception as error:
                first_error, failed = error, message
                break
        results = await asyncio.gather(*futures, return_exceptions=True)
        for message, result in zip(messages, results, strict=False):
            if isinstance(result, BaseException) and first_error is None:
                first_error, failed = result, message
        if first_error is not None and failed is not None:
            if isinstance(first_error, KafkaError) and not isinstance(first_error, KafkaTransportError):
                raise self._send_error(failed, first_error) from first_error
            raise first_error

    def _send_error(self, message: TransportMessage, error: KafkaError) -> KafkaSendError:
        """The :class:`~wow_kafka.errors.KafkaSendError` of a client error (the transport's
        own errors, a topic's included, are raised as they are by the callers)."""
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
        named = group

        async def dead_letter(message: TransportMessage, reason: DeadLetterReason) -> None:
            # the group as the application names it (as the bus's decode failures do)
            await self.send_dead_letter(message, dataclasses.replace(reason, group=named))

        group = f"{self.group_prefix}{group}"
        receiver = KafkaTransportReceiver(
            group,
            topics,
            self.settings,
            consumer_config(self.settings, self._common, group),
            self.topics,
            on_close=self.receiver_closed,
            dead_letter=dead_letter,
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
