"""Fixtures of the Redis tests: a real server on 127.0.0.1:6379, unique names, cleanup.

A test skips when the server is unreachable, except with ``CI=true`` where it fails.
Every test gets its own key prefix; everything under it is deleted afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.services import reachable, skip_folder_unless_reachable
from wow_core.metrics import Metrics
from wow_redis import RedisMessageBusObserver, RedisSettings, RedisStreamTransport

REDIS_URL = os.environ.get("WOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_reachable() -> bool:
    return reachable(6379)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_folder_unless_reachable(items, "wow_redis", "Redis", 6379)


@pytest.fixture
def prefix() -> str:
    return f"wowtest:{uuid.uuid4().hex[:10]}:"


@pytest.fixture
async def redis(prefix: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    yield client
    keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
def settings_for(prefix: str) -> Callable[..., RedisSettings]:
    def make(**overrides: Any) -> RedisSettings:
        values: dict[str, Any] = {"url": REDIS_URL, "key_prefix": prefix, "block_time": 0.2}
        values.update(overrides)
        return RedisSettings(**values)

    return make


@pytest.fixture
async def make_transport(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> AsyncIterator[Callable[..., RedisStreamTransport]]:
    made: list[RedisStreamTransport] = []

    def make(
        *, metrics: Metrics | None = None, observer: RedisMessageBusObserver | None = None, **overrides: Any
    ) -> RedisStreamTransport:
        transport = RedisStreamTransport(settings_for(**overrides), metrics=metrics, observer=observer)
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.close()
