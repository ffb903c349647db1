"""A consumer process for the crash test: prints each payload it processed, then acks it.

Run as ``python crash_consumer.py <url> <key_prefix> <topic> <group>``; it runs until
killed. Each processed payload is printed (and flushed) *before* its XACK, so the
parent knows every entry this process may have handled.
"""

from __future__ import annotations

import asyncio
import sys

from wow_redis import RedisSettings, RedisStreamTransport


async def main(url: str, prefix: str, topic: str, group: str) -> None:
    transport = RedisStreamTransport(
        RedisSettings(url=url, key_prefix=prefix, consumer_name="victim", claim_idle_time=None, batch_size=16)
    )
    receiver = transport.open(group, [topic])
    await receiver.ready()
    receiver.open_processing()
    print("ready", flush=True)
    async for record in receiver:
        print(record.payload, flush=True)
        await asyncio.sleep(0.002)  # the work
        await record.ack()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
