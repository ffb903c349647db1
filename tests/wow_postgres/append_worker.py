"""One of several processes appending to the same aggregates (see test_event_store.py).

``python append_worker.py <dsn> <schema> <aggregate ids, comma-separated> <appends>``:
prints ``ready`` once connected and waits for a line on stdin (so that both processes
start together), then appends ``appends`` streams to each aggregate (one task per
aggregate), each at the version it last read + 1, retrying on a version conflict; prints
``<aggregate id> <stream id>`` for every stream it appended, and ``conflicts <n>`` at
the end.
"""

from __future__ import annotations

import asyncio
import sys

from wow_core.eventsourcing import EventVersionConflictError
from wow_core.model import AggregateId, BodyTypeRegistry, MessageCodec
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, conformance_named_aggregate, make_stream
from wow_postgres import PostgresEventStore, PostgresSettings


async def main(dsn: str, schema: str, aggregates: list[str], appends: int) -> None:
    store = PostgresEventStore(
        PostgresSettings(dsn=dsn, schema_name=schema, pool_max_size=2),
        codec=MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES)),
    )
    conflicts = 0

    async def write(aggregate: str) -> None:
        nonlocal conflicts
        aggregate_id = AggregateId(conformance_named_aggregate(), aggregate, "t0")
        for _ in range(appends):
            while True:
                stream = make_stream(aggregate_id, await store.last_version(aggregate_id) + 1)
                try:
                    await store.append(stream)
                except EventVersionConflictError:
                    conflicts += 1
                    continue
                print(aggregate, stream.id, flush=True)
                break

    try:
        await store.start()
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await asyncio.gather(*(write(aggregate) for aggregate in aggregates))
        print("conflicts", conflicts, flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])))
