"""PartitionLanes over a stand-in producer: no record is left waiting, whatever fails."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaError, KafkaTimeoutError, ProducerClosed
from aiokafka.producer.message_accumulator import BatchBuilder

from wow_kafka.lanes import PartitionLanes


class Producer:
    """Enough of AIOKafkaProducer for the lanes: two partitions, ``send_batch`` scripted."""

    def __init__(self) -> None:
        cluster = SimpleNamespace(
            partitions_for_topic=lambda topic: {0, 1}, add_listener=print, remove_listener=print
        )
        self.client = SimpleNamespace(cluster=cluster, add_topic=self._add_topic)
        self.submitted: list[tuple[int, int, asyncio.Future[Any]]] = []
        self.raise_on_submit: BaseException | None = None

    def _serialize(self, key: bytes, value: bytes, headers: list[Any]) -> tuple[bytes, bytes]:
        if len(value) > 1000:
            raise KafkaError("too large")
        return key, value

    def _partitioner(self, key: bytes, partitions: list[int], available: list[int]) -> int:
        return partitions[0]

    def _add_topic(self, topic: str) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1}

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(300, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> asyncio.Future[Any]:
        await asyncio.sleep(0)
        if self.raise_on_submit is not None:
            error, self.raise_on_submit = self.raise_on_submit, None
            raise error
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.submitted.append((partition, batch.record_count(), future))
        return future


async def lanes_over(producer: Producer) -> PartitionLanes:
    lanes = PartitionLanes(producer)  # type: ignore[arg-type]
    await lanes.partitions_for("t")
    return lanes


async def test_records_queued_together_share_batches_of_the_batch_size() -> None:
    producer = Producer()
    lanes = await lanes_over(producer)
    futures = [lanes.queue("t", b"k", b"v" * 50, 1) for _ in range(10)]
    await asyncio.sleep(0.01)
    counts = [count for _, count, _ in producer.submitted]
    assert sum(counts) == 10
    assert len(counts) > 1
    assert all(count > 1 for count in counts), counts
    assert not any(future.done() for future in futures)  # nothing is SENT before its ack
    producer.submitted[0][2].set_result(None)
    await asyncio.sleep(0)
    assert [future.done() for future in futures] == [True] * counts[0] + [False] * (10 - counts[0])
    producer.submitted[1][2].set_exception(KafkaTimeoutError())
    await asyncio.sleep(0)
    failed = futures[counts[0] : counts[0] + counts[1]]
    assert all(isinstance(future.exception(), KafkaTimeoutError) for future in failed)
    assert len({id(future.exception()) for future in failed}) == len(failed)  # a copy each


async def test_a_batch_that_cannot_be_submitted_fails_its_records_and_the_lane_goes_on() -> None:
    producer = Producer()
    lanes = await lanes_over(producer)
    producer.raise_on_submit = AssertionError("Unrecognized partition")
    first = [lanes.queue("t", b"k", b"v", 1) for _ in range(3)]
    await asyncio.gather(*first, return_exceptions=True)
    assert all(isinstance(future.exception(), KafkaError) for future in first)
    assert "Unrecognized partition" in str(first[0].exception())
    later = lanes.queue("t", b"k", b"v", 1)
    await asyncio.sleep(0.01)
    producer.submitted[-1][2].set_result(None)
    await later


async def test_a_record_too_large_is_refused_when_queued_alone() -> None:
    producer = Producer()
    lanes = await lanes_over(producer)
    small = lanes.queue("t", b"k", b"v", 1)
    with pytest.raises(KafkaError, match="too large"):
        lanes.queue("t", b"k", b"v" * 2000, 1)
    await asyncio.sleep(0.01)
    producer.submitted[0][2].set_result(None)
    await small


async def test_close_waits_for_the_lanes_then_refuses_records() -> None:
    producer = Producer()
    lanes = await lanes_over(producer)
    futures = [lanes.queue("t", str(n).encode(), b"v", 1) for n in range(5)]
    await lanes.close()
    assert sum(count for _, count, _ in producer.submitted) == 5
    with pytest.raises(ProducerClosed):
        lanes.queue("t", b"k", b"v", 1)
    for _, _, future in producer.submitted:
        future.set_exception(ProducerClosed())
    await asyncio.sleep(0)
    assert all(isinstance(future.exception(), ProducerClosed) for future in futures)
