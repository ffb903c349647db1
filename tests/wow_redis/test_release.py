"""A released entry (its processing failed) is delivered again by its own receiver after
a delay that grows with its delivery count, not only by recovery after the claim idle
time; against the real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from tests.release_outage import TallyAggregate, processed_after_two_failed_appends
from tests.wow_redis.conftest import REDIS_URL
from tests.wow_redis.helpers import eventually, message, next_record, opened, take
from wow_core.model import NamedAggregate, TopicKind
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings
from wow_core.transport import ReleasingRecord
from wow_redis import RedisSettings, RedisStreamTransport
from wow_redis.event_store import RedisEventStore

pytestmark = pytest.mark.redis

Make = Callable[..., RedisStreamTransport]


def topic_of(transport: RedisStreamTransport) -> str:
    return transport.naming.topic(NamedAggregate("bank", "account"), TopicKind.COMMAND)


async def pending(redis: Redis, topic: str) -> int:
    return int((await redis.xpending(topic, "g1"))["pending"])


def test_the_delay_doubles_per_delivery_until_recovery_would_claim_the_entry() -> None:
    settings = RedisSettings(release_delay=0.5, claim_idle_time=5)
    assert [settings.release_delay_for(n) for n in (1, 2, 3, 4, 5, 100)] == [0.5, 1.0, 2.0, 4.0, 4.5, 4.5]
    assert RedisSettings(release_delay=2, claim_idle_time=None).release_delay_for(10) == 60.0
    assert RedisSettings(release_delay="").release_delay_for(1) is None, "unset: left to recovery"
    with pytest.raises(ValueError, match="release_delay"):
        RedisSettings(release_delay=0)


async def test_a_released_entry_comes_back_to_its_receiver_later_each_time(make_transport: Make) -> None:
    transport = make_transport(release_delay=0.2, claim_idle_time=60)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic, payload="1"))
    [first] = await take(receiver, 1)
    assert isinstance(first, ReleasingRecord)
    waits = []
    record = first
    for _ in range(2):
        released = time.monotonic()
        record.release()
        [record] = await take(receiver, 1, timeout=5)
        waits.append(time.monotonic() - released)
        assert record.position == first.position
    assert record.delivery_count == 3, "each redelivery counted"
    assert waits[0] >= 0.19, f"0.2 s: {waits}"
    assert waits[1] >= 0.39, f"then doubled: {waits}"
    assert max(waits) < 3, f"seconds, not the 60 s claim idle time: {waits}"
    await record.ack()


async def test_an_entry_acknowledged_after_its_release_is_not_delivered_again(
    make_transport: Make, redis: Redis
) -> None:
    transport = make_transport(release_delay=0.1, claim_idle_time=60, ack_confirmed=True)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic))
    [record] = await take(receiver, 1)
    record.release()
    await record.ack()
    coming = next_record(aiter(receiver))
    await asyncio.sleep(0.6)
    assert not coming.done(), "acknowledged meanwhile: nothing to deliver"
    assert await pending(redis, topic) == 0
    coming.cancel()


async def test_without_a_release_delay_a_released_entry_waits_for_recovery(make_transport: Make) -> None:
    transport = make_transport(release_delay=None, claim_idle_time=60)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic))
    [record] = await take(receiver, 1)
    record.release()
    coming = next_record(aiter(receiver))
    await asyncio.sleep(0.5)
    assert not coming.done()
    coming.cancel()


async def test_a_receiver_that_closes_hands_its_released_entries_back_to_the_group(
    make_transport: Make,
) -> None:
    transport = make_transport(release_delay=30, claim_idle_time=60)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic, payload="x"))
    [record] = await take(receiver, 1)
    record.release()
    began = time.monotonic()
    await receiver.close()
    assert time.monotonic() - began < 5, "the close does not wait for the release delay"
    again = await opened(transport, "g1", [topic])
    [back] = await take(again, 1)
    assert (back.payload, back.delivery_count) == ("x", 2)
    await back.ack()


async def test_a_release_past_max_deliveries_ends_in_the_dead_letter_stream(
    make_transport: Make, redis: Redis
) -> None:
    transport = make_transport(release_delay=0.05, claim_idle_time=60, max_deliveries=3)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic, payload="poison"))
    for delivery in (1, 2, 3):
        [record] = await take(receiver, 1, timeout=5)
        assert record.delivery_count == delivery
        record.release()

    async def dead_lettered() -> bool:
        return bool(await redis.xlen(f"{topic}.dlq"))

    await eventually(dead_lettered, 5, "the fourth delivery dead-lettered")
    assert await redis.xlen(f"{topic}.dlq") == 1, "a failure that does not pass is not retried forever"
    assert await pending(redis, topic) == 0


# -- a command whose processing failed, end to end -------------------------------------


@pytest.fixture
async def service(prefix: str, monkeypatch: pytest.MonkeyPatch, redis: object) -> AsyncIterator[WowRuntime]:
    for name, value in {
        "WOW_TRANSPORT": "redis",
        "WOW_EVENTSOURCING__STORE": "redis",
        "WOW_REDIS__URL": REDIS_URL,
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_REDIS__RELEASE_DELAY": "0.2",
        "WOW_REDIS__CLAIM_IDLE_TIME": "60",
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": "false",
    }.items():
        monkeypatch.setenv(name, value)
    made = WowApp("redis-release", aggregates=[TallyAggregate]).runtime(WowSettings())
    async with made:
        yield made


async def test_a_command_whose_append_failed_in_an_outage_is_processed_seconds_later(
    service: WowRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await processed_after_two_failed_appends(
        service,
        monkeypatch,
        RedisEventStore,
        10,
        "in seconds, not after the claim idle time",
    )
