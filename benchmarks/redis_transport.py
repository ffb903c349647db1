"""RedisStreamTransport against raw redis-py, same run, same server, same payloads.

- send: ``concurrency`` tasks each awaiting ``transport.send`` in a loop, over raw
  redis-py sending the same entries in pipelines of ``concurrency`` XADDs (the most a
  raw client does with that many entries outstanding). Same fields, same MAXLEN ~.
- consume: iterating a receiver and acknowledging every record, over a raw loop of
  ``XREADGROUP COUNT batch`` + one ``XACK`` of the batch's ids. Same stream contents.

Each side runs ``rounds`` times alternately; the best round of each is kept (the
machine is shared, the best is the least disturbed). Writes JSON to
``benchmarks/results/redis_transport.json``.

    python benchmarks/redis_transport.py [--messages 20000] [--concurrency 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
import uuid
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, MessageCodec, NamedAggregate
from wow_core.transport import TransportMessage
from wow_redis import RedisSettings, RedisStreamTransport

RESULTS = Path(__file__).with_name("results") / "redis_transport.json"


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
    started = time.perf_counter()
    for start in range(0, len(items), concurrency):
        async with client.pipeline(transaction=False) as pipe:
            for key, payload in items[start : start + concurrency]:
                # the cheapest raw form (no argument building): the strictest yardstick
                pipe.execute_command("XADD", topic, "MAXLEN", "~", maxlen, "*", "msg", payload, "key", key)
            await pipe.execute()
    return time.perf_counter() - started


async def framework_send(
    transport: RedisStreamTransport, topic: str, items: list[tuple[str, str]], concurrency: int
) -> float:
    messages = [TransportMessage(topic, key, payload, 0) for key, payload in items]

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
    seen = 0
    async for record in receiver:
        await record.ack()
        seen += 1
        if seen == count:
            break
    await receiver.close()  # flushes the last acks: part of the measured work
    return time.perf_counter() - started


async def run(url: str, messages: int, concurrency: int, rounds: int, batch: int) -> dict[str, Any]:
    prefix = f"wowbench:{uuid.uuid4().hex[:8]}:"
    maxlen = 10 * messages
    items = payloads(messages)
    client = Redis.from_url(url)
    settings = RedisSettings(
        url=url,
        key_prefix=prefix,
        maxlen=maxlen,
        batch_size=batch,
        group_start="earliest",
        claim_idle_time=None,
    )
    transport = RedisStreamTransport(settings)
    raw_send_s: list[float] = []
    fw_send_s: list[float] = []
    raw_consume_s: list[float] = []
    fw_consume_s: list[float] = []
    try:
        await transport.send(TransportMessage(f"{prefix}warmup", "k", "{}", 0))
        await client.ping()
        for round_no in range(rounds):
            raw_topic, fw_topic = f"{prefix}raw{round_no}", f"{prefix}fw{round_no}"
            raw_send_s.append(await raw_send(client, raw_topic, items, concurrency, maxlen))
            fw_send_s.append(await framework_send(transport, fw_topic, items, concurrency))
            # both consumers read the stream the framework wrote (identical contents)
            raw_consume_s.append(await raw_consume(client, fw_topic, "raw", messages, batch))
            fw_consume_s.append(await framework_consume(transport, fw_topic, "fw", messages))
            await client.delete(raw_topic, fw_topic)
    finally:
        await transport.close()
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()

    def rate(seconds: list[float]) -> float:
        return messages / min(seconds)

    result = {
        "benchmark": "redis_transport",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "messages": messages,
        "concurrency": concurrency,
        "read_batch": batch,
        "payload_bytes": len(items[0][1]),
        "rounds": rounds,
        "send": {
            "raw_pipelined_xadd_per_s": rate(raw_send_s),
            "framework_per_s": rate(fw_send_s),
            "ratio": rate(fw_send_s) / rate(raw_send_s),
            "goal": 0.7,
        },
        "consume_and_ack": {
            "raw_xreadgroup_xack_per_s": rate(raw_consume_s),
            "framework_per_s": rate(fw_consume_s),
            "ratio": rate(fw_consume_s) / rate(raw_consume_s),
            "goal": 0.7,
        },
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only, do not write the JSON")
    args = parser.parse_args()
    result = asyncio.run(run(args.url, args.messages, args.concurrency, args.rounds, args.batch))
    text = json.dumps(result, indent=2)
    print(text)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text + "\n")


if __name__ == "__main__":
    main()
