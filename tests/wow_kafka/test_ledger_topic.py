"""The ledger topic on Kafka: created keeping every record, refused when an existing one
would delete entries, and read from its start in no consumer group (nothing left behind)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.accounts import ACCOUNT
from tests.wow_kafka.conftest import test_settings
from wow_core.cluster import FailureLedger, LedgerJournal, ParkedAggregate, ledger_topic
from wow_core.model import AggregateId, now_ms
from wow_core.transport import TransportMessage
from wow_kafka import KafkaSettings, KafkaTopicError, KafkaTransport

pytestmark = pytest.mark.kafka


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return test_settings(kafka_bootstrap, partitions=2)


@pytest.fixture
async def admin(settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await client.start()
    yield client
    await client.close()


def prefix(settings: KafkaSettings) -> str:
    assert settings.topic_prefix is not None
    return settings.topic_prefix


def journal(transport: KafkaTransport, settings: KafkaSettings) -> LedgerJournal:
    return LedgerJournal(transport, "bank", FailureLedger(), prefix=prefix(settings), timeout=20)


def parked(name: str) -> ParkedAggregate:
    return ParkedAggregate("bank.intake", AggregateId(ACCOUNT, name), "0:4", "c-1", "down", 3, now_ms())


async def configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {entry[0]: entry[1] for entry in described[0].resources[0][4]}


async def groups_of(admin: AIOKafkaAdminClient, settings: KafkaSettings) -> list[str]:
    return sorted(
        str(group[0]) for group in await admin.list_consumer_groups() if prefix(settings) in group[0]
    )


async def test_the_ledger_topic_keeps_every_record_and_the_next_node_reads_it_from_its_start(
    settings: KafkaSettings, admin: AIOKafkaAdminClient
) -> None:
    first = KafkaTransport(settings)
    writer = journal(first, settings)
    try:
        await writer.start()
        assert await configs(admin, writer.topic) == {
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "cleanup.policy": "delete",
        }
        entry = parked("ann")
        await writer.park(entry)
    finally:
        await writer.close()
        await first.close()
    later = KafkaTransport(settings)
    reader = journal(later, settings)
    try:
        await reader.start()  # the existing topic keeps everything: accepted
        assert reader.ledger.entries() == [entry]
    finally:
        await reader.close()
        await later.close()


@pytest.mark.parametrize(
    ("existing", "named"),
    [
        ({"retention.ms": "86400000"}, "retention.ms=86400000"),
        ({}, "retention.ms=<broker default>"),
        ({"retention.ms": "-1", "retention.bytes": "1048576"}, "retention.bytes=1048576"),
        ({"retention.ms": "-1", "cleanup.policy": "compact"}, "cleanup.policy=compact"),
    ],
)
async def test_an_existing_ledger_topic_that_would_delete_entries_is_refused_naming_the_fix(
    settings: KafkaSettings, admin: AIOKafkaAdminClient, existing: dict[str, str], named: str
) -> None:
    topic = ledger_topic("bank", prefix(settings))
    await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=existing)])
    transport = KafkaTransport(settings)
    refused = journal(transport, settings)
    try:
        with pytest.raises(KafkaTopicError, match="must keep every record") as error:
            await refused.start()
        assert named in str(error.value)
        assert "retention.ms=-1" in str(error.value)
        assert refused._receiver is None  # nothing read, nothing written
        assert await configs(admin, topic) == existing  # and the topic left as it was
    finally:
        await refused.close()
        await transport.close()


async def test_reading_the_ledger_leaves_no_consumer_group_on_the_broker(
    settings: KafkaSettings, admin: AIOKafkaAdminClient
) -> None:
    transports = [KafkaTransport(settings) for _ in range(2)]
    journals = [journal(transport, settings) for transport in transports]
    try:
        for each in journals:
            await each.start()
        await journals[0].park(parked("bob"))
        await journals[1].caught_up()
        assert [e.aggregate_id.id for e in journals[1].ledger.entries()] == ["bob"]
        assert await groups_of(admin, settings) == []  # read in no group, even while open
    finally:
        for each in journals:
            await each.close()
        for transport in transports:
            await transport.close()
    assert await groups_of(admin, settings) == []


async def test_read_from_start_reads_every_partition_from_the_first_record_in_no_group(
    settings: KafkaSettings, admin: AIOKafkaAdminClient
) -> None:
    transport = KafkaTransport(settings)
    topic = f"{prefix(settings)}log"
    try:
        keys = [f"k{n}" for n in range(8)]  # over both partitions
        for key in keys[:4]:
            await transport.send(TransportMessage(topic, key, f"before {key}", now_ms()))
        reader = transport.read_from_start([topic])
        await reader.ready()
        reader.open_processing()
        for key in keys[4:]:
            await transport.send(TransportMessage(topic, key, f"after {key}", now_ms()))
        seen: dict[str, str] = {}
        partitions: set[str] = set()
        async with asyncio.timeout(30):
            async for record in reader:
                await record.ack()  # nothing to commit to
                seen[record.key] = record.payload
                partitions.add(record.position.split(":")[0])
                if len(seen) == len(keys):
                    break
        assert sorted(seen) == keys
        assert partitions == {"0", "1"}
        assert await groups_of(admin, settings) == []
        await reader.close()
        assert [record async for record in reader] == []  # closed: the iteration ends
    finally:
        await transport.close()
