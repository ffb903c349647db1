"""The cluster intake on Kafka: ownership is the consumer group's partition assignment of
the command topic, keyed and partitioned like the event topics, which must have the same
partition count."""

from __future__ import annotations

import asyncio

import pytest

from tests.accounts import ACCOUNT, Account, Open
from tests.wow_kafka.conftest import test_settings
from wow_core.cluster import CommandIntake, CommandReceipt, CommandWire, InFlightLimit, ReplyTo
from wow_core.command import WaitCoordinator
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, TopicKind
from wow_core.modeling import AggregateRegistry, CommandKernel
from wow_core.transport import TransportMessage
from wow_kafka import KafkaTopicError, KafkaTransport

pytestmark = pytest.mark.kafka


def intake(transport: KafkaTransport) -> CommandIntake:
    aggregates = AggregateRegistry([Account])
    bodies = aggregates.register_body_types(BodyTypeRegistry())
    return CommandIntake(
        "bank",
        transport,
        CommandKernel(aggregates, InMemoryEventStore()),
        WaitCoordinator(),
        bodies,
        limit=InFlightLimit(8),
        prefix=transport.settings.topic_prefix or "wow.",
    )


async def test_an_intake_whose_command_topic_is_partitioned_unlike_the_event_topics_is_refused(
    kafka_bootstrap: str,
) -> None:
    three = KafkaTransport(test_settings(kafka_bootstrap, partitions=3))
    prefix = three.settings.topic_prefix
    six = KafkaTransport(test_settings(kafka_bootstrap, partitions=6, topic_prefix=prefix))
    try:
        account_events = three.naming.topic(ACCOUNT, TopicKind.EVENT)
        await three.topics.ensure([account_events])  # the log: 3 partitions
        refused = intake(six)  # would create the command topic with 6
        with pytest.raises(
            KafkaTopicError, match=r"bank\.commands has 6 partitions but .*account\.event has 3"
        ):
            await refused.prepare()
    finally:
        await three.close()
        await six.close()


async def test_an_intake_on_kafka_answers_with_a_broker_acknowledged_receipt(kafka_bootstrap: str) -> None:
    transport = KafkaTransport(test_settings(kafka_bootstrap, partitions=2))
    prefix = transport.settings.topic_prefix or ""
    node = intake(transport)
    receipts = transport.open("orders", [f"{prefix}orders.receipts"])
    try:
        await receipts.ready()
        receipts.open_processing()
        await node.start()
        command = CommandMessage(AggregateId(ACCOUNT, "k1"), Open("k"), "Open")
        wire = CommandWire(command, ReplyTo("orders", committed=True))
        await transport.send(TransportMessage(node.topic, wire.key, wire.encode(node.registry), 0))
        record = await asyncio.wait_for(anext(aiter(receipts)), 30)
        receipt = CommandReceipt.decode(record.payload)
        assert receipt.command_id == command.id
        assert receipt.committed
        assert receipt.version == 1
    finally:
        await node.stop(5)
        await receipts.close()
        await transport.close()
