"""Topic management: create missing topics as configured, or refuse them clearly."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.wow_kafka.conftest import test_settings, unique
from tests.wow_kafka.helpers import message
from wow_kafka import KafkaSendError, KafkaTopicError, KafkaTransport
from wow_kafka.topics import check_topic_name

pytestmark = pytest.mark.kafka


async def _partitions(bootstrap: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [description] = await admin.describe_topics([topic])
        return len(description["partitions"])
    finally:
        await admin.close()


async def test_missing_topics_are_created_with_the_configured_partitions(kafka_bootstrap: str) -> None:
    transport = KafkaTransport(test_settings(kafka_bootstrap, partitions=5))
    topic = f"{transport.settings.topic_prefix}topics.created.command"
    try:
        await transport.send(message(topic, "k", "v"))
        assert await _partitions(kafka_bootstrap, topic) == 5
        receiver = transport.open(unique("g"), [f"{transport.settings.topic_prefix}topics.subscribed.event"])
        await receiver.ready()
        assert len(receiver.assigned) == 5
    finally:
        await transport.close()


async def test_missing_topics_are_refused_when_creation_is_disabled(kafka_bootstrap: str) -> None:
    transport = KafkaTransport(test_settings(kafka_bootstrap, auto_create_topics=False))
    topic = f"{transport.settings.topic_prefix}topics.absent.command"
    try:
        with pytest.raises(KafkaTopicError, match="WOW_KAFKA__AUTO_CREATE_TOPICS") as caught:
            await transport.send(message(topic, "k", "v"))
        assert topic in str(caught.value)
        receiver = transport.open(unique("g"), [topic])
        with pytest.raises(KafkaTopicError, match=topic):
            await receiver.ready()
        # the broker's own auto-creation was not triggered either
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            assert topic not in await admin.list_topics()
        finally:
            await admin.close()
    finally:
        await transport.close()


async def test_an_existing_topic_is_used_when_creation_is_disabled(kafka_bootstrap: str) -> None:
    creator = KafkaTransport(test_settings(kafka_bootstrap, partitions=2))
    topic = f"{creator.settings.topic_prefix}topics.existing.command"
    await creator.topics.ensure([topic])
    await creator.close()
    transport = KafkaTransport(test_settings(kafka_bootstrap, auto_create_topics=False))
    try:
        await transport.send(message(topic, "k", "v"))
    finally:
        await transport.close()


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "slash/name", "x" * 250, "ünïcode"])
def test_illegal_topic_names_are_refused(name: str) -> None:
    with pytest.raises(KafkaTopicError, match="not a legal Kafka topic name"):
        check_topic_name(name)


async def test_a_send_to_an_illegal_topic_fails_before_the_broker(transport: KafkaTransport) -> None:
    with pytest.raises(KafkaTopicError):
        await transport.send(message("bad topic", "k", "v"))
    assert not isinstance(KafkaTopicError("x"), KafkaSendError)
