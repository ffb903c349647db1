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


async def next_member_gets(
    transport: KafkaTransport, group: str, topic: str, count: int, *, then_send: str | None = None
) -> list[str]:
    """Open a new member of ``group``, optionally send one record, take ``count`` records."""
    member = transport.open(group, [topic])
    await member.ready()
    if then_send is not None:
        await transport.send(message(topic, f"k{then_send}", then_send))
    member.open_processing()
    collector = Collector(member)
    await collector.count(count)
    await collector.stop()
    await member.close()
    return collector.payloads()


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

    assert await next_member_gets(transport, group, topic, 4) == ["2", "3", "4", "5"]
    # everything acknowledged now: nothing comes back
    assert await next_member_gets(transport, group, topic, 1, then_send="6") == ["6"]


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

    assert await next_member_gets(transport, group, topic, 1, then_send="4") == ["4"]


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

    assert await next_member_gets(transport, group, topic, 1) == ["late"]
