"""A consumer killed with SIGKILL mid-stream: a living member takes its pending work over."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.wow_redis.conftest import REDIS_URL
from tests.wow_redis.helpers import eventually, message, opened
from wow_redis import RedisStreamTransport

pytestmark = [pytest.mark.redis, pytest.mark.slow]

TOTAL = 300


async def test_a_killed_consumers_pending_entries_are_taken_over_and_nothing_is_lost(
    make_transport: Callable[..., RedisStreamTransport], redis: Redis, prefix: str
) -> None:
    topic = f"{prefix}crash:command"
    group = "crash-group"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("crash_consumer.py")),
        REDIS_URL,
        prefix,
        topic,
        group,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    processed_by_victim: set[int] = set()
    try:
        assert (await asyncio.wait_for(process.stdout.readline(), 30)).strip() == b"ready"
        sender = make_transport()
        await sender.send_many([message(topic, payload=str(n)) for n in range(TOTAL)])
        while len(processed_by_victim) < TOTAL // 4:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            processed_by_victim.add(int(line))
        process.send_signal(signal.SIGKILL)
        rest, _ = await asyncio.wait_for(process.communicate(), 30)
        processed_by_victim.update(int(line) for line in rest.split())
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == -signal.SIGKILL
    summary = await redis.xpending(topic, group)
    assert summary["pending"] > 0, "the victim died holding entries"
    assert len(processed_by_victim) < TOTAL, "the victim was killed mid-stream"

    survivor = make_transport(claim_idle_time=0.3)
    receiver = await opened(survivor, group, [topic])
    processed_by_survivor: set[int] = set()

    async def consume() -> None:
        async for record in receiver:
            processed_by_survivor.add(int(record.payload))
            await record.ack()

    task = asyncio.ensure_future(consume())
    try:

        async def everything_done() -> bool:
            pending = (await redis.xpending(topic, group))["pending"]
            return pending == 0 and processed_by_victim | processed_by_survivor == set(range(TOTAL))

        await eventually(everything_done, timeout=30)
    finally:
        task.cancel()
    # at-least-once: only entries the victim processed but had not acknowledged come twice
    assert len(processed_by_victim & processed_by_survivor) <= summary["pending"]
