"""``KafkaWaitNotifier``: wait signals between processes on a per-service Kafka topic.

Each service has one signal topic, ``<topic_prefix><service>.wait`` (created like the
transport's topics, ``WOW_KAFKA__PARTITIONS`` partitions). A process picks one of its
partitions at random when it starts and names itself by a random process id: its
endpoint is ``kafka:<topic>/<partition>/<process id>``. Its receiving half reads that one
partition, without a consumer group and from the end (no offsets are committed: a signal
is worth nothing after its deadline), fetching with ``WOW_KAFKA__FETCH_MAX_WAIT_MS`` as
the transport's consumers do (a broker may hold an empty fetch that long, and a signal
arriving meanwhile waits for it), and keeps the records keyed by its own process id. A
process that reaches a stage of a command waited for elsewhere produces the signal's
JSON (:func:`wow_core.spi.encode_signal`) to that topic and partition, keyed by the
process id, and returns on the broker's acknowledgement.

Why this shape: a topic per process would leave a topic behind for every process that
ever ran; one partition per process bounds what a caller reads to its share of its own
service's signals, and the key keeps it from taking another process's signal.

Guaranteed: a signal acknowledged by the broker while the caller reads its partition
reaches it once. Not guaranteed: a signal produced before the caller started reading
(lost), or to a caller that died (it stays in the topic until the topic's retention drops
it: nothing else is kept, nothing is retried). The notifier creates the signal topic
with ``retention.ms`` = ``WOW_KAFKA__WAIT_RETENTION_MS`` (10 minutes), so what dead
callers leave is dropped by the broker; a topic that already exists keeps its own
configuration. Only topics of this form under this prefix are produced to: an
endpoint naming anything else is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import secrets
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from wow_core.spi import WaitEndpoint, WaitSignal, WaitSignalSink, encode_signal
from wow_kafka.connection import common_config, producer_config
from wow_kafka.errors import KafkaConnectError
from wow_kafka.settings import KafkaSettings
from wow_kafka.topics import KafkaTopics

if TYPE_CHECKING:
    from wow_core.spi import ProcessSettings

log = logging.getLogger("wow.kafka.wait")

KIND = "kafka"


class KafkaWaitNotifier:
    """The ``kafka`` :class:`~wow_core.spi.CommandWaitNotifier`; see the module doc."""

    kind = KIND

    def __init__(
        self, settings: KafkaSettings | None = None, *, topic_prefix: str = "wow.", service: str = "wow"
    ):
        self.settings = settings or KafkaSettings()
        self.topic = f"{topic_prefix}{service}.wait"
        self.process_id = secrets.token_hex(16)
        self._key = self.process_id.encode()
        self._accepted = re.compile(re.escape(topic_prefix) + r"[A-Za-z0-9._-]{1,200}\.wait")
        self._common = common_config(self.settings)
        self._topics = KafkaTopics(self.settings, self._common)
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        # the topics the producer's client tracks (see _tracked)
        self._tracked: set[str] = set()

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> KafkaWaitNotifier:
        kafka = settings.section("kafka", KafkaSettings)
        prefix = kafka.topic_prefix if kafka.topic_prefix is not None else settings.messaging.topic_prefix
        service = getattr(settings, "service_name", None) or "wow"
        return cls(kafka, topic_prefix=prefix, service=str(service))

    async def _started(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(**producer_config(self.settings, self._common))
                try:
                    await producer.start()
                except KafkaError as error:
                    with contextlib.suppress(Exception):
                        await producer.stop()
                    raise KafkaConnectError(
                        f"wait notifier: no broker of {self.settings.bootstrap_servers} answered: {error}",
                        error,
                    ) from error
                self._producer = producer
            return self._producer

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        """Create the service's signal topic if needed, read one partition of it from its
        end; returns once the reading position is fixed (nothing acknowledged later is
        missed)."""
        producer = await self._started()
        await self._topics.ensure((self.topic,), {"retention.ms": str(self.settings.wait_retention_ms)})
        await self._track(producer, self.topic)
        partitions = sorted(await producer.partitions_for(self.topic))
        partition = random.choice(partitions)
        # The transport's fetch wait, not aiokafka's 500 ms: a broker may hold an empty
        # fetch that long (tansu does), and every signal arriving meanwhile waits for it.
        consumer = AIOKafkaConsumer(
            **self._common,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=self.settings.fetch_max_wait_ms,
        )
        await consumer.start()
        self._consumer = consumer
        assigned = TopicPartition(self.topic, partition)
        consumer.assign([assigned])
        await consumer.seek_to_end(assigned)
        await consumer.position(assigned)
        self._reader = asyncio.get_running_loop().create_task(self._read(consumer, sink), name=self.topic)
        return WaitEndpoint(KIND, f"{self.topic}/{partition}/{self.process_id}")

    async def _read(self, consumer: AIOKafkaConsumer, sink: WaitSignalSink) -> None:
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=1000)
            except KafkaError as error:
                log.warning("reading wait signals of %s failed: %r", self.topic, error)
                await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
                continue
            for records in batches.values():
                for record in records:
                    if record.key == self._key and record.value is not None:
                        sink(record.value)  # never raises

    def _target(self, endpoint: WaitEndpoint) -> tuple[str, int, bytes]:
        topic, _, rest = endpoint.address.partition("/")
        partition, _, process = rest.partition("/")
        if (
            self._accepted.fullmatch(topic) is None
            or not partition.isdigit()
            or len(partition) > 6
            or re.fullmatch(r"[0-9a-f]{32}", process) is None
        ):
            raise ValueError(f"not a wait endpoint of this prefix: {endpoint.address[:160]!r}")
        return topic, int(partition), process.encode()

    async def _track(self, producer: AIOKafkaProducer, topic: str) -> None:
        """Make the producer's client track ``topic`` (once per topic).

        aiokafka's client asks for every topic's metadata while it tracks none, so a
        topic that existed when the producer started is known without being tracked, and
        the first refresh after another topic is tracked drops it: a signal queued for it
        meanwhile has no leader until it expires at ``request_timeout_ms`` (the caller's
        wait hangs). The transport's producer does the same
        (:meth:`wow_kafka.lanes.PartitionLanes.partitions_for`).
        """
        if topic not in self._tracked:
            await producer.client.add_topic(topic)
            self._tracked.add(topic)

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        """Produce the signal to the endpoint's topic and partition, keyed by its process
        id; returns on the broker's acknowledgement (an endpoint of another form is
        refused with ``ValueError``)."""
        topic, partition, key = self._target(endpoint)
        producer = await self._started()
        await self._track(producer, topic)
        await producer.send_and_wait(topic, encode_signal(signal).encode(), key=key, partition=partition)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()
        self._consumer = self._producer = None
        self._tracked.clear()
        await self._topics.close()
