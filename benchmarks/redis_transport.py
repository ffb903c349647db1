"""RedisStreamTransport against raw redis-py, same run, same server, same payloads.

- send: ``concurrency`` tasks each awaiting ``transport.send`` in a loop, over raw
  redis-py sending the same entries in pipelines of ``concurrency`` XADDs (the most a
  raw client does with that many entries outstanding). Same fields, same MAXLEN ~.
- consume: iterating a receiver and acknowledging every record, over a raw loop of
  ``XREADGROUP COUNT batch`` + one ``XACK`` of the batch's ids. Same stream contents.

``cpu_ratio`` in each figure's detail is the same comparison on this process's CPU
clock (the client's cost per record), which a busy neighbour disturbs less.

Both sides run ``--repeat`` times alternately against a Redis on 127.0.0.1:6379; the
best round of each is kept (the machine is shared, the best is the least disturbed).
Writes ``benchmarks/results/redis_transport.json``.

    python -m benchmarks.redis_transport [--quick] [--repeat 5]
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable

from redis.asyncio import Redis

from benchmarks._harness import Figure, Harness, ack_each
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, MessageCodec, NamedAggregate
from wow_core.transport import TransportMessage
from wow_redis import RedisSettings, RedisStreamTransport


def payloads(count: int) -> list[tuple[str, str]]:
    """``count`` (key, JSON) pairs: real command messages, as the buses send them."""

    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Deposit:
        amount: int
        note: str

    registry = BodyTypeRegistry([Deposit])
    codec = MessageCodec(registry)
    named = NamedAggregate("bench", "account")
    result = []
    for n in range(count):
        aggregate_id = AggregateId(named, f"acc-{n % 1000}")
        command = CommandMessage(
            aggregate_id=aggregate_id, body=Deposit(n, "benchmark deposit"), name="Deposit"
        )
        result.append((aggregate_id.id, codec.encode(command.with_read_only())))
    return result


async def raw_send(
    client: Redis, topic: str, items: list[tuple[str, str]], concurrency: int, maxlen: int
) -> float:
    timestamp = int(time.time() * 1000)
    started = time.perf_counter()
    for start in range(0, len(items), concurrency):
        async with client.pipeline(transaction=False) as pipe:
            for key, payload in items[start : start + concurrency]:
                # the cheapest raw form (no argument building): the strictest yardstick
                pipe.execute_command(
                    "XADD", topic, "MAXLEN", "~", maxlen, "*", "msg", payload, "key", key, "ts", timestamp
                )
            await pipe.execute()
    return time.perf_counter() - started


async def framework_send(
    transport: RedisStreamTransport, topic: str, items: list[tuple[str, str]], concurrency: int
) -> float:
    timestamp = int(time.time() * 1000)
    messages = [TransportMessage(topic, key, payload, timestamp) for key, payload in items]

    async def worker(share: list[TransportMessage]) -> None:
        for message in share:
            await transport.send(message)

    started = time.perf_counter()
    await asyncio.gather(*(worker(messages[n::concurrency]) for n in range(concurrency)))
    return time.perf_counter() - started


async def raw_consume(client: Redis, topic: str, group: str, count: int, batch: int) -> float:
    await client.xgroup_create(topic, group, id="0", mkstream=True)
    started = time.perf_counter()
    seen = 0
    while seen < count:
        response = await client.xreadgroup(group, "raw", {topic: ">"}, count=batch, block=1000)
        for _, entries in response:
            ids = [entry_id for entry_id, _ in entries]
            seen += len(ids)
            await client.execute_command("XACK", topic, group, *ids)
    return time.perf_counter() - started


async def framework_consume(transport: RedisStreamTransport, topic: str, group: str, count: int) -> float:
    receiver = transport.open(group, [topic])
    await receiver.ready()
    started = time.perf_counter()
    receiver.open_processing()
    await ack_each(receiver, count)
    await receiver.close()  # flushes the last acks: part of the measured work
    return time.perf_counter() - started


URL = "redis://127.0.0.1:6379/0"
CONCURRENCY = 64
READ_BATCH = 128


async def run(h: Harness) -> list[Figure]:
    messages = h.n(50_000)
    prefix = f"wowbench:{uuid.uuid4().hex[:8]}:"
    maxlen = 10 * messages
    items = payloads(messages)
    # the raw client gets the transport's connection options (RESP2, no socket timeout):
    # redis-py 8's defaults (RESP3, a 5 s socket timeout) are slower, and would flatter us
    client = Redis.from_url(URL, protocol=2, socket_timeout=None)
    settings = RedisSettings(
        url=URL,
        key_prefix=prefix,
        maxlen=maxlen,
        batch_size=READ_BATCH,
        group_start="earliest",
        claim_idle_time=None,
    )
    transport = RedisStreamTransport(settings)
    best = dict.fromkeys(("raw_send", "fw_send", "raw_consume", "fw_consume"), float("inf"))
    cpu = dict.fromkeys(best, float("inf"))

    async def measure(name: str, work: Awaitable[float]) -> None:
        started_cpu = time.process_time()
        best[name] = min(best[name], await work)
        cpu[name] = min(cpu[name], time.process_time() - started_cpu)

    try:
        await transport.send(TransportMessage(f"{prefix}warmup", "k", "{}", 0))
        await client.ping()
        for round_no in range(h.repeat):
            await h.hop_once()
            raw_topic, fw_topic = f"{prefix}raw{round_no}", f"{prefix}fw{round_no}"
            # alternate the order so neither side always runs first
            sends = [
                ("raw_send", raw_send(client, raw_topic, items, CONCURRENCY, maxlen)),
                ("fw_send", framework_send(transport, fw_topic, items, CONCURRENCY)),
            ]
            for name, work in sends if round_no % 2 == 0 else reversed(sends):
                await measure(name, work)
            # both consumers read the stream the framework wrote (identical contents)
            await measure("raw_consume", raw_consume(client, fw_topic, "raw", messages, READ_BATCH))
            await measure("fw_consume", framework_consume(transport, fw_topic, "fw", messages))
            await client.delete(raw_topic, fw_topic)
    finally:
        await transport.close()
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    hop = await h.queue_hop()
    common = {"messages": messages, "concurrency": CONCURRENCY, "payload_bytes": len(items[0][1])}
    raw_send_rate, fw_send_rate = messages / best["raw_send"], messages / best["fw_send"]
    raw_consume_rate, fw_consume_rate = messages / best["raw_consume"], messages / best["fw_consume"]
    return [
        Figure(
            "redis transport: send throughput (64 concurrent senders)",
            fw_send_rate,
            "records/s",
            hops=1 / fw_send_rate / hop,
            ratio=fw_send_rate / raw_send_rate,
            ratio_of="raw redis-py",
            detail={
                **common,
                "raw_per_s": raw_send_rate,
                "baseline": "raw redis-py, pipelines of 64 XADDs (same fields, MAXLEN ~)",
                "cpu_ratio": cpu["raw_send"] / cpu["fw_send"],
                "goal_ratio": 0.7,
            },
        ),
        Figure(
            "redis transport: consume and ack throughput",
            fw_consume_rate,
            "records/s",
            hops=1 / fw_consume_rate / hop,
            ratio=fw_consume_rate / raw_consume_rate,
            ratio_of="raw redis-py",
            detail={
                **common,
                "read_batch": READ_BATCH,
                "raw_per_s": raw_consume_rate,
                "baseline": "raw redis-py, XREADGROUP COUNT 128 then one XACK of the batch",
                "cpu_ratio": cpu["raw_consume"] / cpu["fw_consume"],
                "goal_ratio": 0.7,
            },
        ),
    ]


if __name__ == "__main__":
    Harness.main("redis_transport", run, __doc__)
