"""KafkaTransport against raw aiokafka, on the same broker, same payloads, same run.

- ``send``: N records (encoded commands of 64 aggregates, about 200 bytes) sent with
  ``window`` sends outstanding at a time, each awaited to its broker acknowledgement:
  ``KafkaTransport.send`` against ``AIOKafkaProducer.send_and_wait`` with the same
  producer settings (acks=all, linger 0), on topics created alike (3 partitions; a
  broker's auto-created topic may have another count). Then ``TransportCommandBus.send``
  (the JSON encoding on top) against the same raw figure.
- ``consume``: N records already on a 3-partition topic, read by a fresh group from the
  start: the framework's receiver iterating and acknowledging every record (commits of
  the contiguous watermark every ``commit_interval_ms``) against a raw ``AIOKafkaConsumer``
  taking batches with ``getmany`` and committing after each batch. The time runs from
  processing open (framework) or the first poll (raw), both after the group was joined,
  until the last record was acknowledged and its offset committed. Then the same through
  ``TransportCommandBus`` (decoding and the exchange on top).

The broker is a ``tansu`` started here (memory storage) unless ``WOW_BENCH_KAFKA_BOOTSTRAP``
(or ``WOW_TEST_KAFKA_BOOTSTRAP``) names one.

    python -m benchmarks.kafka_transport [--quick] [--repeat R]
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from benchmarks._harness import ACCOUNT, Figure, Harness, ack_each, codec, commands
from wow_core.messaging import MessageSubscription
from wow_core.model import CommandMessage, TopicKind
from wow_core.transport.bus import TransportCommandBus
from wow_core.transport.spi import TransportMessage
from wow_kafka import KafkaSettings, KafkaTransport
from wow_kafka.connection import common_config, producer_config
from wow_kafka.topics import KafkaTopics

WINDOW = 256


def settings_for(bootstrap: str, **overrides: Any) -> KafkaSettings:
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": "wow-bench",
        "topic_prefix": f"b{uuid.uuid4().hex[:8]}.",
        "partitions": 3,
        "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 500,
        "fetch_max_wait_ms": 100,
        "poll_timeout_ms": 200,
    }
    values.update(overrides)
    return KafkaSettings(**values)


Timing = tuple[float, float]
"""(wall seconds, CPU seconds of this process) of the measured part of one run."""


class Clock:
    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> Timing:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


async def windowed(count: int, send: Callable[[int], Awaitable[Any]]) -> Timing:
    clock = Clock()
    for first in range(0, count, WINDOW):
        await asyncio.gather(*(send(n) for n in range(first, min(count, first + WINDOW))))
    return clock.stop()


# -- send ---------------------------------------------------------------------------------


async def create_topic(settings: KafkaSettings, topic: str) -> None:
    """The same partitions for every topic: a broker's auto-created topic may have others."""
    topics = KafkaTopics(settings, common_config(settings))
    try:
        await topics.ensure([topic])
    finally:
        await topics.close()


async def send_raw(settings: KafkaSettings, records: list[TransportMessage], topic: str) -> Timing:
    await create_topic(settings, topic)
    producer = AIOKafkaProducer(**producer_config(settings, common_config(settings)))
    await producer.start()
    try:
        payloads = [(r.key.encode(), r.payload.encode(), r.timestamp) for r in records]
        await producer.send_and_wait(topic, value=b"warm-up", key=b"w")

        async def send(n: int) -> None:
            key, value, timestamp = payloads[n]
            await producer.send_and_wait(topic, value=value, key=key, timestamp_ms=timestamp)

        return await windowed(len(records), send)
    finally:
        await producer.stop()


async def send_transport(settings: KafkaSettings, records: list[TransportMessage], topic: str) -> Timing:
    await create_topic(settings, topic)
    transport = KafkaTransport(settings)
    try:
        await transport.send(TransportMessage(topic, "w", "warm-up", 0))
        retargeted = [TransportMessage(topic, r.key, r.payload, r.timestamp) for r in records]
        return await windowed(len(records), lambda n: transport.send(retargeted[n]))
    finally:
        await transport.close()


async def send_bus(settings: KafkaSettings, messages: list[CommandMessage[Any]]) -> Timing:
    transport = KafkaTransport(settings)
    bus = TransportCommandBus(transport, codec())
    try:
        await bus.send(messages[0])  # warm-up: topic creation, metadata
        return await windowed(len(messages), lambda n: bus.send(messages[n]))
    finally:
        await bus.close()
        await transport.close()


# -- consume ------------------------------------------------------------------------------


async def fill(settings: KafkaSettings, topic: str, records: list[TransportMessage]) -> None:
    transport = KafkaTransport(settings)
    try:
        await transport.send_many([TransportMessage(topic, r.key, r.payload, r.timestamp) for r in records])
    finally:
        await transport.close()


async def consume_raw(settings: KafkaSettings, topic: str, count: int) -> Timing:
    consumer = AIOKafkaConsumer(
        topic,
        **common_config(settings),
        group_id=f"raw-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_poll_records=settings.max_poll_records,
    )
    await consumer.start()  # joins the group: not timed
    # paused until the clock starts, as the framework's receiver is until processing opens
    consumer.pause(*consumer.assignment())
    try:
        seen = 0
        clock = Clock()
        consumer.resume(*consumer.assignment())
        while seen < count:
            batches = await consumer.getmany(timeout_ms=settings.poll_timeout_ms)
            offsets: dict[TopicPartition, int] = {}
            for tp, records in batches.items():
                for record in records:
                    _ = record.key.decode(), record.value.decode()  # as the framework decodes
                    seen += 1
                offsets[tp] = records[-1].offset + 1
            if offsets:
                await consumer.commit(offsets)
        return clock.stop()
    finally:
        await consumer.stop()


async def consume_transport(settings: KafkaSettings, topic: str, count: int) -> Timing:
    transport = KafkaTransport(settings.model_copy(update={"auto_offset_reset": "earliest"}))
    receiver = transport.open(f"fw-{uuid.uuid4().hex[:8]}", [topic])
    try:
        await receiver.ready()  # joins the group: not timed
        clock = Clock()
        receiver.open_processing()
        await ack_each(receiver, count)
        await receiver.commit()  # the final commit of the watermark is part of the work
        return clock.stop()
    finally:
        await transport.close()


async def consume_bus(settings: KafkaSettings, count: int) -> Timing:
    transport = KafkaTransport(settings.model_copy(update={"auto_offset_reset": "earliest"}))
    bus = TransportCommandBus(transport, codec())
    receiver = bus.receiver(MessageSubscription.of(f"bus-{uuid.uuid4().hex[:8]}", [ACCOUNT]))
    try:
        await receiver.ready()
        clock = Clock()
        receiver.open_processing()
        await ack_each(receiver, count)
        await receiver.transport_receiver.commit()  # type: ignore[attr-defined]
        return clock.stop()
    finally:
        await bus.close()
        await transport.close()


# -- the run ------------------------------------------------------------------------------


def bootstrap_or_tansu() -> tuple[str, Any]:
    external = os.environ.get("WOW_BENCH_KAFKA_BOOTSTRAP") or os.environ.get("WOW_TEST_KAFKA_BOOTSTRAP")
    if external:
        return external, None
    from tests.wow_kafka.tansu import TansuBroker, tansu_binary

    binary = tansu_binary()
    if binary is None:
        raise SystemExit("no tansu binary (install the dev group) and no WOW_BENCH_KAFKA_BOOTSTRAP")
    broker = TansuBroker(binary)
    broker.start()
    return broker.bootstrap, broker


async def rounds(repeat: int, runs: dict[str, Callable[[], Awaitable[Timing]]]) -> dict[str, Timing]:
    """``{name: (best wall seconds, least CPU seconds)}``, the order rotating every round."""
    best: dict[str, tuple[float, float]] = {name: (float("inf"), float("inf")) for name in runs}
    names = list(runs)
    for round_ in range(repeat):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = await runs[name]()
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


async def run(h: Harness) -> list[Figure]:
    bootstrap, broker = bootstrap_or_tansu()
    try:
        return await measure(h, bootstrap)
    finally:
        if broker is not None:
            broker.stop()


async def measure(h: Harness, bootstrap: str) -> list[Figure]:
    count = h.n(20_000)
    settings = settings_for(bootstrap)
    messages = commands(count, note="benchmark deposit")  # about 200-byte payloads
    bus = TransportCommandBus(KafkaTransport(settings), codec())
    records = [bus.encode(message) for message in messages]
    await h.queue_hop()

    async def raw_send() -> Timing:
        return await send_raw(settings, records, f"{settings.topic_prefix}raw.{uuid.uuid4().hex[:6]}")

    async def fw_send() -> Timing:
        return await send_transport(settings, records, f"{settings.topic_prefix}fw.{uuid.uuid4().hex[:6]}")

    async def bus_send() -> Timing:
        return await send_bus(settings_for(bootstrap), messages)

    # Alternate the runs, and which goes first, so that a noisy neighbour (or a broker
    # slowing as it fills) disturbs all alike; keep the best wall time and, apart, the
    # least client CPU time (this process only: the framework's own cost).
    send = await rounds(h.repeat, {"raw": raw_send, "fw": fw_send, "bus": bus_send})

    consume_settings = settings_for(bootstrap)
    topic = KafkaTransport(consume_settings).naming.topic(ACCOUNT, TopicKind.COMMAND)
    await fill(consume_settings, topic, records)
    consume = await rounds(
        h.repeat,
        {
            "raw": lambda: consume_raw(consume_settings, topic, count),
            "fw": lambda: consume_transport(consume_settings, topic, count),
            "bus": lambda: consume_bus(consume_settings, count),
        },
    )
    detail = {"records": count, "window": WINDOW, "payload_bytes": len(records[0].payload)}

    def figure(name: str, results: dict[str, Timing], run: str, unit: str, goal: float | None) -> Figure:
        wall, cpu = results[run]
        extra: dict[str, Any] = {
            "client_cpu_us_per_record": round(cpu / count * 1e6, 2),
            "cpu_ratio": round(results["raw"][1] / cpu, 3),
        }
        if goal is not None:
            extra["goal_ratio"] = goal
        ratio = None if run == "raw" else results["raw"][0] / wall
        ratio_of = None if ratio is None else "raw aiokafka"
        return Figure(name, count / wall, unit, ratio=ratio, ratio_of=ratio_of, detail={**detail, **extra})

    return [
        figure("kafka raw aiokafka send_and_wait", send, "raw", "records/s", None),
        figure("kafka KafkaTransport.send", send, "fw", "records/s", 0.8),
        figure("kafka TransportCommandBus.send (JSON encoding on top)", send, "bus", "messages/s", None),
        figure("kafka raw aiokafka consume and commit", consume, "raw", "records/s", None),
        figure("kafka KafkaTransport receive and ack", consume, "fw", "records/s", 0.7),
        figure(
            "kafka TransportCommandBus receive and ack (decoding on top)", consume, "bus", "messages/s", None
        ),
    ]


if __name__ == "__main__":
    Harness.main("kafka_transport", run, __doc__)
