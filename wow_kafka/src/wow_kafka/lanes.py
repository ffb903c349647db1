"""``PartitionLanes``: concurrent sends handed to aiokafka in one batch per partition.

Each record is checked and partitioned by the producer's own code when it is queued
(``max_request_size``, the murmur2 partitioner of the key), then waits in its
partition's *lane*. One task per lane with records takes everything queued so far,
builds batches of at most ``max_batch_size`` bytes with ``producer.create_batch()`` and
submits them with ``producer.send_batch``; while aiokafka still holds a batch of that
partition (``send_batch`` waits for it to be drained) the lane keeps queueing, so the
next batch takes every record that arrived meanwhile. One future per batch, not per
record.

Guarantees, the same as one ``producer.send`` per record:

* a record's future succeeds only when the broker acknowledged the batch holding it
  (with ``acks=all``, every in-sync replica); a batch the broker refuses, or that
  aiokafka gives up on, fails every record in it with that error, and a batch that
  could not be submitted fails its records with the reason;
* records of one partition reach the producer in the order they were queued, one
  batch after another (aiokafka keeps one request in flight per partition and puts a
  retried batch back at the head), so one key keeps its order;
* a record larger than ``max_request_size`` is refused when it is queued, alone;
* a sender cancelled while its record is still queued takes the record out (it is not
  sent); once its batch is submitted the record goes out with its neighbours. Either
  way no other record is affected;
* :meth:`PartitionLanes.close` waits until every lane has submitted what it holds, so
  the producer's ``stop()`` then flushes or fails all of it; a lane that stops for any
  reason fails the records still queued: no future is left pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, ProducerClosed, UnknownTopicOrPartitionError
from aiokafka.structs import TopicPartition

log = logging.getLogger(__name__)


Headers = Sequence[tuple[str, bytes]]
"""Kafka record headers: (key, value) pairs."""

NO_HEADERS: Headers = ()


class _Record:
    __slots__ = ("future", "headers", "key", "timestamp_ms", "value")

    def __init__(
        self, key: bytes, value: bytes, timestamp_ms: int, future: asyncio.Future[None], headers: Headers
    ) -> None:
        self.key = key
        self.value = value
        self.timestamp_ms = timestamp_ms
        self.future = future
        self.headers = headers


class _Lane:
    """Records of one partition not yet handed to the producer, and the task handing them."""

    __slots__ = ("queued", "task")

    def __init__(self) -> None:
        self.queued: list[_Record] = []
        self.task: asyncio.Task[None] | None = None


def _fail(records: list[_Record], error: BaseException) -> None:
    for record in records:
        if not record.future.done():
            # a copy each: one exception raised by many awaiters would pile up tracebacks
            record.future.set_exception(copy.copy(error))


def _settle(records: list[_Record], acknowledged: asyncio.Future[Any]) -> None:
    """The done callback of a submitted batch: its outcome is every record's outcome."""
    if acknowledged.cancelled():
        _fail(records, KafkaError("the batch's delivery was cancelled"))
        return
    error = acknowledged.exception()
    if error is not None:
        _fail(records, error)
        return
    for record in records:
        if not record.future.done():
            record.future.set_result(None)


def _appended(builder: Any, record: _Record) -> bool:
    """Whether ``builder`` (a ``producer.create_batch()``) took ``record`` (``False``: full)."""
    added = builder.append(
        timestamp=record.timestamp_ms,
        key=record.key,
        value=record.value,
        headers=list(record.headers) if record.headers else [],
    )
    return added is not None


class _Topic:
    """A tracked topic's partitions as the producer's partitioner takes them, and the
    partitions of its recent keys (computed by that partitioner)."""

    __slots__ = ("by_key", "partitions")

    def __init__(self, partitions: list[int]) -> None:
        self.partitions = partitions
        self.by_key: dict[bytes, TopicPartition] = {}


KEYS_CACHED = 4096
"""Partitions of at most this many keys are remembered per topic (then forgotten at once)."""


class PartitionLanes:
    """Queues records per topic partition and submits each lane's records as batches."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self._lanes: dict[TopicPartition, _Lane] = {}
        self._closing = False
        # aiokafka's own per-record size check and partitioner, so a record is judged and
        # placed exactly as producer.send would
        self._serialize: Callable[..., tuple[bytes, bytes]] = producer._serialize
        self._partitioner: Callable[[bytes, list[int], list[int]], int] = producer._partitioner
        self._cluster: Any = producer.client.cluster
        self._tracked: set[str] = set()
        # the partitions of the tracked topics, as of the last metadata update
        self._topics: dict[str, _Topic] = {}
        self._cluster.add_listener(self._metadata_updated)

    def _metadata_updated(self, cluster: Any) -> None:
        self._topics.clear()  # a topic's partitions may have changed: looked up again

    def partitions_known(self, topic: str) -> bool:
        """Whether ``topic`` is tracked and the producer's metadata has its partitions
        (else await :meth:`partitions_for` before :meth:`queue`)."""
        return topic in self._topics or self._known(topic) is not None

    def _known(self, topic: str) -> _Topic | None:
        if topic not in self._tracked:
            return None
        partitions = self._cluster.partitions_for_topic(topic)
        if not partitions:
            return None
        known = self._topics[topic] = _Topic(list(partitions))  # the order producer._partition uses
        return known

    async def partitions_for(self, topic: str) -> None:
        """Make the producer's client track ``topic``, then wait until its metadata has it.

        Tracking is what keeps a queued batch deliverable: aiokafka's client asks for
        every topic's metadata while it tracks none, so a topic can be known without being
        tracked, and the first refresh after another topic is tracked drops it. A batch
        already in the producer for it then has no leader, and no refresh brings it back
        (they ask for the tracked topics only) until it expires at ``request_timeout_ms``.
        """
        if topic not in self._tracked:
            await self._producer.client.add_topic(topic)
            self._tracked.add(topic)
        await self._producer.partitions_for(topic)

    def queue(
        self, topic: str, key: bytes, value: bytes, timestamp_ms: int, headers: Headers = NO_HEADERS
    ) -> asyncio.Future[None]:
        """Queue one record (with ``headers``, none by default) in its partition's lane;
        the future completes with the broker's acknowledgement of its batch, or fails
        with the error that stopped it.

        Raises ``MessageSizeTooLargeError`` at once for a record over
        ``max_request_size`` (nothing is queued), ``ProducerClosed`` after :meth:`close`.
        ``UnknownTopicOrPartitionError`` when the topic's partitions are not known (see
        :meth:`partitions_known`).
        """
        if self._closing:
            raise ProducerClosed()
        key, value = self._serialize(key, value, list(headers) if headers else [])
        known = self._topics.get(topic) or self._known(topic)
        if known is None:
            raise UnknownTopicOrPartitionError(f"{topic} is not in the producer's metadata")
        tp = known.by_key.get(key)
        if tp is None:
            if len(known.by_key) >= KEYS_CACHED:
                known.by_key.clear()
            # a key is given, so the partitioner does not look at the available partitions
            partition = self._partitioner(key, known.partitions, known.partitions)
            tp = known.by_key[key] = TopicPartition(topic, partition)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane = self._lanes.get(tp)
        if lane is None:
            lane = self._lanes[tp] = _Lane()
        lane.queued.append(_Record(key, value, timestamp_ms, future, headers))
        if lane.task is None:
            lane.task = asyncio.get_running_loop().create_task(self._drain(tp, lane), name=f"kafka-lane {tp}")
        return future

    async def _drain(self, tp: TopicPartition, lane: _Lane) -> None:
        try:
            while lane.queued:
                records, lane.queued = lane.queued, []
                await self._submit(tp, records)
        except BaseException as error:
            # only a cancellation gets here (_submit settles its own records): fail the rest
            _fail(lane.queued, error if isinstance(error, KafkaError) else KafkaError(repr(error)))
            lane.queued = []
            raise
        finally:
            # no await since the loop's last check: a record queued from now on starts a new task
            lane.task = None
            if self._lanes.get(tp) is lane:
                del self._lanes[tp]

    async def _submit(self, tp: TopicPartition, records: list[_Record]) -> None:
        """Submit ``records`` in batches, in order; every record not in a submitted batch
        is failed here, those in one are settled by the batch's future."""
        try:
            batches = self._batches(records)
        except Exception as error:
            log.exception("building a Kafka batch for %s failed", tp)
            _fail(records, KafkaError(f"the batch could not be built: {error!r}"))
            return
        for index, (builder, members) in enumerate(batches):
            try:
                acknowledged = await self._producer.send_batch(builder, tp.topic, partition=tp.partition)
            except KafkaError as error:  # no metadata in time, the producer closed or failed
                _fail(members, error)
                continue
            except asyncio.CancelledError:
                for _, unsent in batches[index:]:
                    _fail(unsent, KafkaError("the send was cancelled before its batch was submitted"))
                raise
            except Exception as error:  # aiokafka's assertion on a partition gone from metadata
                _fail(members, KafkaError(f"the batch could not be submitted: {error!r}"))
                continue
            acknowledged.add_done_callback(functools.partial(_settle, members))

    def _batches(self, records: list[_Record]) -> list[tuple[Any, list[_Record]]]:
        """Builders of at most ``max_batch_size`` bytes (a first record always fits), in
        order; a record whose sender was cancelled meanwhile is left out."""
        batches: list[tuple[Any, list[_Record]]] = []
        builder: Any = None
        members: list[_Record] = []
        for record in records:
            if record.future.done():
                continue
            if builder is None or not _appended(builder, record):
                builder = self._producer.create_batch()
                members = []
                batches.append((builder, members))
                if not _appended(builder, record):
                    raise AssertionError("aiokafka refused the first record of a batch")
            members.append(record)
        return batches

    async def close(self) -> None:
        """Refuse new records; return when every lane has submitted what it held."""
        self._closing = True
        with contextlib.suppress(KeyError):
            self._cluster.remove_listener(self._metadata_updated)
        while self._lanes:
            tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
            if not tasks:
                break
            await asyncio.gather(*tasks, return_exceptions=True)
