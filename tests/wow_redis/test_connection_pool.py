"""More commands in flight than a client has connections: they wait for one, none fails.

redis-py's default asyncio pool raises ``MaxConnectionsError`` ("Too many connections")
once ``max_connections`` (100 in redis-py 8) are in use; the runtime admits
``WOW_RUNTIME__MAX_IN_FLIGHT`` (1024) commands at once, each loading and appending
through the event store's client. Every client of wow-redis uses a blocking pool of
``WOW_REDIS__MAX_CONNECTIONS`` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool, Redis

from tests.accounts import AccountState
from tests.wow_redis.test_event_store import codec
from wow_core.eventsourcing import Snapshot
from wow_core.testing.event_store import make_stream, new_aggregate_id
from wow_redis import RedisEventStore, RedisSettings, RedisSnapshotRepository, RedisStreamTransport
from wow_redis.connection import create_client

pytestmark = pytest.mark.redis


def _opened(client: Redis) -> int:
    pool: Any = client.connection_pool
    return len(pool._available_connections) + len(pool._in_use_connections)


async def test_more_concurrent_loads_than_the_default_pool_holds_all_succeed(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    """Three times the default pool size at once (the tester's 300 caller pairs)."""
    settings = settings_for()
    events = RedisEventStore(settings, codec=codec())
    snapshots = RedisSnapshotRepository(settings, codec=codec())
    ids = [new_aggregate_id() for _ in range(300)]  # the default pool holds 100
    try:
        await asyncio.gather(*(events.append(make_stream(aggregate_id, 1)) for aggregate_id in ids))
        loaded = await asyncio.gather(*(events.load(aggregate_id) for aggregate_id in ids))
        assert [len(streams) for streams in loaded] == [1] * len(ids)
        missing = await asyncio.gather(*(snapshots.load(aggregate_id) for aggregate_id in ids))
        assert missing == [None] * len(ids)
        assert _opened(events.client) <= 100
        assert _opened(snapshots.client) <= 100
    finally:
        await events.close()
        await snapshots.close()


async def test_every_client_waits_for_a_free_connection_of_a_small_pool(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    settings = settings_for(max_connections=4)
    events = RedisEventStore(settings, codec=codec())
    snapshots = RedisSnapshotRepository(settings, codec=codec())
    transport = RedisStreamTransport(settings)
    ids = [new_aggregate_id() for _ in range(200)]
    try:
        await asyncio.gather(*(events.append(make_stream(aggregate_id, 1)) for aggregate_id in ids))
        loaded = await asyncio.gather(
            *(events.load(aggregate_id) for aggregate_id in ids),
            *(events.last_version(aggregate_id) for aggregate_id in ids),
        )
        assert all(loaded)
        kept = await asyncio.gather(
            *(snapshots.save(Snapshot(aggregate_id, 1, AccountState("ada", 1))) for aggregate_id in ids)
        )
        assert all(kept)
        assert all(await asyncio.gather(*(snapshots.load(aggregate_id) for aggregate_id in ids)))
        await asyncio.gather(*(transport.start() for _ in range(50)))
        clients = [events.client, snapshots.client, transport.client]
        assert [_opened(client) <= 4 for client in clients] == [True] * 3
        assert all(isinstance(client.connection_pool, BlockingConnectionPool) for client in clients)
    finally:
        await events.close()
        await snapshots.close()
        await transport.close()


def test_the_pool_is_a_blocking_one_bounded_by_the_settings() -> None:
    """What every client gets: the transport, the stores and both wait-notifier clients."""
    client = create_client(RedisSettings(max_connections=7, socket_timeout=3.0))
    pool = client.connection_pool
    assert isinstance(pool, BlockingConnectionPool)
    assert (pool.max_connections, pool.timeout) == (7, 3.0)
