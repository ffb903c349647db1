"""Records that are not messages go to ``<topic>.dlq`` byte for byte, and the group moves on."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.wow_kafka.conftest import unique
from tests.wow_kafka.helpers import raw_records
from wow_core.messaging import MessageSubscription
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import MetricDecodeFailureHandler
from wow_core.middleware.metrics import DECODE_FAILURES
from wow_core.model import NamedAggregate
from wow_core.testing.support import command, conformance_codec, ordinal, wait_until
from wow_core.transport import DeadLetterReason
from wow_core.transport.bus import TransportCommandBus
from wow_core.transport.decode_failure import DefaultDecodeFailureHandler
from wow_kafka import KafkaTransport
from wow_kafka.dead_letters import DEAD_LETTER_ERROR_BYTES, dead_letter_headers

pytestmark = pytest.mark.kafka


async def end_offsets(transport: KafkaTransport, topic: str) -> dict[int, int]:
    """One past the last record of each partition of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=transport.settings.bootstrap_list)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        assert partitions, f"no partitions of {topic}"
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(partitions)).items()}
    finally:
        await consumer.stop()


async def committed_offsets(transport: KafkaTransport, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` committed on the partitions of ``topic`` (0 where none)."""
    ends = await end_offsets(transport, topic)
    # a consumer of the group that never subscribes: it reads the commits, joins nothing
    reader = AIOKafkaConsumer(
        bootstrap_servers=transport.settings.bootstrap_list, group_id=group, enable_auto_commit=False
    )
    await reader.start()
    try:
        return {p: (await reader.committed(TopicPartition(topic, p))) or 0 for p in ends}
    finally:
        await reader.stop()


async def test_garbage_wrong_keys_and_foreign_json_are_dead_lettered(transport: KafkaTransport) -> None:
    metrics = InMemoryMetrics()
    counted = MetricDecodeFailureHandler(DefaultDecodeFailureHandler(), metrics)
    bus = TransportCommandBus(transport, conformance_codec(), decode_failure_handler=counted)
    account = NamedAggregate("dlq", "account")
    topic = bus.topic(account)
    group = unique("dlq")
    subscription = MessageSubscription.of(group, [account])
    receiver = bus.receiver(subscription)
    await receiver.ready()
    receiver.open_processing()

    valid = bus.encode(command(account, "a-1", 0))
    hostile: list[tuple[bytes | None, bytes | None]] = [
        (b"a-1", b"\xff\xfe not utf-8 \x80"),  # undecodable bytes
        (None, valid.payload.encode()),  # no key at all
        (b"someone-else", valid.payload.encode()),  # the key is not the aggregate id
        (b"a-1", json.dumps({"foreign": "json", "from": "another system"}).encode()),
        (b"a-1", None),  # a tombstone
        (b"a-1", b"[" * 5000 + b"]" * 5000),
    ]
    raw = AIOKafkaProducer(bootstrap_servers=transport.settings.bootstrap_list)
    await raw.start()
    try:
        for key, value in hostile:
            await raw.send_and_wait(topic, key=key, value=value)
    finally:
        await raw.stop()
    await bus.send(command(account, "a-1", 1))

    exchange = await asyncio.wait_for(anext(aiter(receiver)), 30)
    assert ordinal(exchange.message) == 1
    await exchange.ack()
    # The hostile records spread over partitions (a record without a key, a foreign key), so
    # some may still be behind the good command: keep the receiver pulling until every one
    # reached the policy.
    pulling = asyncio.create_task(anext(aiter(receiver)))
    await wait_until(
        lambda: metrics.counter_value(DECODE_FAILURES) >= len(hostile),
        30,
        "every hostile record handled by the decode-failure policy",
    )
    # The counter moves once a dead letter is written, before its record is acknowledged:
    # this cancellation may land in between, and must not split the two.
    pulling.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pulling
    assert metrics.counter_value(DECODE_FAILURES) == len(hostile)
    await receiver.close()  # commits what was acknowledged
    # every record was acknowledged: the group's commits reached the end of every partition
    assert await committed_offsets(transport, transport.group_prefix + group, topic) == await end_offsets(
        transport, topic
    )

    letters = await raw_records(transport, topic + ".dlq", len(hostile))
    kept = [(key, value) for key, value, _ in letters]
    # byte for byte, except that a missing key or value is dead-lettered as empty
    expected = [((key or b""), (value or b"")) for key, value in hostile]
    assert sorted(kept, key=repr) == sorted(expected, key=repr)
    # why each is there, in its headers: the reason, the group, where it was and the error
    for _, _, headers in letters:
        assert headers["wow-dlq-reason"] == "undecodable"
        assert headers["wow-dlq-group"] == group
        partition, offset = headers["wow-dlq-position"].split(":")
        assert (partition + offset).isdigit()
        assert headers["wow-dlq-deliveries"] == "1"
        assert headers["wow-dlq-error"], "the decode error's text"

    # everything was acknowledged: the group does not see the garbage again
    again = bus.receiver(subscription)
    await again.ready()
    again.open_processing()
    await bus.send(command(account, "a-1", 2))
    after = await asyncio.wait_for(anext(aiter(again)), 30)
    assert ordinal(after.message) == 2
    await after.ack()
    assert metrics.counter_value(DECODE_FAILURES) == len(hostile)
    await again.close()
    await bus.close()


def test_a_dead_letter_carries_at_most_a_kibibyte_of_its_error_as_valid_utf8() -> None:
    reason = DeadLetterReason("undecodable", "g", "0:7", 2, "é" * 5000)
    headers = dict(dead_letter_headers(reason))
    assert headers["wow-dlq-reason"] == b"undecodable"
    assert headers["wow-dlq-position"] == b"0:7"
    assert headers["wow-dlq-deliveries"] == b"2"
    error = headers["wow-dlq-error"]
    assert len(error) <= DEAD_LETTER_ERROR_BYTES
    assert set(error.decode()) == {"é"}, "cut between characters, never inside one"
    assert "wow-dlq-error" not in dict(
        dead_letter_headers(DeadLetterReason("max_deliveries", "g", "0:7", 16))
    )
