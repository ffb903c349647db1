"""``KafkaLogReader``: every partition of some topics from the first record, in no group.

A reader of a topic kept as a log (the cluster intake's ledger topic), for a process that
reads the whole topic each time it starts: it joins no consumer group (``group_id=None``),
assigns itself every partition of its topics, seeks to the beginning and fetches from
there, and commits nothing. So nothing is left on the broker when it closes: no group, no
committed offsets, however many processes ever started. A record's ``ack()`` does nothing
(there is no group to acknowledge to); the next reader starts at the beginning again.

It is a :class:`~wow_core.transport.spi.TransportReceiver`: ``ready()`` returns once every
partition's start is fixed at its first retained record (a record sent after ``ready()``
returns is read, and so is every one before it); nothing is yielded before
``open_processing()``. A failed fetch (a broker restart) is logged and fetched again after
``retry_backoff_ms``; ``close()`` ends the iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from wow_kafka.errors import KafkaConnectError
from wow_kafka.receiver import stop_consumer
from wow_kafka.record import KafkaRecord
from wow_kafka.settings import KafkaSettings
from wow_kafka.topics import KafkaTopics

log = logging.getLogger(__name__)


class KafkaLogReader:
    """Reads every partition of ``topics`` from its first record, in no group (module doc)."""

    def __init__(
        self,
        topics: Sequence[str],
        settings: KafkaSettings,
        common: dict[str, Any],
        topic_admin: KafkaTopics,
        on_close: Callable[[KafkaLogReader], None] | None = None,
    ) -> None:
        if not topics:
            raise ValueError("a log reader names no topic")
        self.topics: tuple[str, ...] = tuple(dict.fromkeys(topics))
        self._settings = settings
        self._common = common
        self._topic_admin = topic_admin
        self._on_close = on_close
        self._consumer: AIOKafkaConsumer | None = None
        self._start_lock = asyncio.Lock()
        self._records: deque[KafkaRecord] = deque()
        self._processing = asyncio.Event()
        self._closed = False
        self.partitions: tuple[TopicPartition, ...] = ()

    async def ready(self) -> None:
        """Assign every partition and fix its start at the first retained record."""
        async with self._start_lock:
            if self._consumer is not None or self._closed:
                return
            counts = await self._topic_admin.partition_counts(self.topics)
            partitions = tuple(
                TopicPartition(topic, number) for topic in self.topics for number in range(counts[topic])
            )
            consumer = AIOKafkaConsumer(
                **self._common,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=self._settings.fetch_max_wait_ms,
                max_partition_fetch_bytes=self._settings.max_partition_fetch_bytes,
            )
            try:
                await consumer.start()
                consumer.assign(list(partitions))
                await consumer.seek_to_beginning(*partitions)
                for partition in partitions:
                    await consumer.position(partition)  # resolved now, not at the first fetch
            except KafkaError as error:
                with contextlib.suppress(Exception):
                    await consumer.stop()
                raise KafkaConnectError(
                    f"the log reader of {', '.join(self.topics)} could not start at "
                    f"{self._settings.bootstrap_servers}: {error}",
                    error,
                ) from error
            self.partitions = partitions
            self._consumer = consumer

    def open_processing(self) -> None:
        self._processing.set()

    def __aiter__(self) -> KafkaLogReader:
        return self

    async def __anext__(self) -> KafkaRecord:
        backoff = self._settings.retry_backoff_ms / 1000
        while not self._records:
            if self._closed:
                raise StopAsyncIteration
            await self._processing.wait()
            await self.ready()
            consumer = self._consumer
            if consumer is None:
                raise StopAsyncIteration  # closed while starting
            try:
                batches = await consumer.getmany(timeout_ms=self._settings.poll_timeout_ms)
            except KafkaError as error:
                if self._closed:
                    raise StopAsyncIteration from None
                log.warning("reading %s failed, reading again: %r", ", ".join(self.topics), error)
                await asyncio.sleep(backoff)
                continue
            for partition in sorted(batches, key=lambda tp: (tp.topic, tp.partition)):
                self._records.extend(KafkaRecord(None, None, record) for record in batches[partition])
        return self._records.popleft()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._processing.set()
        async with self._start_lock:
            consumer, self._consumer = self._consumer, None
        self._records.clear()
        try:
            if consumer is not None:
                await stop_consumer(consumer)
        finally:
            if self._on_close is not None:
                self._on_close(self)
