"""The transactional outbox: a stream and its messages commit together or not at all; the
relay publishes in order per aggregate, reports its lag, and, SIGKILLed mid-publish,
loses nothing and repeats at most the batch it had in flight."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from tests.services import in_ci, reachable
from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.eventsourcing import EventVersionConflictError
from wow_core.metrics import InMemoryMetrics
from wow_core.model import AggregateId, BodyTypeRegistry, MessageCodec
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, make_stream, new_aggregate_id
from wow_core.transport import InMemoryTransport, TransportMessage
from wow_core.transport.spi import TransportReceiver, TransportRecord
from wow_postgres import OutboxRelay, PostgresEventStore, PostgresOutbox, PostgresSettings
from wow_postgres.outbox import LAG, PUBLISHED

pytestmark = pytest.mark.postgres

TIMEOUT = 60
REPO = Path(__file__).parents[2]


@pytest.fixture
async def store(settings_for: Callable[..., PostgresSettings]) -> AsyncIterator[PostgresEventStore]:
    made = PostgresEventStore(
        settings_for(poll_interval=0.2, relay_batch=10),
        codec=MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES)),
    )
    await made.start()
    yield made
    await made.close()


def _messages(aggregate_id: AggregateId, version: int, topic: str) -> list[TransportMessage]:
    return [
        TransportMessage(topic, aggregate_id.id, f"{aggregate_id.id}|{version}|{n}", version) for n in (0, 1)
    ]


async def _unsent(store: PostgresEventStore) -> int:
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        return int(
            await connection.fetchval(f"SELECT count(*) FROM {store.names.outbox} WHERE sent_at IS NULL")
        )
    finally:
        await connection.close()


async def test_a_stream_and_its_messages_commit_together_or_not_at_all(store: PostgresEventStore) -> None:
    outbox = PostgresOutbox(store)
    aggregate_id = new_aggregate_id()
    await outbox.append(make_stream(aggregate_id, 1), _messages(aggregate_id, 1, "wow.t.a.event"))
    assert await store.last_version(aggregate_id) == 1
    assert await _unsent(store) == 2
    with pytest.raises(EventVersionConflictError):
        await outbox.append(make_stream(aggregate_id, 1), _messages(aggregate_id, 1, "wow.t.a.event"))
    assert await _unsent(store) == 2, "a refused append wrote its messages"
    assert await store.last_version(aggregate_id) == 1


async def test_the_relay_publishes_in_order_per_aggregate_and_reports_its_lag(
    store: PostgresEventStore,
) -> None:
    outbox = PostgresOutbox(store)
    topic = "wow.outbox.account.event"
    aggregates = [new_aggregate_id() for _ in range(3)]
    for version in (1, 2, 3):
        for aggregate_id in aggregates:
            await outbox.append(make_stream(aggregate_id, version), _messages(aggregate_id, version, topic))
    transport = InMemoryTransport()
    receiver = transport.open("readers", [topic])
    await receiver.ready()
    receiver.open_processing()
    metrics = InMemoryMetrics()
    relay = OutboxRelay(store.settings, transport, metrics=metrics)
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    got: list[TransportRecord] = []
    try:

        async def take() -> None:
            async for record in receiver:
                got.append(record)
                await record.ack()
                if len(got) == 18:
                    return

        await asyncio.wait_for(take(), TIMEOUT)
        late = new_aggregate_id()  # written while the relay runs: the notification wakes it
        await outbox.append(make_stream(late, 1), _messages(late, 1, topic))
        await asyncio.wait_for(take_more(receiver, got, 20), TIMEOUT)
    finally:
        stop.set()
        await asyncio.wait_for(running, TIMEOUT)
        await transport.close()
    for aggregate_id in aggregates:
        assert [r.payload for r in got if r.key == aggregate_id.id] == [
            f"{aggregate_id.id}|{v}|{n}" for v in (1, 2, 3) for n in (0, 1)
        ]
    assert metrics.counter_value(PUBLISHED) == 20
    assert metrics.gauge_value(LAG) == 0.0
    assert await _unsent(store) == 0


async def take_more(receiver: TransportReceiver, got: list[TransportRecord], total: int) -> None:
    async for record in receiver:
        got.append(record)
        await record.ack()
        if len(got) == total:
            return


async def test_the_lag_is_the_age_of_the_oldest_unsent_row(store: PostgresEventStore) -> None:
    outbox = PostgresOutbox(store)
    aggregate_id = new_aggregate_id()
    await outbox.append(make_stream(aggregate_id, 1), _messages(aggregate_id, 1, "wow.lag.a.event"))
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(
            f"UPDATE {store.names.outbox} SET created_at = clock_timestamp() - interval '90 seconds'"
        )
        metrics = InMemoryMetrics()
        relay = OutboxRelay(store.settings, _Refusing(), metrics=metrics)
        with pytest.raises(RuntimeError, match="refused"):
            await relay.publish_batch(connection)
    finally:
        await connection.close()
    assert await _unsent(store) == 2, "a batch whose send failed was marked sent"
    relay_metrics = InMemoryMetrics()
    transport = InMemoryTransport()
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        lagging = OutboxRelay(store.settings, transport, metrics=relay_metrics)
        await lagging.report_lag(connection)
    finally:
        await connection.close()
        await transport.close()
    lag = relay_metrics.gauge_value(LAG)
    assert lag is not None
    assert 90 <= lag < 90 + TIMEOUT


class _Refusing(InMemoryTransport):
    async def send(self, message: TransportMessage) -> None:
        raise RuntimeError("refused")


class _Gated(InMemoryTransport):
    """Holds every send until ``together`` sends are in flight at once (or fails a key)."""

    def __init__(self, together: int, failing: str = "") -> None:
        super().__init__()
        self.together = together
        self.failing = failing
        self.in_flight = 0
        self.most = 0
        self.sent: list[TransportMessage] = []
        self._all_in = asyncio.Event()

    async def send(self, message: TransportMessage) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= self.together:
            self._all_in.set()
        try:
            await asyncio.wait_for(self._all_in.wait(), TIMEOUT)
            if message.key == self.failing:
                raise RuntimeError("refused")
            self.sent.append(message)
        finally:
            self.in_flight -= 1


async def test_the_relay_sends_a_batch_concurrently_across_aggregates_and_in_order_within_one(
    store: PostgresEventStore,
) -> None:
    outbox = PostgresOutbox(store)
    topic = "wow.batch.account.event"
    aggregates = [new_aggregate_id() for _ in range(4)]
    for version in (1, 2):
        for aggregate_id in aggregates:
            await outbox.append(make_stream(aggregate_id, version), _messages(aggregate_id, version, topic))
    gated = _Gated(together=4)
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        relay = OutboxRelay(store.settings.model_copy(update={"relay_batch": 100}), gated)
        assert await asyncio.wait_for(relay.publish_batch(connection), TIMEOUT) == 16
    finally:
        await connection.close()
        await gated.close()
    assert gated.most == 4, "the aggregates were not sent concurrently"
    for aggregate_id in aggregates:
        assert [m.payload for m in gated.sent if m.key == aggregate_id.id] == [
            f"{aggregate_id.id}|{v}|{n}" for v in (1, 2) for n in (0, 1)
        ]
    assert await _unsent(store) == 0


async def test_a_failed_send_stops_its_aggregate_and_the_rest_of_the_batch_is_marked_sent(
    store: PostgresEventStore,
) -> None:
    outbox = PostgresOutbox(store)
    topic = "wow.batchfail.account.event"
    good, bad = new_aggregate_id(), new_aggregate_id()
    for version in (1, 2):
        for aggregate_id in (good, bad):
            await outbox.append(make_stream(aggregate_id, version), _messages(aggregate_id, version, topic))
    gated = _Gated(together=2, failing=bad.id)
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        relay = OutboxRelay(store.settings, gated)
        with pytest.raises(RuntimeError, match="refused"):
            await asyncio.wait_for(relay.publish_batch(connection), TIMEOUT)
        unsent = await connection.fetch(
            f"SELECT key, payload FROM {store.names.outbox} WHERE sent_at IS NULL ORDER BY id"
        )
    finally:
        await connection.close()
        await gated.close()
    assert [m.key for m in gated.sent] == [good.id] * 4
    assert [row["payload"] for row in unsent] == [f"{bad.id}|{v}|{n}" for v in (1, 2) for n in (0, 1)]


# -- a relay SIGKILLed mid-publish --------------------------------------------------------


AGGREGATES = 4
VERSIONS = 60


@pytest.mark.slow
@pytest.mark.redis
async def test_a_relay_killed_mid_publish_loses_nothing_and_repeats_only_its_batch(
    store: PostgresEventStore, schema: str
) -> None:
    """``wow postgres relay`` publishes to Redis (WOW_TRANSPORT=redis) and is SIGKILLed once
    some records arrived; a second relay finishes. Every message arrives; per aggregate the
    first deliveries keep the version order; what arrived twice is at most one batch."""
    if not reachable(6379) and not in_ci():
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    from redis.asyncio import Redis

    from wow_redis import RedisSettings, RedisStreamTransport

    outbox = PostgresOutbox(store)
    topic = "wow.relay.account.event"
    aggregates = [new_aggregate_id() for _ in range(AGGREGATES)]
    for version in range(1, VERSIONS + 1):
        for aggregate_id in aggregates:
            stream = make_stream(aggregate_id, version)
            await outbox.append(
                stream, [TransportMessage(topic, aggregate_id.id, f"{aggregate_id.id}|{version}", version)]
            )
    prefix = f"wowtest:{uuid.uuid4().hex[:10]}:"
    redis_settings = RedisSettings(key_prefix=prefix, block_time=0.2)
    transport = RedisStreamTransport(redis_settings)
    receiver = transport.open("readers", [topic])
    await asyncio.wait_for(receiver.ready(), TIMEOUT)
    receiver.open_processing()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    env |= {
        "WOW_TRANSPORT": "redis",
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_POSTGRES__DSN": POSTGRES_DSN,
        "WOW_POSTGRES__SCHEMA_NAME": schema,
        "WOW_POSTGRES__RELAY_BATCH": "10",
        "WOW_POSTGRES__POLL_INTERVAL": "0.2",
    }
    wow = str(Path(sys.executable).parent / "wow")
    got: list[str] = []

    async def take(count: int) -> None:
        async for record in receiver:
            got.append(record.payload)
            await record.ack()
            if len(got) >= count:
                return

    total = AGGREGATES * VERSIONS
    relays: list[asyncio.subprocess.Process] = []
    try:
        first = await asyncio.create_subprocess_exec(
            wow, "postgres", "relay", env=env, cwd=REPO, stdout=subprocess.DEVNULL
        )
        relays.append(first)
        await asyncio.wait_for(take(total // 4), TIMEOUT)
        first.send_signal(signal.SIGKILL)  # mid-publish: most of the outbox is still unsent
        await first.wait()
        killed_at = len(got)
        assert killed_at < total, "the relay finished before it was killed: the test proves nothing"
        second = await asyncio.create_subprocess_exec(
            wow, "postgres", "relay", env=env, cwd=REPO, stdout=subprocess.DEVNULL
        )
        relays.append(second)

        def complete() -> bool:
            return len(set(got)) == total

        async def take_all() -> None:
            async for record in receiver:
                got.append(record.payload)
                await record.ack()
                if complete():
                    return

        if not complete():
            await asyncio.wait_for(take_all(), TIMEOUT * 2)
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), TIMEOUT) == 0
    finally:
        for relay in relays:
            if relay.returncode is None:
                relay.kill()
                await relay.wait()
        await receiver.close()
        await transport.close()
        client = Redis.from_url(redis_settings.url)
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    assert len(set(got)) == total
    duplicates = len(got) - total
    assert duplicates <= 10, f"{duplicates} messages published twice: more than the batch in flight"
    for aggregate_id in aggregates:
        firsts: list[int] = []
        for payload in got:
            key, _, number = payload.partition("|")
            if key == aggregate_id.id and int(number) not in firsts:
                firsts.append(int(number))
        assert firsts == list(range(1, VERSIONS + 1))
    assert await _unsent(store) == 0


# -- the kernel's own events through the outbox, the service SIGKILLed after a commit ----

TOTAL_COMMANDS = 40
CRASH_AT = 30


@pytest.mark.slow
@pytest.mark.redis
async def test_a_service_killed_after_its_appends_committed_loses_no_event(schema: str) -> None:
    """``WOW_POSTGRES__OUTBOX_ENABLED=true``: a runtime over the PostgreSQL store and Redis
    SIGKILLs itself right after its 30th append committed (nothing of it published), while
    a relay publishes; the relay is SIGKILLed too and another started. Every committed
    stream and its state event reach the Redis consumers, in version order per aggregate;
    nothing that was not committed does; what arrived twice is at most the relay's batch
    in flight (the runtime published nothing itself)."""
    if not reachable(6379) and not in_ci():
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    from redis.asyncio import Redis

    from tests.wow_postgres.outbox_app import AGGREGATES as NOTES
    from tests.wow_postgres.outbox_app import Notebook
    from wow_core.model import MessageCodec, TopicKind
    from wow_core.modeling import AggregateRegistry, metadata_of
    from wow_core.transport.defaults import naming_of
    from wow_redis import RedisSettings, RedisStreamTransport

    named = metadata_of(Notebook).named_aggregate
    codec = MessageCodec(AggregateRegistry([Notebook]).register_body_types(BodyTypeRegistry()))
    prefix = f"wowtest:{uuid.uuid4().hex[:10]}:"
    redis_settings = RedisSettings(key_prefix=prefix, block_time=0.2)
    transport = RedisStreamTransport(redis_settings)
    naming = naming_of(transport)
    topics = {kind: naming.topic(named, kind) for kind in (TopicKind.EVENT, TopicKind.STATE)}
    receiver = transport.open("consumers", list(topics.values()))
    await asyncio.wait_for(receiver.ready(), TIMEOUT)
    receiver.open_processing()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    env |= {
        "WOW_TRANSPORT": "redis",
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_EVENTSOURCING__STORE": "postgres",
        "WOW_POSTGRES__DSN": POSTGRES_DSN,
        "WOW_POSTGRES__SCHEMA_NAME": schema,
        "WOW_POSTGRES__OUTBOX_ENABLED": "true",
        "WOW_POSTGRES__RELAY_BATCH": "10",
        "WOW_POSTGRES__POLL_INTERVAL": "0.2",
    }
    wow = str(Path(sys.executable).parent / "wow")
    got: list[tuple[TopicKind, str, int, str]] = []  # (kind, aggregate id, version, stream id)

    def take_record(topic: str, payload: str) -> None:
        kind = TopicKind.EVENT if topic == topics[TopicKind.EVENT] else TopicKind.STATE
        message = codec.decode(payload, kind)
        stream = message if kind is TopicKind.EVENT else message.stream  # type: ignore[attr-defined]
        got.append((kind, stream.aggregate_id.id, stream.version, stream.id))

    processes: list[asyncio.subprocess.Process] = []
    try:
        first_relay = await asyncio.create_subprocess_exec(
            wow, "postgres", "relay", env=env, cwd=REPO, stdout=subprocess.DEVNULL
        )
        processes.append(first_relay)
        service = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from tests.wow_postgres.outbox_app import main; main()",
            str(TOTAL_COMMANDS),
            str(CRASH_AT),
            env=env,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
        )
        processes.append(service)
        assert service.stdout is not None
        output = (await asyncio.wait_for(service.stdout.read(), TIMEOUT * 2)).decode()
        assert await asyncio.wait_for(service.wait(), TIMEOUT) == -signal.SIGKILL, output
        assert "crash after" in output, output
        first_relay.send_signal(signal.SIGKILL)
        await first_relay.wait()
        admin = await asyncpg.connect(POSTGRES_DSN)
        try:
            rows = await admin.fetch(f'SELECT aggregate_id, version, stream_id FROM "{schema}".event_stream')
        finally:
            await admin.close()
        committed = {(str(r["aggregate_id"]), int(r["version"]), str(r["stream_id"])) for r in rows}
        assert len(committed) == CRASH_AT
        second_relay = await asyncio.create_subprocess_exec(
            wow, "postgres", "relay", env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE
        )
        processes.append(second_relay)
        assert second_relay.stdout is not None
        started = await asyncio.wait_for(second_relay.stdout.readline(), TIMEOUT)
        assert started.startswith(b"relaying the outbox"), started  # its SIGTERM handler is in place

        def arrived(kind: TopicKind) -> set[tuple[str, int, str]]:
            return {(a, v, s) for k, a, v, s in got if k is kind}

        def complete() -> bool:
            return arrived(TopicKind.EVENT) >= committed and arrived(TopicKind.STATE) >= committed

        async def take_all() -> None:
            async for record in receiver:
                take_record(record.topic, record.payload)
                await record.ack()
                if complete():
                    return

        try:
            await asyncio.wait_for(take_all(), TIMEOUT)
        except TimeoutError:
            pytest.fail(
                f"after the restarted relay: {len(arrived(TopicKind.EVENT))} streams and "
                f"{len(arrived(TopicKind.STATE))} state events of {len(committed)} committed arrived"
            )
        second_relay.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second_relay.wait(), TIMEOUT) == 0
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await receiver.close()
        await transport.close()
        client = Redis.from_url(redis_settings.url)
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    for kind in (TopicKind.EVENT, TopicKind.STATE):
        assert arrived(kind) == committed, f"{kind}: not exactly the committed streams"
    duplicates = len(got) - 2 * len(committed)
    assert duplicates <= 10, f"{duplicates} messages arrived twice: more than the relay's batch in flight"
    for n in range(NOTES):
        for kind in (TopicKind.EVENT, TopicKind.STATE):
            firsts: list[int] = []
            for k, aggregate_id, version, _ in got:
                if k is kind and aggregate_id == f"note{n}" and version not in firsts:
                    firsts.append(version)
            assert firsts == sorted(firsts), f"note{n} {kind}: {firsts}"
