"""KafkaTransport against a real broker: send, receive, readiness, admission, close."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.wow_kafka.conftest import test_settings, unique
from tests.wow_kafka.helpers import Collector, message
from wow_core.messaging import BusClosedError
from wow_core.model import NamedAggregate, TopicKind
from wow_kafka import KafkaSettings, KafkaTransport

pytestmark = pytest.mark.kafka


async def test_send_then_receive_carries_topic_key_payload_timestamp(transport: KafkaTransport) -> None:
    topic = transport.naming.topic(NamedAggregate("shop", "order"), TopicKind.COMMAND)
    assert topic.endswith("shop.order.command")
    receiver = transport.open(unique("g"), [topic])
    await receiver.ready()
    receiver.open_processing()
    collector = Collector(receiver)
    sent = message(topic, "order-1", '{"hello": "world"}')
    await transport.send(sent)
    [record] = await collector.count(1)
    assert (record.topic, record.key, record.payload, record.timestamp) == (
        sent.topic,
        sent.key,
        sent.payload,
        sent.timestamp,
    )
    assert record.delivery_count == 1
    assert record.position == f"{record.partition}:{record.offset}"
    await collector.stop()


async def test_the_receiver_buffers_a_bounded_number_of_records(kafka_bootstrap: str) -> None:
    settings = test_settings(kafka_bootstrap, partitions=1, buffered_records=10, max_poll_records=5)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}buffer.bounded.command"
    try:
        receiver = transport.open(unique("bounded"), [topic])
        await receiver.ready()
        await transport.send_many([message(topic, f"k{i}", str(i)) for i in range(60)])
        receiver.open_processing()
        seen: list[str] = []
        largest = 0
        async for record in receiver:
            largest = max(largest, receiver.buffered)
            seen.append(record.payload)
            await record.ack()
            if len(seen) == 60:
                break
        assert seen == [str(i) for i in range(60)]
        assert largest <= 10 + 5  # the bound plus at most one poll (the batch being handed out aside)
    finally:
        await transport.close()


async def test_send_and_open_after_close_raise_bus_closed(kafka_settings: KafkaSettings) -> None:
    transport = KafkaTransport(kafka_settings)
    await transport.start()
    await transport.close()
    with pytest.raises(BusClosedError):
        await transport.send(message("wow.a.b.command", "k", "v"))
    with pytest.raises(BusClosedError):
        transport.open("g", ["wow.a.b.command"])
    await transport.close()  # idempotent


async def test_undecodable_bytes_survive_a_round_trip(transport: KafkaTransport) -> None:
    """A record that is not UTF-8 is handed on with its bytes intact (for dead letters)."""
    topic = f"{transport.settings.topic_prefix}bytes.raw.command"
    copy = f"{transport.settings.topic_prefix}bytes.copy.command"
    receiver = transport.open(unique("bytes"), [topic])
    await receiver.ready()
    receiver.open_processing()
    raw = AIOKafkaProducer(bootstrap_servers=transport.settings.bootstrap_list)
    await raw.start()
    try:
        await raw.send_and_wait(topic, key=b"\xc3\x28", value=b"\xff\x00payload\x80")
    finally:
        await raw.stop()
    record = await asyncio.wait_for(anext(aiter(receiver)), 30)
    await transport.send(message(copy, record.key, record.payload))
    await record.ack()
    reader = AIOKafkaConsumer(
        copy,
        bootstrap_servers=transport.settings.bootstrap_list,
        group_id=unique("reader"),
        auto_offset_reset="earliest",
    )
    await reader.start()
    try:
        copied = await asyncio.wait_for(reader.getone(), 30)
    finally:
        await reader.stop()
    assert (copied.key, copied.value) == (b"\xc3\x28", b"\xff\x00payload\x80")


async def test_a_new_iteration_continues_where_the_last_one_stopped(kafka_bootstrap: str) -> None:
    settings = test_settings(kafka_bootstrap, partitions=1)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}iterate.again.command"
    try:
        receiver = transport.open(unique("again"), [topic])
        await receiver.ready()
        await transport.send_many([message(topic, f"k{i}", str(i)) for i in range(5)])
        receiver.open_processing()
        got = []
        for _ in range(5):  # a fresh iterator each time, as `anext(aiter(...))` makes
            record = await asyncio.wait_for(anext(aiter(receiver)), 30)
            got.append(record.payload)
            await record.ack()
        assert got == ["0", "1", "2", "3", "4"]
    finally:
        await transport.close()
