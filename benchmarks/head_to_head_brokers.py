"""Head to head on real brokers: wow-py, the raw clients and FastStream, same run, same bodies.

On each broker (Kafka on a ``tansu`` started here, the local Redis and NATS JetStream),
with ~300-byte bodies (``Deposit(amount, note)``: 300 bytes of JSON) keyed over 64
aggregate ids:

- **send** (``--senders`` concurrent senders, 50 by default, each awaiting its send):
  - ``wow gateway SENT``: a user's ``runtime.gateway.send(command)`` (``WowApp`` with
    ``WOW_TRANSPORT=<broker>``, the aggregate hosted elsewhere), returning its SENT
    result: the body validated, the command encoded (wire version 2), the broker's
    acknowledgement of that record awaited (SENT's meaning: docs/transports/spi.md);
  - ``raw awaiting each ack``: the client as a user writes it, the body encoded with
    ``json.dumps`` per send: aiokafka ``send_and_wait``, redis-py ``XADD``, nats-py
    JetStream ``publish``;
  - ``raw pipelined``: the same client batching (aiokafka ``send`` futures gathered per
    sender window, a redis-py pipeline of 50 ``XADD``, nats-py ``publish_async``);
  - ``faststream publish``: ``broker.publish(body_dict, ...)`` awaiting its confirmation
    (Kafka: the producer ack, NATS: the JetStream ack with ``stream=``, Redis: ``XADD``).
- **end to end**: the same sends while one consumer (in the same process) decodes each
  record and acknowledges it; timed from the first send to the last acknowledgement.
  wow-py: a ``TransportCommandBus`` receiver (decoding the envelope, key and topic
  checks, the body rebuilt by its class) acknowledging each exchange; raw: the client's
  consumer with ``json.loads`` and an ack (aiokafka ``getmany`` + commit, Redis
  ``XREADGROUP`` + ``XACK``, a JetStream pull consumer ``fetch`` + ``ack``); FastStream:
  a subscriber whose handler takes the body as a typed dataclass parameter.

Every row runs ``--repeat`` times (3), the order of the rows rotated each repeat; the
JSON (``benchmarks/results/head_to_head_brokers.json``) holds each row's runs, median
and spread (min, max), its CPU time per message (``cpu_us_per_message``: this process's
CPU over the timed part, the broker runs in its own process; on a shared machine wall
throughput of single runs differs up to 10x, CPU per message much less), the ratios of
medians (wow over raw, wow over FastStream; ``cpu_ratio_*``: the peer's µs over wow's) with
their goals (issue 15: send and end to end at least 0.8 of raw and 1.5x FastStream),
``uptime`` load before and after, and the peers skipped (FastStream not installed:
``uv sync --all-packages --group bench``), each with a message. ``head_to_head.py`` runs
this module in its own process and merges the file.

    python -m benchmarks.head_to_head_brokers [--quick] [--repeat 3] [--brokers kafka,redis,nats]
    python -m benchmarks.head_to_head_brokers --brokers nats --rows "send: wow gateway SENT"
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchmarks._harness import Figure, Harness
from wow_core.messaging import MessageSubscription
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, MessageCodec, NamedAggregate
from wow_core.transport.bus import TransportCommandBus

SENDERS = 50
AGGREGATES = 64
ACCOUNT = NamedAggregate("h2h", "account")
REDIS_URL = os.environ.get("WOW_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("WOW_NATS_BENCH_URL", "nats://127.0.0.1:4222")


@dataclass(frozen=True, slots=True)
class Deposit:
    """The body of every row: 300 bytes of JSON."""

    amount: int
    note: str

    __wow_type__ = "h2h.Deposit"


NOTE = "n" * 275
"""``{"amount":12345,"note":"nnn..."}`` is 300 bytes with 5-digit amounts."""


def body(n: int) -> Deposit:
    return Deposit(10_000 + n % 90_000, NOTE)


def body_json(n: int) -> bytes:
    return json.dumps(dataclasses.asdict(body(n)), separators=(",", ":")).encode()


def key(n: int) -> str:
    return f"acc-{n % AGGREGATES}"


def uptime() -> str:
    try:
        with open("/proc/loadavg") as file:
            return " ".join(file.read().split()[:3])
    except OSError:
        return "unknown"


async def senders(count: int, send: Callable[[int], Awaitable[object]], width: int) -> None:
    """``width`` tasks each awaiting one send at a time, until ``count`` were sent."""
    next_index = 0

    async def sender() -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            await send(index)

    await asyncio.gather(*(sender() for _ in range(width)))


Timing = tuple[float, float]
"""(wall seconds, CPU seconds of this process) of one run's timed part."""


class Clock:
    """Wall and CPU time from its creation: the broker runs in its own process, so the CPU
    time is what the client side (the framework, or the raw client) spent per message."""

    __slots__ = ("cpu", "wall")

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> Timing:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


# -- wow-py --------------------------------------------------------------------------------


class WowSide:
    """A user's runtime over the broker, the commands built beforehand (as a caller has them)."""

    def __init__(self, broker: str, env: dict[str, str]) -> None:
        self.broker = broker
        self.env = env

    def runtime(self) -> Any:
        from wow_core.runtime.app import WowApp
        from wow_core.runtime.settings import WowSettings

        saved = {name: os.environ.get(name) for name in self.env}
        os.environ.update(self.env)
        try:
            return WowApp("h2hclient", body_types=[Deposit]).runtime(WowSettings(transport=self.broker))
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    @staticmethod
    def commands(count: int) -> list[CommandMessage[Any]]:
        ids = [AggregateId(ACCOUNT, key(n)) for n in range(AGGREGATES)]
        return [CommandMessage(ids[n % AGGREGATES], body(n), "deposit") for n in range(count)]

    async def send(self, count: int, width: int) -> Timing:
        runtime = self.runtime()
        async with runtime:
            gateway = runtime.gateway
            await gateway.send(self.commands(1)[0])  # connections, topic or stream creation
            commands = self.commands(count)
            started = Clock()
            await senders(count, lambda n: gateway.send(commands[n]), width)
            return started.stop()

    async def end_to_end(self, count: int, width: int) -> Timing:
        runtime = self.runtime()
        async with runtime:
            gateway = runtime.gateway
            bus = TransportCommandBus(runtime.transport, MessageCodec(BodyTypeRegistry([Deposit])))
            receiver = bus.receiver(MessageSubscription.of(unique("e2e"), [ACCOUNT]))
            try:
                await receiver.ready()
                receiver.open_processing()
                await gateway.send(self.commands(1)[0])
                commands = self.commands(count)

                async def consume() -> None:
                    seen = 0
                    async for exchange in receiver:
                        await exchange.ack()
                        if exchange.message.body.amount >= 0:
                            seen += 1
                        if seen == count + 1:  # the warm-up one too
                            return

                started = Clock()
                consumer = asyncio.ensure_future(consume())
                await senders(count, lambda n: gateway.send(commands[n]), width)
                await asyncio.wait_for(consumer, 120)
                return started.stop()
            finally:
                await receiver.close()
                await bus.close()


# -- Kafka ---------------------------------------------------------------------------------


class KafkaRows:
    broker = "kafka"

    def __init__(self, bootstrap: str) -> None:
        from wow_kafka import KafkaSettings

        self.bootstrap = bootstrap
        self.prefix = unique("h2h") + "."
        self.settings = KafkaSettings(
            bootstrap_servers=bootstrap,
            topic_prefix=self.prefix,
            partitions=3,
            session_timeout_ms=3000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
            auto_offset_reset="earliest",
        )
        self.wow = WowSide(
            "kafka",
            {
                "WOW_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
                "WOW_KAFKA__TOPIC_PREFIX": self.prefix,
                "WOW_KAFKA__PARTITIONS": "3",
                "WOW_KAFKA__SESSION_TIMEOUT_MS": "3000",
                "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
                "WOW_KAFKA__FETCH_MAX_WAIT_MS": "100",
                "WOW_KAFKA__AUTO_OFFSET_RESET": "earliest",
            },
        )

    def producer_config(self) -> dict[str, Any]:
        from wow_kafka.connection import common_config, producer_config

        return producer_config(self.settings, common_config(self.settings))

    async def topic(self) -> str:
        from wow_kafka.connection import common_config
        from wow_kafka.topics import KafkaTopics

        name = unique(self.prefix)
        topics = KafkaTopics(self.settings, common_config(self.settings))
        try:
            await topics.ensure([name])
        finally:
            await topics.close()
        return name

    async def _producer(self) -> Any:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**self.producer_config())
        await producer.start()
        return producer

    async def raw_send(self, count: int, width: int) -> Timing:
        topic = await self.topic()
        producer = await self._producer()
        try:
            await producer.send_and_wait(topic, value=b"{}", key=b"w")
            started = Clock()
            await senders(
                count,
                lambda n: producer.send_and_wait(topic, value=body_json(n), key=key(n).encode()),
                width,
            )
            return started.stop()
        finally:
            await producer.stop()

    async def raw_pipelined(self, count: int, width: int) -> Timing:
        topic = await self.topic()
        producer = await self._producer()
        try:
            await producer.send_and_wait(topic, value=b"{}", key=b"w")
            started = Clock()
            futures = [
                await producer.send(topic, value=body_json(n), key=key(n).encode()) for n in range(count)
            ]
            await asyncio.gather(*futures)
            return started.stop()
        finally:
            await producer.stop()

    def _faststream(self) -> Any:
        from faststream.kafka import KafkaBroker

        config = self.producer_config()
        return KafkaBroker(
            self.bootstrap, acks=config["acks"], enable_idempotence=config["enable_idempotence"]
        )

    async def faststream_send(self, count: int, width: int) -> Timing:
        topic = await self.topic()
        broker = self._faststream()
        await broker.connect()
        try:
            await broker.publish({"amount": 1, "note": "w"}, topic, key=b"w")
            started = Clock()
            await senders(
                count,
                lambda n: broker.publish(dataclasses.asdict(body(n)), topic, key=key(n).encode()),
                width,
            )
            return started.stop()
        finally:
            await broker.stop()

    async def raw_end_to_end(self, count: int, width: int) -> Timing:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from wow_kafka.connection import common_config

        topic = await self.topic()
        producer = await self._producer()
        consumer = AIOKafkaConsumer(
            topic,
            **common_config(self.settings),
            group_id=unique("raw"),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=3000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            await producer.send_and_wait(topic, value=b'{"amount":0,"note":""}', key=b"w")

            async def consume() -> None:
                seen = 0
                while seen < count + 1:
                    batches = await consumer.getmany(timeout_ms=200)
                    offsets: dict[TopicPartition, int] = {}
                    for tp, records in batches.items():
                        for record in records:
                            json.loads(record.value)
                            seen += 1
                        offsets[tp] = records[-1].offset + 1
                    if offsets:
                        await consumer.commit(offsets)

            started = Clock()
            task = asyncio.ensure_future(consume())
            await senders(
                count,
                lambda n: producer.send_and_wait(topic, value=body_json(n), key=key(n).encode()),
                width,
            )
            await asyncio.wait_for(task, 120)
            return started.stop()
        finally:
            await consumer.stop()
            await producer.stop()

    async def faststream_end_to_end(self, count: int, width: int) -> Timing:
        topic = await self.topic()
        broker = self._faststream()
        done = asyncio.Event()
        seen = 0

        @broker.subscriber(topic, group_id=unique("fs"), auto_offset_reset="earliest")  # type: ignore[misc]
        async def handle(message: Deposit) -> None:
            nonlocal seen
            seen += 1
            if seen == count + 1:
                done.set()

        await broker.start()
        try:
            await broker.publish({"amount": 0, "note": ""}, topic, key=b"w")
            started = Clock()
            await senders(
                count,
                lambda n: broker.publish(dataclasses.asdict(body(n)), topic, key=key(n).encode()),
                width,
            )
            await asyncio.wait_for(done.wait(), 120)
            return started.stop()
        finally:
            await broker.stop()

    async def cleanup(self) -> None:
        return None  # tansu is started for this run and stopped after it


# -- Redis ---------------------------------------------------------------------------------


class RedisRows:
    broker = "redis"

    def __init__(self) -> None:
        self.prefix = unique("h2h-")
        self.wow = WowSide(
            "redis",
            {
                "WOW_REDIS__URL": REDIS_URL,
                "WOW_REDIS__KEY_PREFIX": self.prefix + ":",
                "WOW_MESSAGING__TOPIC_PREFIX": self.prefix + ".",
            },
        )

    def client(self) -> Any:
        from redis.asyncio import Redis

        return Redis.from_url(REDIS_URL, max_connections=SENDERS + 4)

    def stream(self) -> str:
        return unique(self.prefix + ":raw:")

    async def raw_send(self, count: int, width: int) -> Timing:
        client = self.client()
        stream = self.stream()
        try:
            await client.xadd(stream, {"key": "w", "payload": b"{}"})
            started = Clock()
            await senders(
                count, lambda n: client.xadd(stream, {"key": key(n), "payload": body_json(n)}), width
            )
            return started.stop()
        finally:
            await client.aclose()

    async def raw_pipelined(self, count: int, width: int) -> Timing:
        client = self.client()
        stream = self.stream()
        try:
            await client.xadd(stream, {"key": "w", "payload": b"{}"})
            started = Clock()
            for first in range(0, count, SENDERS):
                async with client.pipeline(transaction=False) as pipe:
                    for n in range(first, min(count, first + SENDERS)):
                        pipe.xadd(stream, {"key": key(n), "payload": body_json(n)})
                    await pipe.execute()
            return started.stop()
        finally:
            await client.aclose()

    async def faststream_send(self, count: int, width: int) -> Timing:
        from faststream.redis import RedisBroker

        stream = self.stream()
        broker = RedisBroker(REDIS_URL, max_connections=SENDERS + 4)
        await broker.connect()
        try:
            await broker.publish({"amount": 1, "note": "w"}, stream=stream)
            started = Clock()
            await senders(count, lambda n: broker.publish(dataclasses.asdict(body(n)), stream=stream), width)
            return started.stop()
        finally:
            await broker.stop()

    async def raw_end_to_end(self, count: int, width: int) -> Timing:
        client = self.client()
        stream = self.stream()
        group = "raw"
        try:
            await client.xgroup_create(stream, group, id="0", mkstream=True)

            async def consume() -> None:
                seen = 0
                while seen < count:
                    batches = await client.xreadgroup(group, "c1", {stream: ">"}, count=128, block=1000)
                    for _, entries in batches:
                        ids = []
                        for entry_id, fields in entries:
                            json.loads(fields[b"payload"])
                            ids.append(entry_id)
                            seen += 1
                        if ids:
                            await client.xack(stream, group, *ids)

            started = Clock()
            task = asyncio.ensure_future(consume())
            await senders(
                count, lambda n: client.xadd(stream, {"key": key(n), "payload": body_json(n)}), width
            )
            await asyncio.wait_for(task, 120)
            return started.stop()
        finally:
            await client.aclose()

    async def faststream_end_to_end(self, count: int, width: int) -> Timing:
        from faststream.redis import RedisBroker, StreamSub

        stream = self.stream()
        broker = RedisBroker(REDIS_URL, max_connections=SENDERS + 4)
        done = asyncio.Event()
        seen = 0

        @broker.subscriber(stream=StreamSub(stream, group="fs", consumer="c1", last_id="0"))  # type: ignore[misc]
        async def handle(message: Deposit) -> None:
            nonlocal seen
            seen += 1
            if seen == count:
                done.set()

        await broker.start()
        try:
            started = Clock()
            await senders(count, lambda n: broker.publish(dataclasses.asdict(body(n)), stream=stream), width)
            await asyncio.wait_for(done.wait(), 120)
            return started.stop()
        finally:
            await broker.stop()

    async def cleanup(self) -> None:
        client = self.client()
        try:
            keys = [found async for found in client.scan_iter(match=f"{self.prefix}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


# -- NATS ----------------------------------------------------------------------------------


class NatsRows:
    broker = "nats"

    def __init__(self) -> None:
        self.prefix = unique("h2h")
        self.streams: list[str] = []
        self.wow = WowSide(
            "nats",
            {
                "WOW_NATS__SERVERS": NATS_URL,
                "WOW_NATS__STREAM_PREFIX": self.prefix.upper() + "_",
                "WOW_MESSAGING__TOPIC_PREFIX": self.prefix + ".",
            },
        )

    async def js(self) -> tuple[Any, Any, str, str]:
        import nats
        from nats.js.api import StorageType, StreamConfig

        client = await nats.connect(NATS_URL)
        js = client.jetstream()
        name = unique(self.prefix.upper() + "_RAW")
        subject = f"{name.lower()}.records"
        await js.add_stream(StreamConfig(name=name, subjects=[subject], storage=StorageType.FILE))
        self.streams.append(name)
        return client, js, name, subject

    async def raw_send(self, count: int, width: int) -> Timing:
        client, js, _, subject = await self.js()
        try:
            await js.publish(subject, b"{}", headers={"Wow-Key": "w"})
            started = Clock()
            await senders(
                count, lambda n: js.publish(subject, body_json(n), headers={"Wow-Key": key(n)}), width
            )
            return started.stop()
        finally:
            await client.close()

    async def raw_pipelined(self, count: int, width: int) -> Timing:
        client, js, _, subject = await self.js()
        try:
            await js.publish(subject, b"{}", headers={"Wow-Key": "w"})
            started = Clock()
            futures = [
                await js.publish_async(subject, body_json(n), headers={"Wow-Key": key(n)})
                for n in range(count)
            ]
            await asyncio.gather(*futures)
            return started.stop()
        finally:
            await client.close()

    async def faststream_send(self, count: int, width: int) -> Timing:
        from faststream.nats import NatsBroker

        client, _, name, subject = await self.js()
        await client.close()
        broker = NatsBroker(NATS_URL)
        await broker.connect()
        try:
            await broker.publish({"amount": 1, "note": "w"}, subject, stream=name)
            started = Clock()
            await senders(
                count,
                lambda n: broker.publish(
                    dataclasses.asdict(body(n)), subject, stream=name, headers={"Wow-Key": key(n)}
                ),
                width,
            )
            return started.stop()
        finally:
            await broker.stop()

    async def raw_end_to_end(self, count: int, width: int) -> Timing:
        from nats.errors import TimeoutError as NatsTimeout

        client, js, name, subject = await self.js()
        try:
            sub = await js.pull_subscribe(subject, durable="raw", stream=name)

            async def consume() -> None:
                seen = 0
                while seen < count:
                    try:
                        messages = await sub.fetch(64, timeout=1)
                    except NatsTimeout:
                        continue
                    for message in messages:
                        json.loads(message.data)
                        await message.ack()
                        seen += 1

            started = Clock()
            task = asyncio.ensure_future(consume())
            await senders(
                count, lambda n: js.publish(subject, body_json(n), headers={"Wow-Key": key(n)}), width
            )
            await asyncio.wait_for(task, 120)
            return started.stop()
        finally:
            await client.close()

    async def faststream_end_to_end(self, count: int, width: int) -> Timing:
        from faststream.nats import JStream, NatsBroker, PullSub

        client, _, name, subject = await self.js()
        await client.close()
        broker = NatsBroker(NATS_URL)
        done = asyncio.Event()
        seen = 0

        @broker.subscriber(  # type: ignore[misc]
            subject, stream=JStream(name, declare=False), durable="fs", pull_sub=PullSub(64, timeout=1)
        )
        async def handle(message: Deposit) -> None:
            nonlocal seen
            seen += 1
            if seen == count:
                done.set()

        await broker.start()
        try:
            started = Clock()
            await senders(
                count,
                lambda n: broker.publish(
                    dataclasses.asdict(body(n)), subject, stream=name, headers={"Wow-Key": key(n)}
                ),
                width,
            )
            await asyncio.wait_for(done.wait(), 120)
            return started.stop()
        finally:
            await broker.stop()

    async def cleanup(self) -> None:
        import nats

        client = await nats.connect(NATS_URL)
        try:
            js = client.jetstream()
            for info in await js.streams_info():
                if info.config.name and info.config.name.startswith(self.prefix.upper()):
                    await js.delete_stream(info.config.name)
        finally:
            await client.close()


# -- the run -------------------------------------------------------------------------------


def faststream_missing() -> str | None:
    try:
        import faststream  # noqa: F401
    except ImportError:
        return "FastStream is not installed (uv sync --all-packages --group bench): its rows are skipped"
    return None


Row = tuple[str, str, str]
"""(broker, measure, implementation)."""


async def measure(h: Harness, rows: Any, count: int, skipped: list[str]) -> dict[Row, list[Timing]]:
    width = int(getattr(h.options, "senders", SENDERS))
    runs: dict[Row, Callable[[], Awaitable[Timing]]] = {
        (rows.broker, "send", "wow gateway SENT"): lambda: rows.wow.send(count, width),
        (rows.broker, "send", "raw awaiting each ack"): lambda: rows.raw_send(count, width),
        (rows.broker, "send", "raw pipelined"): lambda: rows.raw_pipelined(count, width),
        (rows.broker, "end to end", "wow"): lambda: rows.wow.end_to_end(count, width),
        (rows.broker, "end to end", "raw"): lambda: rows.raw_end_to_end(count, width),
    }
    if not skipped:
        runs[(rows.broker, "send", "faststream publish")] = lambda: rows.faststream_send(count, width)
        runs[(rows.broker, "end to end", "faststream")] = lambda: rows.faststream_end_to_end(count, width)
    only = [name.strip() for name in str(getattr(h.options, "rows", "") or "").split(",") if name.strip()]
    if only:  # e.g. --rows "send: wow gateway SENT" (to profile one row alone)
        runs = {row: run for row, run in runs.items() if f"{row[1]}: {row[2]}" in only}
    seconds: dict[Row, list[Timing]] = {row: [] for row in runs}
    names = list(runs)
    for repeat in range(h.repeat):
        shift = (repeat * 3) % len(names)
        for row in names[shift:] + names[:shift]:
            try:
                seconds[row].append(await runs[row]())
            except Exception as error:  # a broker that is down, a peer's API changed
                h.failures.append(f"{' / '.join(row)}: {type(error).__name__}: {error}")
    return seconds


def summarise(count: int, seconds: dict[Row, list[Timing]]) -> tuple[list[dict[str, Any]], list[Figure]]:
    """Throughput (wall) and CPU µs per message of each row; the ratios of both to raw and
    FastStream (CPU: the peer's µs over wow's, so above 1 is better, like throughput)."""
    table: list[dict[str, Any]] = []
    medians: dict[Row, float] = {}
    cpu_medians: dict[Row, float] = {}
    for (broker, what, impl), runs in seconds.items():
        if not runs:
            continue
        rates = [count / wall for wall, _ in runs]
        cpu = [cpu_s / count * 1e6 for _, cpu_s in runs]
        medians[(broker, what, impl)] = statistics.median(rates)
        cpu_medians[(broker, what, impl)] = statistics.median(cpu)
        table.append(
            {
                "broker": broker,
                "measure": what,
                "implementation": impl,
                "unit": "messages/s",
                "median": round(statistics.median(rates), 1),
                "min": round(min(rates), 1),
                "max": round(max(rates), 1),
                "runs": [round(r, 1) for r in rates],
                "cpu_us_per_message": round(statistics.median(cpu), 1),
                "cpu_runs": [round(c, 1) for c in cpu],
                "messages": count,
            }
        )
    figures: list[Figure] = []
    for row in table:
        broker, what, impl = row["broker"], row["measure"], row["implementation"]
        ratio = ratio_of = None
        detail: dict[str, Any] = {"min": row["min"], "max": row["max"], "runs": row["runs"]}
        if impl.startswith("wow"):
            raw = medians.get((broker, what, "raw awaiting each ack" if what == "send" else "raw"))
            peer = medians.get((broker, what, "faststream publish" if what == "send" else "faststream"))
            raw_row = (broker, what, "raw awaiting each ack" if what == "send" else "raw")
            peer_row = (broker, what, "faststream publish" if what == "send" else "faststream")
            own_cpu = cpu_medians[(broker, what, impl)]
            if raw:
                ratio = medians[(broker, what, impl)] / raw
                ratio_of = f"{broker} {what}: {raw_row[2]}"
                row["ratio_to_raw"] = detail["ratio_to_raw"] = round(ratio, 3)
                row["goal_ratio_to_raw"] = detail["goal_ratio_to_raw"] = 0.8
                if own_cpu > 0 and raw_row in cpu_medians:
                    row["cpu_ratio_to_raw"] = detail["cpu_ratio_to_raw"] = round(
                        cpu_medians[raw_row] / own_cpu, 3
                    )
            if peer:
                row["ratio_to_faststream"] = detail["ratio_to_faststream"] = round(
                    medians[(broker, what, impl)] / peer, 3
                )
                row["goal_ratio_to_faststream"] = detail["goal_ratio_to_faststream"] = 1.5
                if own_cpu > 0 and peer_row in cpu_medians:
                    row["cpu_ratio_to_faststream"] = detail["cpu_ratio_to_faststream"] = round(
                        cpu_medians[peer_row] / own_cpu, 3
                    )
        detail["cpu_us_per_message"] = row["cpu_us_per_message"]
        figures.append(
            Figure(
                f"{broker} {what}: {impl}",
                row["median"],
                "messages/s",
                ratio=ratio,
                ratio_of=ratio_of,
                detail=detail,
            )
        )
    return table, figures


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", default="kafka,redis,nats", help="comma-separated: kafka,redis,nats")
    parser.add_argument("--senders", type=int, default=SENDERS, help="concurrent senders")
    parser.add_argument("--messages", type=int, default=None, help="messages per row and run")
    parser.add_argument(
        "--rows",
        default="",
        help='comma-separated "<measure>: <implementation>" rows to run alone, e.g. "send: wow gateway SENT"',
    )


REPORT: dict[str, Any] = {}


async def run(h: Harness) -> list[Figure]:
    count = int(h.options.messages or h.n(4000))
    brokers = [b.strip() for b in str(h.options.brokers).split(",") if b.strip()]
    skipped = [reason] if (reason := faststream_missing()) else []
    for reason in skipped:
        print(reason, flush=True)
    load_before = uptime()
    seconds: dict[Row, list[Timing]] = {}
    for name in brokers:
        if name == "kafka":
            from benchmarks.kafka_transport import bootstrap_or_tansu

            bootstrap, tansu = bootstrap_or_tansu()
            try:
                kafka = KafkaRows(bootstrap)
                seconds.update(await measure(h, kafka, count, skipped))
            finally:
                if tansu is not None:
                    tansu.stop()
        elif name == "redis":
            redis_rows = RedisRows()
            try:
                seconds.update(await measure(h, redis_rows, count, skipped))
            finally:
                await redis_rows.cleanup()
        elif name == "nats":
            nats_rows = NatsRows()
            try:
                seconds.update(await measure(h, nats_rows, count, skipped))
            finally:
                await nats_rows.cleanup()
        else:
            h.failures.append(f"unknown broker {name!r}")
    table, figures = summarise(count, seconds)
    REPORT.update(
        {
            "load_before": load_before,
            "load_after": uptime(),
            "senders": int(h.options.senders),
            "body_bytes": len(body_json(0)),
            "envelope_bytes": len(
                MessageCodec(BodyTypeRegistry([Deposit])).encode(WowSide.commands(1)[0]).encode()
            ),
            "rows": table,
            "only": str(getattr(h.options, "rows", "") or ""),
            "skipped": skipped,
        }
    )
    return figures


def main() -> None:
    original = Harness.write

    def write(benchmark: str, figures: list[Figure], report: dict[str, Any]) -> Any:
        if REPORT.get("only"):  # some rows alone: not the full run's file
            benchmark += ".rows"
        return original(benchmark, figures, {**report, **REPORT})

    Harness.write = staticmethod(write)  # type: ignore[method-assign]
    Harness.main("head_to_head_brokers", run, __doc__, options, repeat=3)


if __name__ == "__main__":
    main()
