"""RedisEventStore runs the event-store conformance suite; snapshots; bad data; many processes."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.accounts import AccountState
from tests.wow_redis.conftest import REDIS_URL
from wow_core.eventsourcing import Snapshot
from wow_core.model import AggregateId, BodyTypeRegistry, MessageCodec, NamedAggregate
from wow_core.testing.event_store import (
    CONFORMANCE_BODY_TYPES,
    EventStoreConformance,
    make_stream,
    new_aggregate_id,
)
from wow_redis import EventStoreDataError, RedisEventStore, RedisSettings, RedisSnapshotRepository

pytestmark = pytest.mark.redis


def codec() -> MessageCodec:
    return MessageCodec(BodyTypeRegistry([*CONFORMANCE_BODY_TYPES, AccountState]))


class TestRedisEventStore(EventStoreConformance):
    @pytest.fixture
    async def event_store(
        self, settings_for: Callable[..., RedisSettings], redis: Redis
    ) -> AsyncIterator[RedisEventStore]:
        store = RedisEventStore(settings_for(), codec=codec())
        yield store
        await store.close()


@pytest.fixture
async def store(settings_for: Callable[..., RedisSettings], redis: Redis) -> AsyncIterator[RedisEventStore]:
    made = RedisEventStore(settings_for(), codec=codec())
    yield made
    await made.close()


@pytest.fixture
async def snapshots(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> AsyncIterator[RedisSnapshotRepository]:
    made = RedisSnapshotRepository(settings_for(), codec=codec())
    yield made
    await made.close()


async def test_keys_of_one_aggregate_type_share_a_cluster_slot(store: RedisEventStore) -> None:
    aggregate_id = new_aggregate_id()
    assert "{conformance.account}" in store.stream_key(aggregate_id)
    assert "{conformance.account}" in store.requests_key(aggregate_id.named_aggregate)


async def test_ids_with_separators_do_not_collide(store: RedisEventStore) -> None:
    named = NamedAggregate("conformance", "account")
    one = AggregateId(named, "b:c", "a")
    other = AggregateId(named, "c", "a:b")
    assert store.stream_key(one) != store.stream_key(other)
    await store.append(make_stream(one, 1))
    assert await store.last_version(other) == 0


async def test_a_stream_holding_garbage_is_reported_not_guessed(store: RedisEventStore, redis: Redis) -> None:
    aggregate_id = new_aggregate_id()
    await redis.rpush(store.stream_key(aggregate_id), "not json")
    with pytest.raises(Exception, match="not_json"):
        await store.load(aggregate_id)
    other = new_aggregate_id()
    await store.append(make_stream(other, 1))
    await redis.rpush(store.stream_key(other), store.codec.encode(make_stream(other, 7)))
    with pytest.raises(EventStoreDataError, match="version 2"):
        await store.load(other)


async def test_a_corrupt_request_record_is_reported(store: RedisEventStore, redis: Redis) -> None:
    aggregate_id = new_aggregate_id()
    await redis.hset(store.requests_key(aggregate_id.named_aggregate), "r-1", "{broken")
    with pytest.raises(EventStoreDataError, match="r-1"):
        await store.find_request(aggregate_id.named_aggregate, "r-1")


async def test_an_unregistered_body_type_is_refused_on_load(
    settings_for: Callable[..., RedisSettings], store: RedisEventStore
) -> None:
    aggregate_id = new_aggregate_id()
    await store.append(make_stream(aggregate_id, 1))
    stranger = RedisEventStore(settings_for())  # knows no body type
    try:
        with pytest.raises(Exception, match="unknown_body_type"):
            await stranger.load(aggregate_id)
    finally:
        await stranger.close()


async def test_a_snapshot_round_trips_and_only_a_newer_one_replaces_it(
    snapshots: RedisSnapshotRepository,
) -> None:
    aggregate_id = new_aggregate_id()
    assert await snapshots.load(aggregate_id) is None
    assert await snapshots.save(Snapshot(aggregate_id, 3, AccountState("ada", 30), snapshot_time=111))
    assert not await snapshots.save(Snapshot(aggregate_id, 2, AccountState("ada", 20)))
    assert not await snapshots.save(Snapshot(aggregate_id, 3, AccountState("ada", 99)))
    loaded = await snapshots.load(aggregate_id)
    assert loaded == Snapshot(aggregate_id, 3, AccountState("ada", 30), snapshot_time=111)
    assert await snapshots.save(Snapshot(aggregate_id, 4, AccountState("ada", 0), deleted=True))
    again = await snapshots.load(aggregate_id)
    assert again is not None
    assert (again.version, again.deleted) == (4, True)


async def test_concurrent_snapshot_saves_keep_the_newest(snapshots: RedisSnapshotRepository) -> None:
    aggregate_id = new_aggregate_id()
    versions = list(range(1, 41))
    await asyncio.gather(
        *(snapshots.save(Snapshot(aggregate_id, v, AccountState("x", v))) for v in reversed(versions))
    )
    loaded = await snapshots.load(aggregate_id)
    assert loaded is not None
    assert loaded.version == 40


async def test_a_corrupt_snapshot_is_reported(snapshots: RedisSnapshotRepository, redis: Redis) -> None:
    aggregate_id = new_aggregate_id()
    await redis.hset(snapshots.snapshot_key(aggregate_id), mapping={"version": 1, "data": "{}"})
    with pytest.raises(EventStoreDataError):
        await snapshots.load(aggregate_id)


# -- several processes ------------------------------------------------------------------

PROCESSES = 3
APPENDS_PER_PROCESS = 40


async def test_concurrent_appends_from_several_processes_lose_and_double_nothing(
    store: RedisEventStore, prefix: str
) -> None:
    """Every process appends to the same aggregate as fast as it can, retrying on conflict.

    Each attempt carries a fresh request id; a winning append is printed by its process.
    Afterwards the history is dense (1..N), each stored stream is exactly one process's
    printed win, and no win is missing.
    """
    aggregate = uuid.uuid4().hex
    script = Path(__file__).with_name("append_worker.py")
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            REDIS_URL,
            prefix,
            aggregate,
            str(APPENDS_PER_PROCESS),
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(PROCESSES)
    ]
    wins: list[str] = []
    try:
        outputs = await asyncio.wait_for(asyncio.gather(*(w.communicate() for w in workers)), 120)
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    for worker, (out, _) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0
        wins.extend(out.decode().split())
    aggregate_id = new_aggregate_id()
    aggregate_id = AggregateId(aggregate_id.named_aggregate, aggregate, "t0")
    history = await store.load(aggregate_id)
    assert [s.version for s in history] == list(range(1, PROCESSES * APPENDS_PER_PROCESS + 1))
    assert sorted(s.id for s in history) == sorted(wins)
    assert len(set(s.request_id for s in history)) == len(history)
