"""KafkaTransport against a real broker: send, receive, readiness, admission, close."""

from __future__ import annotations

import pytest

from tests.wow_kafka.conftest import unique
from tests.wow_kafka.helpers import Collector, message
from wow_core.model import NamedAggregate, TopicKind
from wow_kafka import KafkaTransport

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
