"""NATS JetStream: wow_nats ``NatsTransport`` over raw nats-py, same run, same server.

Same payload (a 455-byte command JSON), same key header, same concurrency on both sides.

- ``publish``: 256 publishes in flight at once, each complete on its JetStream publish
  ack. Framework: tasks looping ``await transport.send(message)`` (key, timestamp and
  ``Nats-Msg-Id`` headers; retries on transient failures), and the same with
  ``deduplicate`` off (no ``Nats-Msg-Id``: JetStream skips its duplicate lookup). Raw:
  ``js.publish_async`` with at most ``--concurrency`` acks outstanding (the faster of the
  raw ways; tasks looping ``await js.publish(...)`` are measured too).
- ``consume and ack``: N stored records taken from a durable pull consumer and acked
  one by one. Framework: ``NatsReceiver`` iteration + ``record.ack()``. Raw:
  ``sub.fetch(batch)`` + ``msg.ack()`` with the same batch size.

Rounds alternate raw and framework; the best of ``--repeat`` is kept for each.

    python -m benchmarks.nats_jetstream [--quick] [--repeat R] (NATS at WOW_NATS_BENCH_URL
    or nats://127.0.0.1:4222)
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from benchmarks._harness import Figure, Harness, ack_each
from wow_core.transport import TransportMessage
from wow_nats import NatsSettings, NatsTransport

SERVER = os.environ.get("WOW_NATS_BENCH_URL", "nats://127.0.0.1:4222")
CONCURRENCY = 256
BATCH = 64

PAYLOAD = json.dumps(
    {
        "id": "0193f5d2-7c1e-7a55-9f1e-5b2f3c4d5e6f",
        "kind": "command",
        "name": "create_order",
        "aggregate_id": {"context": "bench", "aggregate": "order", "id": "order-000042", "tenant": "t"},
        "header": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "local_first": "false"},
        "body_type": "bench.CreateOrder",
        "body": {"customer": "c-17", "items": [{"sku": "s-1", "qty": 2}, {"sku": "s-9", "qty": 1}]},
        "request_id": "r-0193f5d2",
        "create_time": 1_700_000_000_000,
    }
)
DATA = PAYLOAD.encode()


async def workers(count: int, publish: Callable[[int], Awaitable[object]]) -> float:
    """Seconds to publish ``count`` records with ``CONCURRENCY`` looping tasks."""
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            await publish(index)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return time.perf_counter() - started


async def raw_publish_async(js: nats.js.JetStreamContext, subject: str, count: int) -> float:
    slots = asyncio.Semaphore(CONCURRENCY)
    futures = []
    started = time.perf_counter()
    for index in range(count):
        await slots.acquire()
        future = await js.publish_async(subject, DATA, headers={"Wow-Key": f"order-{index % 512}"})
        future.add_done_callback(lambda _: slots.release())
        futures.append(future)
    await asyncio.gather(*futures)
    return time.perf_counter() - started


async def raw_consume(js: nats.js.JetStreamContext, stream: str, subject: str, count: int) -> float:
    durable = "raw" + uuid.uuid4().hex[:8]
    config = ConsumerConfig(
        durable_name=durable,
        filter_subject=subject,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        max_ack_pending=1000,
    )
    await js.add_consumer(stream, config)
    sub = await js.pull_subscribe_bind(durable, stream=stream)
    got = 0
    started = time.perf_counter()
    while got < count:
        for msg in await sub.fetch(BATCH, timeout=5):
            await msg.ack()
            got += 1
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    await js.delete_consumer(stream, durable)
    return elapsed


async def framework_consume(transport: NatsTransport, topic: str, count: int) -> float:
    receiver = transport.open("bench" + uuid.uuid4().hex[:8], [topic])
    await receiver.ready()
    started = time.perf_counter()
    receiver.open_processing()
    await ack_each(receiver, count)
    elapsed = time.perf_counter() - started
    await receiver.close()
    return elapsed


async def run(h: Harness) -> list[Figure]:
    n = h.n(20_000)
    ns = uuid.uuid4().hex[:8]
    nc = await nats.connect(SERVER)
    js = nc.jetstream(publish_async_max_pending=4000)
    raw_stream, raw_subject = f"benchraw{ns}", f"benchraw{ns}.order.command"
    await js.add_stream(StreamConfig(name=raw_stream, subjects=[f"benchraw{ns}.>"], storage=StorageType.FILE))
    settings = NatsSettings(
        servers=[SERVER], stream_prefix=f"bench{ns}_", fetch_batch=BATCH, deliver_policy="all"
    )
    transport = NatsTransport(settings)
    lean = NatsTransport(settings.model_copy(update={"deduplicate": False}))
    topic = f"wow.bench{ns}.order.command"
    lean_topic = f"wow.bench{ns}.order.event"

    def send(index: int) -> Awaitable[None]:
        return transport.send(TransportMessage(topic, f"order-{index % 512}", PAYLOAD, 1_700_000_000_000))

    def send_lean(index: int) -> Awaitable[None]:
        return lean.send(TransportMessage(lean_topic, f"order-{index % 512}", PAYLOAD, 1_700_000_000_000))

    def request(index: int) -> Awaitable[object]:
        return js.publish(raw_subject, DATA, headers={"Wow-Key": f"order-{index % 512}"})

    best = {name: float("inf") for name in ("framework", "lean", "raw_async", "raw_request")}
    consume = {"framework": float("inf"), "raw": float("inf")}
    try:
        await workers(500, send)  # warm up: connections, streams, code paths
        await workers(500, send_lean)
        await raw_publish_async(js, raw_subject, 500)
        await workers(500, request)
        for _ in range(h.repeat):
            await h.hop_once()
            best["raw_async"] = min(best["raw_async"], await raw_publish_async(js, raw_subject, n))
            best["framework"] = min(best["framework"], await workers(n, send))
            best["lean"] = min(best["lean"], await workers(n, send_lean))
            best["raw_request"] = min(best["raw_request"], await workers(n, request))
        # every stream now holds far more than n records: consume n of them
        for _ in range(h.repeat):
            consume["raw"] = min(consume["raw"], await raw_consume(js, raw_stream, raw_subject, n))
            consume["framework"] = min(consume["framework"], await framework_consume(transport, topic, n))
    finally:
        await js.delete_stream(raw_stream)
        await (await transport.jetstream()).delete_stream(transport.layout.stream(topic))
        await transport.close()
        await lean.close()
        await nc.close()

    hop = await h.queue_hop()
    raw_rate = n / min(best["raw_async"], best["raw_request"])
    publish = n / best["framework"]
    lean_publish = n / best["lean"]
    consumed = n / consume["framework"]
    detail = {"messages": n, "concurrency": CONCURRENCY, "payload_bytes": len(DATA), "server": SERVER}
    return [
        Figure("nats publish: raw nats-py publish_async", n / best["raw_async"], "messages/s", detail=detail),
        Figure("nats publish: raw nats-py publish (tasks)", n / best["raw_request"], "messages/s"),
        Figure(
            "nats publish: NatsTransport.send",
            publish,
            "messages/s",
            hops=best["framework"] / n / hop,
            ratio=publish / raw_rate,
            ratio_of="the faster raw nats-py publish",
            detail={"goal_ratio": 0.8, "baseline_messages_per_second": round(raw_rate)},
        ),
        Figure(
            "nats publish: NatsTransport.send, deduplicate off",
            lean_publish,
            "messages/s",
            hops=best["lean"] / n / hop,
            ratio=lean_publish / raw_rate,
            ratio_of="the faster raw nats-py publish",
            detail={"goal_ratio": 0.8, "note": "WOW_NATS__DEDUPLICATE=false: no Nats-Msg-Id"},
        ),
        Figure(
            "nats consume+ack: raw fetch + ack", n / consume["raw"], "messages/s", detail={"batch": BATCH}
        ),
        Figure(
            "nats consume+ack: NatsReceiver + ack",
            consumed,
            "messages/s",
            hops=consume["framework"] / n / hop,
            ratio=consume["raw"] / consume["framework"],
            ratio_of="raw fetch + ack",
        ),
    ]


if __name__ == "__main__":
    Harness.main("nats_jetstream", run, __doc__)
