"""A group member for the crash test, run as a subprocess and killed with SIGKILL.

Usage: ``python crash_member.py <server> <stream_prefix> <topic_prefix> <group> <topic> <ack_n>``.
It acknowledges the first ``ack_n`` records it receives and holds every later one
unacknowledged, printing ``ready``, then ``acked <key>`` / ``holding <key>`` per record
(flushed at once, so the parent sees each line before it kills the process).
"""

from __future__ import annotations

import asyncio
import sys

from wow_nats import NatsSettings, NatsTransport


async def main(
    server: str, stream_prefix: str, topic_prefix: str, group: str, topic: str, ack_n: int
) -> None:
    settings = NatsSettings(servers=[server], stream_prefix=stream_prefix, ack_wait=2.0, fetch_batch=4)
    transport = NatsTransport(settings, topic_prefix=topic_prefix)
    receiver = transport.open(group, [topic])
    await receiver.ready()
    receiver.open_processing()
    print("ready", flush=True)
    acked = 0
    async for record in receiver:
        if acked < ack_n:
            await record.ack()
            acked += 1
            # the ack is a publish: make sure it left before announcing it
            await (await transport.connection()).flush()
            print("acked", record.key, flush=True)
        else:
            print("holding", record.key, flush=True)


if __name__ == "__main__":
    server, stream_prefix, topic_prefix, group, topic, ack_n = sys.argv[1:7]
    asyncio.run(main(server, stream_prefix, topic_prefix, group, topic, int(ack_n)))
