"""A group member that takes records and never acknowledges them (see test_transport.py).

``python crash_consumer.py <dsn> <schema> <group> <topic> <count>``: subscribes, prints
``ready``, takes ``count`` records, prints ``held <payloads>`` and waits to be killed.
"""

from __future__ import annotations

import asyncio
import sys

from wow_postgres import PostgresSettings, PostgresTransport


async def main(dsn: str, schema: str, group: str, topic: str, count: int) -> None:
    transport = PostgresTransport(
        PostgresSettings(dsn=dsn, schema_name=schema, pool_max_size=2, lease_time=2.0, poll_interval=0.2)
    )
    receiver = transport.open(group, [topic])
    await receiver.ready()
    receiver.open_processing()
    print("ready", flush=True)
    held: list[str] = []
    async for record in receiver:
        held.append(record.payload)
        if len(held) == count:
            break
    print("held", " ".join(held), flush=True)
    await asyncio.Event().wait()  # until SIGKILL: no close, no hand-back


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
