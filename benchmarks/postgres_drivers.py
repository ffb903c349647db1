"""The driver choice of wow-postgres: asyncpg against psycopg 3, same rows, same run.

Both insert the same rows into the same event table (both unique constraints of the
store, ``jsonb`` payload), one transaction per row, ``IN_FLIGHT`` at once, each through its
own pool of ``POOL`` connections: asyncpg's ``Pool.acquire`` + ``execute`` against
psycopg 3 (``psycopg[binary]``) with ``psycopg_pool.AsyncConnectionPool`` and
``prepare=True``. Rounds alternate the order; the best of each is kept. psycopg is a
development dependency only: wow-postgres runs on asyncpg.

    python -m benchmarks.postgres_drivers [--quick] [--repeat 5]
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg_pool

from benchmarks._harness import Figure, Harness

DSN = os.environ.get("WOW_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
IN_FLIGHT = 64
POOL = 8
PAYLOAD = json.dumps({"body": {"amount": 5, "note": "x" * 100}, "header": {}})


def _ddl(schema: str) -> str:
    return f"""CREATE SCHEMA {schema}; CREATE TABLE {schema}.ev (
        position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, aggregate text NOT NULL,
        version integer NOT NULL, request_id text NOT NULL, payload jsonb NOT NULL,
        UNIQUE (aggregate, version), UNIQUE (request_id))"""


async def _bounded(count: int, insert: Callable[[str, int, str], Awaitable[None]]) -> float:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(n: int) -> None:
        async with gate:
            await insert(f"a{n % 1000}", n // 1000 + 1, uuid.uuid4().hex)

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(count)))
    return time.perf_counter() - started


async def with_asyncpg(schema: str, count: int) -> float:
    pool = await asyncpg.create_pool(DSN, min_size=POOL, max_size=POOL)
    sql = f"INSERT INTO {schema}.ev (aggregate, version, request_id, payload) VALUES ($1, $2, $3, $4::jsonb)"

    async def insert(aggregate: str, version: int, request_id: str) -> None:
        async with pool.acquire() as connection, connection.transaction():
            await connection.execute(sql, aggregate, version, request_id, PAYLOAD)

    try:
        return await _bounded(count, insert)
    finally:
        await pool.close()


async def with_psycopg(schema: str, count: int) -> float:
    pool = psycopg_pool.AsyncConnectionPool(DSN, min_size=POOL, max_size=POOL, open=False)
    await pool.open()
    await pool.wait()
    sql = f"INSERT INTO {schema}.ev (aggregate, version, request_id, payload) VALUES (%s, %s, %s, %s::jsonb)"

    async def insert(aggregate: str, version: int, request_id: str) -> None:
        async with pool.connection() as connection:  # one transaction, committed on exit
            await connection.execute(sql, (aggregate, version, request_id, PAYLOAD), prepare=True)

    try:
        return await _bounded(count, insert)
    finally:
        await pool.close()


async def run(h: Harness) -> list[Figure]:
    count = h.n(4_000)
    admin = await asyncpg.connect(DSN)
    best = {"asyncpg": float("inf"), "psycopg": float("inf")}
    sides: list[tuple[str, Callable[[str, int], Awaitable[float]]]] = [
        ("asyncpg", with_asyncpg),
        ("psycopg", with_psycopg),
    ]
    try:
        for round_no in range(h.repeat):
            for name, side in sides if round_no % 2 == 0 else reversed(sides):
                schema = f"wowdrv_{uuid.uuid4().hex[:10]}"
                await admin.execute(_ddl(schema))
                try:
                    best[name] = min(best[name], await side(schema, count))
                finally:
                    await admin.execute(f"DROP SCHEMA {schema} CASCADE")
    finally:
        await admin.close()
    rates: dict[str, Any] = {name: count / seconds for name, seconds in best.items()}
    return [
        Figure(
            "postgres drivers: asyncpg inserts (64 in flight, pool of 8)",
            rates["asyncpg"],
            "inserts/s",
            ratio=rates["asyncpg"] / rates["psycopg"],
            ratio_of="psycopg",
            detail={
                "rows": count,
                "psycopg_per_s": rates["psycopg"],
                "baseline": "psycopg 3 (binary), psycopg_pool, prepare=True (ratio: asyncpg over psycopg)",
            },
        )
    ]


if __name__ == "__main__":
    Harness.main("postgres_drivers", run, __doc__)
