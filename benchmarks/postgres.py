"""wow-postgres against raw asyncpg, same run, same server, same rows.

- append: ``PostgresEventStore.append``, one event per command, 1,000 aggregates, 64
  appends in flight, over raw asyncpg inserting the same rows (same table, same
  constraints, same JSON) with a plain ``INSERT`` on a pool of the same size: the raw
  side skips the version check (``WHERE max(version) = v - 1``) and the diagnosis.
- transport send: 64 concurrent ``PostgresTransport.send`` (one group subscribed) over raw
  ``INSERT`` of the same rows into the same queue table, 64 in flight.
- consume + ack: a receiver iterated and every record acknowledged (one ``DELETE`` each)
  over a raw loop of ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT 128`` + one ``DELETE`` of
  the batch, in one transaction.
- outbox relay: ``OutboxRelay.publish_batch`` draining the same outbox rows (4,000 rows
  over 1,000 aggregates, ``relay_batch`` 100) to Redis Streams one row at a time
  (``relay_concurrency=1``, the relay before batching) and batched (16 aggregates at a
  time), beside raw ``RedisStreamTransport.send`` of the same messages, 64 in flight; the
  median of the rounds;
- the embedded demo (``wow demo``, in-memory transport, local-first) with the PostgreSQL
  event store and snapshots vs the Redis ones: commands/s and p50 latency as the demo
  reports them.

Every side runs ``--repeat`` times alternately against PostgreSQL on 127.0.0.1:5432
(database ``test``), in a schema of its own dropped afterwards; the best round is kept.
Writes ``benchmarks/results/postgres.json``.

    python -m benchmarks.postgres [--quick] [--repeat 5]
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks._harness import Figure, Harness, ack_each
from wow_core.model import AggregateId, BodyTypeRegistry, DomainEventStream, MessageCodec
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, conformance_named_aggregate, make_stream
from wow_core.transport import TransportMessage
from wow_postgres import PostgresEventStore, PostgresSettings, PostgresTransport

DSN = os.environ.get("WOW_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
IN_FLIGHT = 64
POOL = 8
AGGREGATES = 1000
READ_BATCH = 128


async def _bounded(count: int, work: Callable[[int], Awaitable[Any]]) -> float:
    """``work(0..count-1)``, ``IN_FLIGHT`` at once; the seconds it took."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(n: int) -> None:
        async with gate:
            await work(n)

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(count)))
    return time.perf_counter() - started


def _settings(schema: str) -> PostgresSettings:
    return PostgresSettings(dsn=DSN, schema_name=schema, pool_min_size=POOL, pool_max_size=POOL)


async def _append_round(h: Harness, schema: str, count: int, framework_first: bool) -> dict[str, float]:
    """One round of appends in a fresh schema: the seconds of each side."""
    codec = MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES))
    named = conformance_named_aggregate()
    store = PostgresEventStore(_settings(schema), codec=codec)
    await store.start()
    raw_pool = await asyncpg.create_pool(DSN, min_size=POOL, max_size=POOL)
    try:
        run = uuid.uuid4().hex[:6]

        def streams(side: str) -> list[DomainEventStream]:
            ids = [AggregateId(named, f"{side}{run}-{n}", "t0") for n in range(AGGREGATES)]
            return [make_stream(ids[n % AGGREGATES], n // AGGREGATES + 1) for n in range(count)]

        framework_streams, raw_streams = streams("f"), streams("r")
        raw_rows = [
            (
                s.aggregate_id.named_aggregate.context_name,
                s.aggregate_id.named_aggregate.aggregate_name,
                s.aggregate_id.tenant_id,
                s.aggregate_id.id,
                s.version,
                s.id,
                s.request_id,
                s.command_id,
                s.create_time,
                codec.encode(s),
            )
            for s in raw_streams
        ]
        insert = f"""INSERT INTO {store.names.events} (context_name, aggregate_name, tenant_id,
            aggregate_id, version, stream_id, request_id, command_id, create_time, payload)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)"""

        async def framework(n: int) -> None:
            await store.append(framework_streams[n])

        async def raw(n: int) -> None:
            async with raw_pool.acquire() as connection:
                await connection.execute(insert, *raw_rows[n])

        # versions of one aggregate go in order: each version's 1,000 appends run (64 at
        # a time) before the next version's
        async def by_version(work: Callable[[int], Awaitable[None]]) -> float:
            total = 0.0
            for start in range(0, count, AGGREGATES):
                size = min(AGGREGATES, count - start)

                async def shifted(n: int, start: int = start) -> None:
                    await work(start + n)

                total += await _bounded(size, shifted)
            return total

        await h.hop_once()
        seconds: dict[str, float] = {}
        sides: list[tuple[str, Callable[[int], Awaitable[None]]]] = [("framework", framework), ("raw", raw)]
        for name, work in sides if framework_first else reversed(sides):
            seconds[name] = await by_version(work)
        return seconds
    finally:
        await raw_pool.close()
        await store.close()


async def append_figures(h: Harness, admin: asyncpg.Connection[Any]) -> list[Figure]:
    count = h.n(10_000)
    best = {"raw": float("inf"), "framework": float("inf")}
    for round_no in range(h.repeat):
        schema = f"wowbench_{uuid.uuid4().hex[:10]}"
        try:
            seconds = await _append_round(h, schema, count, round_no % 2 == 0)
        finally:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        for name, value in seconds.items():
            best[name] = min(best[name], value)
    hop = await h.queue_hop()
    framework_rate, raw_rate = count / best["framework"], count / best["raw"]
    return [
        Figure(
            "postgres event store: append throughput (1,000 aggregates, 64 in flight)",
            framework_rate,
            "appends/s",
            hops=1 / framework_rate / hop,
            ratio=framework_rate / raw_rate,
            ratio_of="raw asyncpg INSERT",
            detail={
                "appends": count,
                "pool": POOL,
                "raw_per_s": raw_rate,
                "baseline": "raw asyncpg INSERT of the same rows, same pool size, no version check",
            },
        )
    ]


async def _transport_round(h: Harness, schema: str, count: int, framework_first: bool) -> dict[str, float]:
    """One round of sends and consumption in a fresh schema: the seconds of each side."""
    payload = '{"kind":"command","body":{"amount":5,"note":"benchmark deposit"}}'
    transport = PostgresTransport(_settings(schema))
    raw_pool = await asyncpg.create_pool(DSN, min_size=POOL, max_size=POOL)
    seconds: dict[str, float] = {}
    try:
        topic = "wow.bench.account.command"
        receiver = transport.open("bench.fw", [topic])
        await receiver.ready()  # one group subscribed: every send writes one row
        messages = [TransportMessage(topic, f"acc-{n % AGGREGATES}", payload, n) for n in range(count)]
        queue = transport.names.queue
        insert = (
            f"INSERT INTO {queue} (group_name, topic, key, payload, timestamp) VALUES ($1, $2, $3, $4, $5)"
        )

        async def fw_send(n: int) -> None:
            await transport.send(messages[n])

        async def raw_send(n: int) -> None:
            m = messages[n]
            async with raw_pool.acquire() as connection:
                await connection.execute(insert, "bench.raw", m.topic, m.key, m.payload, m.timestamp)

        await h.hop_once()
        sends: list[tuple[str, Callable[[int], Awaitable[None]]]] = [
            ("fw_send", fw_send),
            ("raw_send", raw_send),
        ]
        for name, work in sends if framework_first else reversed(sends):
            seconds[name] = await _bounded(count, work)

        started = time.perf_counter()
        receiver.open_processing()
        await ack_each(receiver, count)
        await receiver.close()  # the last acknowledgements: part of the measured work
        seconds["fw_consume"] = time.perf_counter() - started

        claim = f"""SELECT id FROM {queue} WHERE group_name = 'bench.raw' AND topic = $1
            ORDER BY id LIMIT {READ_BATCH} FOR UPDATE SKIP LOCKED"""
        delete = f"DELETE FROM {queue} WHERE id = ANY($1::bigint[])"
        started = time.perf_counter()
        async with raw_pool.acquire() as connection:
            seen = 0
            while seen < count:
                async with connection.transaction():
                    ids = [row["id"] for row in await connection.fetch(claim, topic)]
                    await connection.execute(delete, ids)
                seen += len(ids)
        seconds["raw_consume"] = time.perf_counter() - started
        return seconds
    finally:
        await raw_pool.close()
        await transport.close()


async def transport_figures(h: Harness, admin: asyncpg.Connection[Any]) -> list[Figure]:
    count = h.n(20_000)
    best = dict.fromkeys(("raw_send", "fw_send", "raw_consume", "fw_consume"), float("inf"))
    for round_no in range(h.repeat):
        schema = f"wowbench_{uuid.uuid4().hex[:10]}"
        try:
            seconds = await _transport_round(h, schema, count, round_no % 2 == 0)
        finally:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        for name, value in seconds.items():
            best[name] = min(best[name], value)
    hop = await h.queue_hop()
    rates = {name: count / seconds for name, seconds in best.items()}
    return [
        Figure(
            "postgres transport: send throughput (64 concurrent senders)",
            rates["fw_send"],
            "records/s",
            hops=1 / rates["fw_send"] / hop,
            ratio=rates["fw_send"] / rates["raw_send"],
            ratio_of="raw INSERT",
            detail={"records": count, "raw_per_s": rates["raw_send"], "baseline": "raw INSERT, 64 in flight"},
        ),
        Figure(
            "postgres transport: consume and ack throughput",
            rates["fw_consume"],
            "records/s",
            hops=1 / rates["fw_consume"] / hop,
            ratio=rates["fw_consume"] / rates["raw_consume"],
            ratio_of="raw SELECT ... SKIP LOCKED",
            detail={
                "records": count,
                "raw_per_s": rates["raw_consume"],
                "baseline": f"raw SELECT ... FOR UPDATE SKIP LOCKED LIMIT {READ_BATCH} + one DELETE a batch",
            },
        ),
    ]


async def _relay_round(h: Harness, schema: str, count: int, order: list[str]) -> dict[str, float]:
    """One round: the same outbox rows drained by each relay mode, and sent raw."""
    from redis.asyncio import Redis

    from wow_postgres import OutboxRelay, PostgresOutbox
    from wow_redis import RedisSettings, RedisStreamTransport

    codec = MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES))
    named = conformance_named_aggregate()
    store = PostgresEventStore(_settings(schema), codec=codec)
    await store.start()
    prefix = f"{schema}:"
    transport = RedisStreamTransport(RedisSettings(key_prefix=prefix))
    payload = '{"kind":"event","body":{"amount":5,"note":"benchmark deposit"}}'
    seconds: dict[str, float] = {}
    try:
        outbox = PostgresOutbox(store)
        ids = [AggregateId(named, f"a{n}", "t0") for n in range(AGGREGATES)]
        streams = [make_stream(ids[n % AGGREGATES], n // AGGREGATES + 1) for n in range(count)]
        messages = [
            TransportMessage("wow.bench.relay.event", s.aggregate_id.id, payload, n)
            for n, s in enumerate(streams)
        ]

        async def write(n: int) -> None:
            await outbox.append(streams[n], [messages[n]])

        for start in range(0, count, AGGREGATES):  # an aggregate's versions in order
            size = min(AGGREGATES, count - start)

            async def shifted(n: int, start: int = start) -> None:
                await write(start + n)

            await _bounded(size, shifted)
        await transport.start()
        connection = await asyncpg.connect(DSN)
        try:
            unsend = f"UPDATE {store.names.outbox} SET sent_at = NULL"
            for mode in order:
                await h.hop_once()
                if mode == "raw":

                    async def send(n: int) -> None:
                        await transport.send(messages[n])

                    seconds[mode] = await _bounded(count, send)
                    continue
                await connection.execute(unsend)
                concurrency = 1 if mode == "sequential" else 16
                relay = OutboxRelay(
                    store.settings.model_copy(update={"relay_batch": 100, "relay_concurrency": concurrency}),
                    transport,
                )
                started = time.perf_counter()
                published = 0
                while published < count:
                    published += await relay.publish_batch(connection)
                seconds[mode] = time.perf_counter() - started
        finally:
            await connection.close()
    finally:
        await transport.close()
        await store.close()
        client = Redis.from_url("redis://127.0.0.1:6379/0")
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    return seconds


async def relay_figures(h: Harness, admin: asyncpg.Connection[Any]) -> list[Figure]:
    count = h.n(4000)
    rounds: dict[str, list[float]] = {"sequential": [], "batched": [], "raw": []}
    for round_no in range(h.repeat):
        schema = f"wowbench_{uuid.uuid4().hex[:10]}"
        order = ["sequential", "batched", "raw"]
        if round_no % 2:
            order.reverse()
        try:
            seconds = await _relay_round(h, schema, count, order)
        finally:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        for name, value in seconds.items():
            rounds[name].append(count / value)
    rates = {name: statistics.median(values) for name, values in rounds.items()}
    return [
        Figure(
            "postgres outbox relay to Redis: batched (16 aggregates at a time) over one row at a time",
            rates["batched"],
            "rows/s",
            ratio=rates["batched"] / rates["sequential"],
            ratio_of="one row at a time",
            detail={
                "rows": count,
                "aggregates": AGGREGATES,
                "relay_batch": 100,
                "sequential_per_s": rates["sequential"],
                "raw_send_per_s": rates["raw"],
                "batched_over_raw": rates["batched"] / rates["raw"],
                "rounds": {name: [round(v) for v in values] for name, values in rounds.items()},
                "baseline": "the same relay with relay_concurrency=1 (ratio); raw: RedisStreamTransport.send "
                "of the same messages, 64 in flight",
            },
        )
    ]


def _demo(store: str, schema: str, accounts: int, transfers: int) -> tuple[float, float]:
    """(commands/s, p50 ms) of one ``wow demo`` run on ``store``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    env |= {
        "WOW_EVENTSOURCING__STORE": store,
        "WOW_EVENTSOURCING__SNAPSHOT": store,
        "WOW_POSTGRES__DSN": DSN,
        "WOW_POSTGRES__SCHEMA_NAME": schema,
        "WOW_REDIS__KEY_PREFIX": f"{schema}:",
    }
    wow = str(Path(sys.executable).parent / "wow")
    done = subprocess.run(
        [wow, "demo", "--accounts", str(accounts), "--transfers", str(transfers)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    throughput = re.search(r"throughput\s+([\d,.]+) commands/s", done.stdout)
    latency = re.search(r"latency p50 / p90 / p99 / max\s+([\d.]+)", done.stdout)
    if throughput is None or latency is None:
        raise RuntimeError(f"the demo printed no figures:\n{done.stdout[-2000:]}")
    return float(throughput.group(1).replace(",", "")), float(latency.group(1))


async def demo_figures(h: Harness, admin: asyncpg.Connection[Any]) -> list[Figure]:
    from redis.asyncio import Redis

    accounts, transfers = (20, 100) if h.quick else (40, 400)
    best: dict[str, tuple[float, float]] = {}
    for round_no in range(min(h.repeat, 3)):
        for store in ("postgres", "redis") if round_no % 2 == 0 else ("redis", "postgres"):
            schema = f"wowbench_{uuid.uuid4().hex[:10]}"
            try:
                rate, p50 = await asyncio.to_thread(_demo, store, schema, accounts, transfers)
            finally:
                await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                client = Redis.from_url("redis://127.0.0.1:6379/0")
                keys = [key async for key in client.scan_iter(match=f"{schema}:*", count=500)]
                if keys:
                    await client.delete(*keys)
                await client.aclose()
            if store not in best or rate > best[store][0]:
                best[store] = (rate, p50)
    (pg_rate, pg_p50), (redis_rate, redis_p50) = best["postgres"], best["redis"]
    return [
        Figure(
            "embedded demo: PostgreSQL event store vs Redis",
            pg_rate,
            "commands/s",
            ratio=pg_rate / redis_rate,
            ratio_of="the Redis event store",
            detail={
                "accounts": accounts,
                "transfers": transfers,
                "p50_ms": pg_p50,
                "redis_per_s": redis_rate,
                "redis_p50_ms": redis_p50,
                "baseline": "the same demo with WOW_EVENTSOURCING__STORE=redis (ratio: postgres over redis)",
            },
        )
    ]


async def run(h: Harness) -> list[Figure]:
    admin = await asyncpg.connect(DSN)
    try:
        return [
            *await append_figures(h, admin),
            *await transport_figures(h, admin),
            *await relay_figures(h, admin),
            *await demo_figures(h, admin),
        ]
    finally:
        await admin.close()


if __name__ == "__main__":
    Harness.main("postgres", run, __doc__)
