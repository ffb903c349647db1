"""Application commands over Kafka across processes: a ``wow worker`` killed with SIGKILL
mid-stream; once its session expires a second one is assigned its partitions and
finishes; nothing lost, no effect twice (see ``tests/application_workers.py``).

Kafka acknowledges by committing offsets every ``WOW_KAFKA__COMMIT_INTERVAL_MS``, so what
the killed worker held is every command it had started past its group's last commit
(the commands executing, and those finished within the last commit interval). The test
reads the group's committed offsets right after the kill, and bounds the commands
delivered twice by the commands started minus the offsets committed.
"""

from __future__ import annotations

import uuid

import pytest

from tests.application_workers import killed_mid_stream, worker_env
from tests.wow_kafka.conftest import test_settings
from tests.wow_redis.conftest import REDIS_URL, redis_reachable
from wow_core.application import TransportRegistry
from wow_kafka import KafkaTransport

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

TOTAL = 80
COMMIT_INTERVAL_MS = 20
PARTITIONS = 4


async def test_a_worker_killed_mid_stream_loses_nothing_and_repeats_only_what_it_held(
    kafka_bootstrap: str,
) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from redis.asyncio import Redis

    if not redis_reachable():
        pytest.fail("the handler of this test records its effects in Redis on 127.0.0.1:6379")
    prefix = f"wowtest:{uuid.uuid4().hex[:10]}:"
    topic_prefix = f"t{uuid.uuid4().hex[:10]}."
    # the producer's Kafka topic prefix is the worker's (WOW_MESSAGING__TOPIC_PREFIX, no
    # WOW_KAFKA__TOPIC_PREFIX): a Kafka transport names application topics with its own prefix
    settings = test_settings(
        kafka_bootstrap,
        partitions=PARTITIONS,
        commit_interval_ms=COMMIT_INTERVAL_MS,
        topic_prefix=topic_prefix,
    )
    env = worker_env(
        prefix,
        {
            "WOW_APPLICATION__TRANSPORTS": '{"payments": "kafka"}',
            "WOW_MESSAGING__TOPIC_PREFIX": topic_prefix,
            "WOW_KAFKA__BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "WOW_KAFKA__PARTITIONS": str(PARTITIONS),
            "WOW_KAFKA__SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
            "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
            "WOW_KAFKA__FETCH_MAX_WAIT_MS": "50",
            "WOW_KAFKA__COMMIT_INTERVAL_MS": str(COMMIT_INTERVAL_MS),
            "WOW_TEST_REDIS_URL": REDIS_URL,
        },
    )
    env.pop("WOW_TEST_KAFKA_BOOTSTRAP", None)
    producer = KafkaTransport(settings)
    registry = TransportRegistry({"payments": producer}, topic_prefix=topic_prefix)
    await producer.topics.ensure([registry.topic("payments")])
    redis = Redis.from_url(REDIS_URL)
    # the worker's Kafka transport prefixes its groups with its topic naming prefix
    group = f"{topic_prefix}{env['WOW_SERVICE_NAME']}.application.payments"

    async def committed() -> int:
        # a consumer of the group that never subscribes: it reads the commits, joins nothing
        consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_list, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            topic = registry.topic("payments")
            await consumer.topics()
            offsets = [await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)]
        finally:
            await consumer.stop()
        return sum(offset or 0 for offset in offsets)

    try:
        outcome = await killed_mid_stream(registry, env, redis, TOTAL, after_kill=committed)
    finally:
        await registry.close()
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
    # Kafka acknowledges by committed offsets: what comes again is what the killed worker had
    # started past its group's commits, read right after the kill
    held = len(outcome.started_by_the_killed_worker) - outcome.acknowledged_by_the_killed_worker
    assert outcome.acknowledged_by_the_killed_worker > 0, "the killed worker had committed some offsets"
    assert len(outcome.repeated) <= held, "only the commands past the committed offsets came twice"
