"""A released record (its processing failed) is delivered again by the same member after
a delay that grows with its deliveries, while its partition's commits stay at its offset;
against the real broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.release_outage import Bump, TallyAggregate, processed_after_two_failed_appends
from tests.wow_kafka.conftest import test_settings, unique
from tests.wow_kafka.helpers import Collector, message, raw_records
from wow_core.command import CommandWait
from wow_core.eventsourcing.in_memory import InMemoryEventStore
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings
from wow_core.transport import ReleasingRecord
from wow_kafka import KafkaRecord, KafkaSettings, KafkaTransport, KafkaTransportReceiver
from wow_kafka.offsets import PartitionOffsets

pytestmark = pytest.mark.kafka


def test_the_delay_doubles_per_delivery_up_to_its_maximum() -> None:
    settings = KafkaSettings(release_delay_ms=500, release_delay_max_ms=3000)
    assert [settings.release_delay_for(n) for n in (1, 2, 3, 4, 5, 100)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert KafkaSettings(release_delay_ms=5000, release_delay_max_ms=1000).release_delay_for(3) == 5.0
    assert KafkaSettings(release_delay_ms="").release_delay_for(1) is None, "unset: the next owner"
    assert KafkaSettings().release_delay_for(1) == 1.0, "the default: a second"
    with pytest.raises(ValueError, match="release_delay_ms"):
        KafkaSettings(release_delay_ms=0)


def test_a_released_offset_holds_the_watermark_but_not_a_drain() -> None:
    offsets = PartitionOffsets(0)
    for offset in (0, 1):
        offsets.delivered(offset)
    assert offsets.release(0)
    assert offsets.processing == 1, "only 1 is being processed"
    assert offsets.ack(1) is False
    assert offsets.processing == 0, "nothing being processed"
    assert offsets.watermark == 0, "0 still holds the commits"
    assert not offsets.release(1), "acknowledged: nothing to deliver again"
    assert offsets.redelivered(0)
    assert offsets.processing == 1, "delivered again: being processed"
    assert offsets.ack(0) is True
    assert offsets.watermark == 2
    assert not offsets.redelivered(0)


async def test_a_drain_does_not_wait_for_a_released_record() -> None:
    offsets = PartitionOffsets(0)
    offsets.delivered(0)
    waiter = asyncio.create_task(offsets.drain(5))
    await asyncio.sleep(0)
    offsets.release(0)
    async with asyncio.timeout(1):
        assert await waiter is True
    offsets.retire()
    assert not offsets.release(0), "revoked: the next owner's"
    assert not offsets.redelivered(0), "revoked: the next owner's"


@pytest.fixture
async def single_partition(kafka_bootstrap: str) -> AsyncIterator[KafkaTransport]:
    transport = KafkaTransport(
        test_settings(kafka_bootstrap, partitions=1, release_delay_ms=200, release_delay_max_ms=10000)
    )
    try:
        yield transport
    finally:
        await transport.close()


async def opened(transport: KafkaTransport, group: str, topic: str) -> KafkaTransportReceiver:
    receiver = transport.open(group, [topic])
    assert isinstance(receiver, KafkaTransportReceiver)
    await receiver.ready()
    return receiver


async def next_record(records: AsyncIterator[Any], timeout: float = 20.0) -> KafkaRecord:
    async with asyncio.timeout(timeout):
        record = await anext(records)
    assert isinstance(record, KafkaRecord)
    return record


async def test_a_released_record_comes_back_to_its_member_later_each_time(
    single_partition: KafkaTransport,
) -> None:
    transport = single_partition
    topic = f"{transport.settings.topic_prefix}release.again.command"
    receiver = await opened(transport, unique("again"), topic)
    await transport.send(message(topic, "k0", "0"))
    receiver.open_processing()
    records = aiter(receiver)
    record = await next_record(records)
    assert isinstance(record, ReleasingRecord)
    assert record.delivery_count == 1
    waits = []
    for delivery in (2, 3):
        released = time.monotonic()
        record.release()
        again = await next_record(records)
        waits.append(time.monotonic() - released)
        assert (again.offset, again.payload, again.delivery_count) == (record.offset, "0", delivery)
        record = again
    assert waits[0] >= 0.19, f"0.2 s: {waits}"
    assert waits[1] >= 0.39, f"then doubled: {waits}"
    assert receiver.in_flight == 1, "not committable while released"
    await record.ack()
    assert receiver.in_flight == 0
    await receiver.close()


async def test_commits_stay_at_a_released_record_until_it_is_acknowledged(
    single_partition: KafkaTransport,
) -> None:
    transport = single_partition
    topic = f"{transport.settings.topic_prefix}release.commit.command"
    group = unique("commit")
    receiver = await opened(transport, group, topic)
    await transport.send_many([message(topic, f"k{i}", str(i)) for i in range(4)])
    receiver.open_processing()
    released: list[str] = []

    def ack_all_but_the_first_delivery_of_1(record: KafkaRecord) -> bool:
        if record.payload == "1" and record.delivery_count == 1:
            released.append(record.payload)
            record.release()
            return False
        return True

    collector = Collector(receiver, ack=ack_all_but_the_first_delivery_of_1)
    await collector.count(5)
    assert collector.payloads() == ["0", "1", "2", "3", "1"], "1 again, after the records fetched later"
    assert [record.delivery_count for record in collector.records] == [1, 1, 1, 1, 2]
    await receiver.commit()
    await collector.stop()
    await receiver.close()

    follower = await opened(transport, group, topic)
    await transport.send(message(topic, "k4", "4"))
    follower.open_processing()
    after = await next_record(aiter(follower))
    assert after.payload == "4", "every record acknowledged: the commit passed the released one"
    await follower.close()


async def test_a_record_acknowledged_after_its_release_is_not_delivered_again(
    single_partition: KafkaTransport,
) -> None:
    transport = single_partition
    topic = f"{transport.settings.topic_prefix}release.acked.command"
    receiver = await opened(transport, unique("acked"), topic)
    await transport.send_many([message(topic, "k0", "0"), message(topic, "k1", "1")])
    receiver.open_processing()
    records = aiter(receiver)
    first = await next_record(records)
    first.release()
    await first.ack()
    second = await next_record(records)
    assert second.payload == "1"
    await second.ack()
    await transport.send(message(topic, "k2", "2"))
    third = await next_record(records, timeout=10)
    assert (third.payload, third.delivery_count) == ("2", 1), "0 was not delivered again"
    await asyncio.sleep(0.4)  # two release delays: a redelivery would be in the buffer now
    assert receiver.buffered == 0
    assert receiver.in_flight == 1
    await third.ack()
    await receiver.close()


async def test_without_a_release_delay_a_released_record_waits_for_the_next_owner(
    kafka_bootstrap: str,
) -> None:
    transport = KafkaTransport(test_settings(kafka_bootstrap, partitions=1, release_delay_ms=""))
    try:
        topic = f"{transport.settings.topic_prefix}release.unset.command"
        group = unique("unset")
        receiver = await opened(transport, group, topic)
        await transport.send(message(topic, "k0", "0"))
        receiver.open_processing()
        records = aiter(receiver)
        (await next_record(records)).release()
        with pytest.raises(TimeoutError):
            await next_record(records, timeout=1.0)
        await receiver.close()

        follower = await opened(transport, group, topic)
        follower.open_processing()
        again = await next_record(aiter(follower))
        assert (again.payload, again.delivery_count) == ("0", 1), "Kafka counts no deliveries"
        await again.ack()
        await follower.close()
    finally:
        await transport.close()


async def test_a_member_that_closes_with_a_released_record_leaves_it_to_the_group(
    single_partition: KafkaTransport,
) -> None:
    transport = single_partition
    topic = f"{transport.settings.topic_prefix}release.close.command"
    group = unique("close")
    receiver = await opened(transport, group, topic)
    await transport.send(message(topic, "k0", "0"))
    receiver.open_processing()
    (await next_record(aiter(receiver))).release()
    async with asyncio.timeout(5):
        await receiver.close()  # the release's timer is cancelled, not awaited
    assert not receiver._releases

    follower = await opened(transport, group, topic)
    follower.open_processing()
    again = await next_record(aiter(follower))
    assert again.payload == "0"
    await again.ack()
    await follower.close()


async def test_a_revocation_does_not_wait_for_a_released_record(kafka_bootstrap: str) -> None:
    transport = KafkaTransport(
        test_settings(kafka_bootstrap, partitions=1, release_delay_ms=5000, revocation_drain_timeout_ms=8000)
    )
    try:
        topic = f"{transport.settings.topic_prefix}release.revoke.command"
        group = unique("revoke")
        first = await opened(transport, group, topic)
        await transport.send(message(topic, "k0", "0"))
        first.open_processing()
        (await next_record(aiter(first))).release()
        first.assignment_changed.clear()
        began = time.monotonic()
        second = await opened(transport, group, topic)  # joins: the only partition moves or stays
        drained_in = time.monotonic() - began
        assert drained_in < 7, f"the revocation waited {drained_in:.1f}s for a released record"
        owner = first if first.assigned else second
        owner.open_processing()
        second.open_processing()
        again = await next_record(aiter(owner))
        assert again.payload == "0"
        await again.ack()
        await second.close()
        await first.close()
    finally:
        await transport.close()


# -- a record released on every delivery: dead-lettered after max_deliveries ----------------


def test_max_deliveries_is_a_positive_count_or_empty_for_no_limit() -> None:
    assert KafkaSettings().max_deliveries == 16
    assert KafkaSettings(max_deliveries="").max_deliveries is None
    with pytest.raises(ValueError, match="max_deliveries"):
        KafkaSettings(max_deliveries=0)


async def test_a_record_released_max_deliveries_times_goes_to_its_dead_letter_topic_and_commits_move_on(
    kafka_bootstrap: str,
) -> None:
    transport = KafkaTransport(
        test_settings(
            kafka_bootstrap, partitions=1, release_delay_ms=50, release_delay_max_ms=100, max_deliveries=3
        )
    )
    try:
        topic = f"{transport.settings.topic_prefix}release.poison.command"
        group = unique("poison")
        receiver = await opened(transport, group, topic)
        await transport.send_many([message(topic, "k0", "poison"), message(topic, "k1", "fine")])
        receiver.open_processing()
        deliveries: list[tuple[str, int]] = []

        def release_the_poison(record: KafkaRecord) -> bool:
            deliveries.append((record.payload, record.delivery_count))
            if record.payload == "poison":
                record.release()
                return False
            return True

        collector = Collector(receiver, ack=release_the_poison)
        await collector.count(4)
        dead = transport.open(unique("dlq-reader"), [topic + ".dlq"])
        await dead.ready()
        dead.open_processing()
        letter = await next_record(aiter(dead))
        assert (letter.key, letter.payload) == ("k0", "poison"), "its key and payload as they were"
        [(_, _, headers)] = await raw_records(transport, topic + ".dlq", 1)
        assert headers == {
            "wow-dlq-reason": "max_deliveries",
            "wow-dlq-group": group,
            "wow-dlq-position": "0:0",
            "wow-dlq-deliveries": "3",
        }, "why it is there, in its headers"
        assert sorted(deliveries) == [("fine", 1), ("poison", 1), ("poison", 2), ("poison", 3)]
        await asyncio.sleep(0.3)  # a fourth delivery would have come by now
        assert len(collector.records) == 4
        assert receiver.dead_lettered == 1
        assert receiver.in_flight == 0, "acknowledged once dead-lettered"
        await receiver.commit()
        await collector.stop()
        await receiver.close()
        await dead.close()

        follower = await opened(transport, group, topic)
        await transport.send(message(topic, "k2", "after"))
        follower.open_processing()
        after = await next_record(aiter(follower))
        assert after.payload == "after", "the commit passed the dead-lettered record"
        await after.ack()
        await follower.close()
    finally:
        await transport.close()


async def test_a_dead_letter_that_cannot_be_sent_leaves_the_record_to_be_delivered_again(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    transport = KafkaTransport(
        test_settings(
            kafka_bootstrap, partitions=1, release_delay_ms=50, release_delay_max_ms=100, max_deliveries=2
        )
    )
    try:
        topic = f"{transport.settings.topic_prefix}release.nodlq.command"
        receiver = await opened(transport, unique("nodlq"), topic)
        failures = 0

        async def broken_dead_letter(message: Any, reason: Any) -> None:
            nonlocal failures
            failures += 1
            raise ConnectionError("the broker is away")

        receiver._dead_letter = broken_dead_letter
        await transport.send(message(topic, "k0", "0"))
        receiver.open_processing()
        records = aiter(receiver)
        counts = []
        for _ in range(4):
            record = await next_record(records, timeout=10)
            counts.append(record.delivery_count)
            record.release()
        assert counts == [1, 2, 3, 4], "delivered again after each failed dead letter"
        assert failures >= 2
        assert receiver.dead_lettered == 0
        assert "dead-lettering" in caplog.text
        assert "delivered again" in caplog.text
        assert receiver.in_flight == 1, "still holding its partition's commits: nothing lost"
        await receiver.close()
    finally:
        await transport.close()


async def test_without_max_deliveries_a_released_record_is_delivered_for_as_long_as_it_is_released(
    kafka_bootstrap: str,
) -> None:
    transport = KafkaTransport(
        test_settings(
            kafka_bootstrap, partitions=1, release_delay_ms=20, release_delay_max_ms=20, max_deliveries=""
        )
    )
    try:
        topic = f"{transport.settings.topic_prefix}release.nolimit.command"
        receiver = await opened(transport, unique("nolimit"), topic)
        await transport.send(message(topic, "k0", "0"))
        receiver.open_processing()
        records = aiter(receiver)
        for delivery in range(1, 21):
            record = await next_record(records, timeout=10)
            assert record.delivery_count == delivery
            if delivery < 20:
                record.release()
        await record.ack()
        assert receiver.dead_lettered == 0
        await receiver.close()
    finally:
        await transport.close()


# -- through the runtime: a command whose append failed is processed seconds later ----------


@pytest.fixture
async def service(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[WowRuntime]:
    settings = test_settings(kafka_bootstrap)
    for name, value in {
        "WOW_TRANSPORT": "kafka",
        "WOW_KAFKA__BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "WOW_KAFKA__TOPIC_PREFIX": settings.topic_prefix or "",
        "WOW_KAFKA__PARTITIONS": "1",
        "WOW_KAFKA__SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "50",
        "WOW_KAFKA__RELEASE_DELAY_MS": "200",
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": "false",
    }.items():
        monkeypatch.setenv(name, value)
    made = WowApp("kafka-release", aggregates=[TallyAggregate]).runtime(WowSettings())
    async with made:
        yield made


async def test_a_command_whose_append_failed_is_processed_seconds_later_and_committed(
    service: WowRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await processed_after_two_failed_appends(
        service, monkeypatch, InMemoryEventStore, 10, "redelivered in seconds, not at the next rebalance"
    )
    following = service.aggregates.command(Bump(), "t-2")
    done = await service.gateway.send_and_wait(following, CommandWait.processed())
    assert done.succeeded, "the partition goes on after the released record"
