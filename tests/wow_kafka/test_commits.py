"""Acknowledgement and commits: never past an unacknowledged record."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.wow_kafka.conftest import test_settings, unique
from tests.wow_kafka.helpers import Collector, message
from wow_kafka import KafkaTransport

pytestmark = pytest.mark.kafka


@pytest.fixture
async def single_partition(kafka_bootstrap: str) -> AsyncIterator[KafkaTransport]:
    transport = KafkaTransport(test_settings(kafka_bootstrap, partitions=1))
    try:
        yield transport
    finally:
        await transport.close()


async def test_commit_stops_below_an_unacknowledged_record(single_partition: KafkaTransport) -> None:
    transport = single_partition
    topic = f"{transport.settings.topic_prefix}commits.gap.command"
    group = unique("gap")
    first = transport.open(group, [topic])
    await first.ready()
    await transport.send_many([message(topic, f"k{i}", str(i)) for i in range(6)])
    first.open_processing()
    # acknowledge everything but record 2: the commit may reach 2, never further
    collector = Collector(first, ack=lambda record: record.payload != "2")
    await collector.count(6)
    await first.close()

    second = transport.open(group, [topic])
    await second.ready()
    second.open_processing()
    again = Collector(second)
    await again.count(4)
    assert again.payloads() == ["2", "3", "4", "5"]
    await again.stop()
    await second.close()

    third = transport.open(group, [topic])  # everything acknowledged now: nothing comes back
    await third.ready()
    await transport.send(message(topic, "k6", "6"))
    third.open_processing()
    last = Collector(third)
    await last.count(1)
    assert last.payloads() == ["6"]
    await last.stop()


async def test_out_of_order_acks_commit_once_contiguous(single_partition: KafkaTransport) -> None:
    transport = single_partition
    topic = f"{transport.settings.topic_prefix}commits.order.command"
    group = unique("order")
    receiver = transport.open(group, [topic])
    await receiver.ready()
    await transport.send_many([message(topic, f"k{i}", str(i)) for i in range(4)])
    receiver.open_processing()
    collector = Collector(receiver, ack=False)
    records = await collector.count(4)
    for record in reversed(records):  # the last ones complete first
        await record.ack()
    assert receiver.in_flight == 0
    await collector.stop()
    await receiver.close()

    again = transport.open(group, [topic])
    await again.ready()
    await transport.send(message(topic, "k4", "4"))
    again.open_processing()
    after = Collector(again)
    await after.count(1)
    assert after.payloads() == ["4"]
    await after.stop()


async def test_an_ack_after_close_does_not_commit(single_partition: KafkaTransport) -> None:
    transport = single_partition
    topic = f"{transport.settings.topic_prefix}commits.late.command"
    group = unique("late")
    receiver = transport.open(group, [topic])
    await receiver.ready()
    await transport.send(message(topic, "k", "late"))
    receiver.open_processing()
    collector = Collector(receiver, ack=False)
    [record] = await collector.count(1)
    await collector.stop()
    await receiver.close()
    await record.ack()  # too late: the record belongs to whoever owns the partition now

    again = transport.open(group, [topic])
    await again.ready()
    again.open_processing()
    redelivered = Collector(again)
    await redelivered.count(1)
    assert redelivered.payloads() == ["late"]
    await redelivered.stop()
