"""One of several processes appending to one aggregate (see test_event_store.py).

``python append_worker.py <url> <key_prefix> <aggregate id> <appends>``: appends
``appends`` streams, each at the version it last read + 1, retrying on a version
conflict; prints the id of every stream it appended.
"""

from __future__ import annotations

import asyncio
import sys

from wow_core.eventsourcing import EventVersionConflictError
from wow_core.model import AggregateId, BodyTypeRegistry, MessageCodec
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, conformance_named_aggregate, make_stream
from wow_redis import RedisEventStore, RedisSettings


async def main(url: str, prefix: str, aggregate: str, appends: int) -> None:
    store = RedisEventStore(
        RedisSettings(url=url, key_prefix=prefix),
        codec=MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES)),
    )
    aggregate_id = AggregateId(conformance_named_aggregate(), aggregate, "t0")
    done = 0
    try:
        while done < appends:
            version = await store.last_version(aggregate_id) + 1
            stream = make_stream(aggregate_id, version)
            try:
                await store.append(stream)
            except EventVersionConflictError:
                continue
            print(stream.id, flush=True)
            done += 1
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
