"""Concurrent sends go out in one batch per partition (wow_kafka.lanes), with the
guarantees of one send per record: SENT only for an acknowledged record, a failed batch
fails every sender in it, a record too large fails alone, per-key order, close flushes,
a cancelled sender affects no other."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.protocol.produce import ProduceRequest

from tests.wow_kafka.conftest import test_settings
from tests.wow_kafka.helpers import message
from wow_kafka import KafkaSettings, KafkaTransport
from wow_kafka.errors import KafkaSendError

pytestmark = pytest.mark.kafka

SENDERS = 50


def producer_of(transport: KafkaTransport) -> AIOKafkaProducer:
    producer = transport._producer
    assert producer is not None
    return producer


@contextlib.contextmanager
def produce_requests(
    producer: AIOKafkaProducer, fail: BaseException | None = None
) -> Iterator[list[dict[str, int]]]:
    """Record, per produce request, how many records each partition's batch held; with
    ``fail``, the requests raise it instead of reaching the broker (aiokafka fails their
    batches: ``KafkaError`` is not retriable)."""
    client = producer.client
    real = client.send
    seen: list[dict[str, int]] = []

    async def send(node_id: int, request: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(request, ProduceRequest):
            seen.append(
                {
                    f"{topic}/{partition}": _count(data)
                    for topic, parts in request._topics
                    for partition, data in parts
                }
            )
            if fail is not None:
                raise fail
        return await real(node_id, request, *args, **kwargs)

    client.send = send
    try:
        yield seen
    finally:
        client.send = real


def _count(data: bytes) -> int:
    # DefaultRecordBatch v2: the record count is the last int32 of the 61-byte header
    return int.from_bytes(data[57:61], "big", signed=True)


async def read_all(settings: KafkaSettings, topic: str, expected: int) -> list[Any]:
    """Every record of ``topic`` from the beginning, in partition then offset order."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=None, fetch_max_wait_ms=50
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records: list[Any] = []
        async with asyncio.timeout(20):
            while len(records) < expected:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    records.extend(batch)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


@pytest.fixture
async def sized(kafka_bootstrap: str) -> AsyncIterator[KafkaTransport]:
    transport = KafkaTransport(test_settings(kafka_bootstrap, partitions=3, max_request_size=20_000))
    try:
        yield transport
    finally:
        await transport.close()


def topic_of(transport: KafkaTransport, name: str) -> str:
    return f"{transport.settings.topic_prefix}batches.{name}.command"


async def test_concurrent_sends_go_out_in_one_batch_per_partition(sized: KafkaTransport) -> None:
    topic = topic_of(sized, "one")
    await sized.send(message(topic, "warm", "0"))
    with produce_requests(producer_of(sized)) as requests:
        await asyncio.gather(*(sized.send(message(topic, f"k{n}", str(n))) for n in range(SENDERS)))
    records = sum(count for request in requests for count in request.values())
    batches = sum(len(request) for request in requests)
    assert records == SENDERS
    assert batches <= 3 * 2, requests  # about one batch per partition, not one per record


async def test_a_failed_batch_fails_every_sender_in_it(sized: KafkaTransport) -> None:
    topic = topic_of(sized, "failed")
    await sized.send(message(topic, "warm", "0"))
    with produce_requests(producer_of(sized), fail=KafkaError("refused by the test")) as requests:
        results = await asyncio.gather(
            *(sized.send(message(topic, f"k{n}", str(n))) for n in range(SENDERS)), return_exceptions=True
        )
    assert requests, "no produce request was made"
    assert all(isinstance(result, KafkaSendError) for result in results), results
    assert all(isinstance(result.__cause__, KafkaError) for result in results)
    assert all("refused by the test" in str(result) for result in results)
    # nothing was reported sent, and nothing reached the broker but the warm-up record
    await sized.send(message(topic, "after", "1"))
    assert {record.key for record in await read_all(sized.settings, topic, 2)} == {b"warm", b"after"}


async def test_a_record_too_large_fails_alone(sized: KafkaTransport) -> None:
    topic = topic_of(sized, "large")
    await sized.send(message(topic, "warm", "0"))  # the topic known: every send below queues at once
    too_large = "x" * 25_000  # over max_request_size (20,000)
    larger_than_a_batch = "y" * 18_000  # over max_batch_size (16,384), under max_request_size
    payloads = [str(n) for n in range(SENDERS)]
    payloads[10] = too_large
    payloads[20] = larger_than_a_batch
    results = await asyncio.gather(
        *(sized.send(message(topic, "same-key", payload)) for payload in payloads), return_exceptions=True
    )
    failed = [n for n, result in enumerate(results) if result is not None]
    assert failed == [10], results
    error = results[10]
    assert isinstance(error, KafkaSendError)
    assert isinstance(error.__cause__, MessageSizeTooLargeError)
    assert "max_request_size" in str(error)
    records = await read_all(sized.settings, topic, SENDERS)
    assert [r.value.decode() for r in records if r.key == b"same-key"] == [
        p for n, p in enumerate(payloads) if n != 10
    ]


async def test_order_within_a_partition_under_50_concurrent_senders(sized: KafkaTransport) -> None:
    topic = topic_of(sized, "order")
    await sized.send(message(topic, "warm", "0"))  # the topic known: each send queues in its first step
    rounds = 8

    async def sender(n: int) -> None:
        # 10 aggregates shared by the 50 senders: each key is sent to concurrently
        for seq in range(rounds):
            await sized.send(message(topic, f"agg-{n % 10}", f"{n}:{seq}"))

    # and one key sent to by all 50 at once, in the order of the calls
    same = [sized.send(message(topic, "one-key", str(n))) for n in range(SENDERS)]
    await asyncio.gather(*(sender(n) for n in range(SENDERS)), *same)
    records = await read_all(sized.settings, topic, SENDERS * rounds + SENDERS + 1)
    by_key: dict[bytes, list[str]] = defaultdict(list)
    partitions: dict[bytes, set[int]] = defaultdict(set)
    for record in records:
        by_key[record.key].append(record.value.decode())
        partitions[record.key].add(record.partition)
    assert all(len(found) == 1 for found in partitions.values()), partitions
    assert by_key[b"one-key"] == [str(n) for n in range(SENDERS)]
    for key, values in by_key.items():
        if key in (b"one-key", b"warm"):
            continue
        per_sender: dict[str, list[int]] = defaultdict(list)
        for value in values:
            sender_id, seq = value.split(":")
            per_sender[sender_id].append(int(seq))
        assert all(seqs == list(range(rounds)) for seqs in per_sender.values()), (key, per_sender)


async def test_close_flushes_the_records_still_queued(kafka_bootstrap: str) -> None:
    settings = test_settings(kafka_bootstrap, partitions=3)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}batches.close.command"
    await transport.send(message(topic, "warm", "0"))
    sends = [asyncio.create_task(transport.send(message(topic, f"k{n}", str(n)))) for n in range(SENDERS)]
    await asyncio.sleep(0)  # every sender queued its record; no lane has submitted yet
    await transport.close()
    assert [task.exception() for task in sends if task.done()] == [None] * SENDERS
    assert len(await read_all(settings, topic, SENDERS + 1)) == SENDERS + 1


async def test_a_cancelled_sender_neither_loses_nor_fails_the_others(sized: KafkaTransport) -> None:
    topic = topic_of(sized, "cancel")
    await sized.send(message(topic, "warm", "0"))
    sends = [asyncio.create_task(sized.send(message(topic, "key", str(n)))) for n in range(SENDERS)]
    await asyncio.sleep(0)  # queued, not yet in a batch
    sends[7].cancel()
    sends[8].cancel()
    results = await asyncio.gather(*sends, return_exceptions=True)
    assert [n for n, r in enumerate(results) if r is not None] == [7, 8]
    assert all(isinstance(results[n], asyncio.CancelledError) for n in (7, 8))
    values = [r.value.decode() for r in await read_all(sized.settings, topic, SENDERS - 1) if r.key == b"key"]
    assert values == [str(n) for n in range(SENDERS) if n not in (7, 8)]  # queued and cancelled: not sent


async def test_a_topic_known_from_the_first_metadata_stays_known_after_another_topic(
    kafka_bootstrap: str,
) -> None:
    """The cause of the cross-process wait test's timeouts: aiokafka's client asks for
    every topic's metadata while it tracks none, so a topic that existed when the producer
    started is known without being tracked; the refresh after the first tracked topic
    dropped it, and a batch queued for it meanwhile had no leader until it expired."""
    settings = test_settings(kafka_bootstrap, partitions=3)
    existing = f"{settings.topic_prefix}batches.existing.command"
    other = KafkaTransport(settings)
    try:
        await other.send(message(existing, "k", "created by another process"))
    finally:
        await other.close()
    transport = KafkaTransport(settings)
    try:
        await transport.start()
        producer = producer_of(transport)
        assert producer.client.cluster.partitions_for_topic(existing), "known from the first metadata"
        await transport.send(message(existing, "k", "1"))
        await transport.send(message(f"{settings.topic_prefix}batches.new.command", "k", "2"))
        await producer.client.force_metadata_update()
        assert producer.client.cluster.partitions_for_topic(existing), "dropped by the refresh"
        await asyncio.wait_for(transport.send(message(existing, "k", "3")), 5)
    finally:
        await transport.close()


async def test_concurrent_sends_of_one_key_to_a_new_topic_keep_the_order_of_the_calls(
    sized: KafkaTransport,
) -> None:
    """The topic is not known yet (nor is the producer started): every sender waits for its
    creation and metadata, and the records still go out in the order of the calls."""
    topic = topic_of(sized, "new-order")
    await asyncio.gather(*(sized.send(message(topic, "one-key", str(n))) for n in range(SENDERS)))
    records = await read_all(sized.settings, topic, SENDERS)
    assert [r.value.decode() for r in records] == [str(n) for n in range(SENDERS)]


@contextlib.contextmanager
def slow_first_add_topic(producer: AIOKafkaProducer, delay: float = 0.2) -> Iterator[list[str]]:
    """Delay the first ``client.add_topic`` call (the first sender's, when each sender looks
    the topic up): what the scheduling of concurrent lookups may do, made certain."""
    client = producer.client
    real = client.add_topic
    calls: list[str] = []

    def add_topic(topic: str) -> Any:  # aiokafka calls it without awaiting too: a future
        calls.append(topic)
        if len(calls) > 1:
            return real(topic)

        async def later() -> Any:
            await asyncio.sleep(delay)
            return await real(topic)

        return asyncio.ensure_future(later())

    client.add_topic = add_topic
    try:
        yield calls
    finally:
        client.add_topic = real


async def test_sends_of_one_key_keep_the_order_of_the_calls_when_the_first_lookup_is_slow(
    sized: KafkaTransport,
) -> None:
    topic = topic_of(sized, "slow-lookup")
    await sized.start()
    with slow_first_add_topic(producer_of(sized)) as calls:
        sends = [asyncio.create_task(sized.send(message(topic, "one-key", str(n)))) for n in range(SENDERS)]
        await asyncio.gather(*sends)
    assert set(calls) == {topic}
    records = await read_all(sized.settings, topic, SENDERS)
    assert [r.value.decode() for r in records] == [str(n) for n in range(SENDERS)]


async def test_a_failed_metadata_lookup_fails_every_pending_sender(sized: KafkaTransport) -> None:
    topic = topic_of(sized, "lookup-fails")
    await sized.start()
    producer = producer_of(sized)
    real = producer.partitions_for
    calls: list[str] = []

    async def partitions_for(name: str) -> Any:
        calls.append(name)
        await asyncio.sleep(0.05)
        raise KafkaError("no metadata, said the test")

    producer.partitions_for = partitions_for
    try:
        results = await asyncio.gather(
            *(sized.send(message(topic, "k", str(n))) for n in range(SENDERS)), return_exceptions=True
        )
    finally:
        producer.partitions_for = real
    assert all(isinstance(result, KafkaSendError) for result in results), results
    assert all(isinstance(result.__cause__, KafkaError) for result in results)
    assert all("said the test" in str(result) for result in results)
    assert calls == [topic], "one lookup for every sender waiting for it"
    # nothing was sent, and the next send looks the topic up again
    await asyncio.wait_for(sized.send(message(topic, "k", "after")), 10)
    assert [r.value for r in await read_all(sized.settings, topic, 1)] == [b"after"]


async def test_a_cancelled_pending_sender_leaves_the_others_in_order(sized: KafkaTransport) -> None:
    topic = topic_of(sized, "cancel-pending")
    await sized.start()
    with slow_first_add_topic(producer_of(sized)):
        sends = [asyncio.create_task(sized.send(message(topic, "key", str(n)))) for n in range(SENDERS)]
        await asyncio.sleep(0.05)  # every record waits for the topic's lookup (0.2 s)
        sends[0].cancel()  # the first sender: the one that started the lookup
        sends[7].cancel()
        results = await asyncio.gather(*sends, return_exceptions=True)
    assert [n for n, r in enumerate(results) if r is not None] == [0, 7], results
    assert all(isinstance(results[n], asyncio.CancelledError) for n in (0, 7))
    values = [r.value.decode() for r in await read_all(sized.settings, topic, SENDERS - 2)]
    assert values == [str(n) for n in range(SENDERS) if n not in (0, 7)]  # pending and cancelled: not sent


async def test_close_flushes_the_records_still_waiting_for_their_topic(kafka_bootstrap: str) -> None:
    settings = test_settings(kafka_bootstrap, partitions=3)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}batches.close-pending.command"
    await transport.start()
    with slow_first_add_topic(producer_of(transport)):
        sends = [asyncio.create_task(transport.send(message(topic, "key", str(n)))) for n in range(SENDERS)]
        await asyncio.sleep(0.05)  # every record waits for the topic's lookup (0.2 s)
        await asyncio.wait_for(transport.close(), 10)
    assert [task.exception() for task in sends if task.done()] == [None] * SENDERS
    values = [r.value.decode() for r in await read_all(settings, topic, SENDERS)]
    assert values == [str(n) for n in range(SENDERS)]
