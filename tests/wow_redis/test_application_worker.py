"""Application commands over Redis Streams across processes: a ``wow worker`` killed with
SIGKILL mid-stream, a second one claims what it held (``WOW_REDIS__CLAIM_IDLE_TIME``)
and finishes; nothing lost, no effect twice (see ``tests/application_workers.py``)."""

from __future__ import annotations

import uuid

import pytest
from redis.asyncio import Redis

from tests.application_workers import CONCURRENCY, killed_mid_stream, worker_env
from tests.wow_redis.conftest import REDIS_URL
from wow_core.application import TransportRegistry
from wow_redis import RedisSettings, RedisStreamTransport

pytestmark = [pytest.mark.redis, pytest.mark.slow]

TOTAL = 80


async def test_a_worker_killed_mid_stream_loses_nothing_and_repeats_only_what_it_held(
    redis: Redis, prefix: str
) -> None:
    topic_prefix = f"t{uuid.uuid4().hex[:10]}."  # the stream: <key prefix><topic prefix>application.payments
    env = worker_env(
        prefix,
        {
            "WOW_MESSAGING__TOPIC_PREFIX": topic_prefix,
            "WOW_APPLICATION__TRANSPORTS": '{"payments": "redis"}',
            "WOW_REDIS__URL": REDIS_URL,
            "WOW_REDIS__KEY_PREFIX": prefix,
            "WOW_REDIS__CLAIM_IDLE_TIME": "1.0",
            "WOW_TEST_REDIS_URL": REDIS_URL,
        },
    )
    producer = RedisStreamTransport(RedisSettings(url=REDIS_URL, key_prefix=prefix))
    registry = TransportRegistry({"payments": producer}, topic_prefix=topic_prefix)
    try:
        outcome = await killed_mid_stream(registry, env, redis, TOTAL)
    finally:
        await registry.close()
        await redis.delete(registry.topic("payments"), registry.topic("payments") + ".dlq")
    # Redis acknowledges each entry as it is done (XACK): what comes twice is what was executing
    assert len(outcome.repeated) <= CONCURRENCY, (
        "only the commands the killed worker was executing came twice"
    )
