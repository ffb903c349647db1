"""Command waits across processes: ``send_and_wait(PROCESSED)`` round trips on Redis,
NATS and Kafka, beside the raw client's request-reply and the single-process figure.

Per broker, in one run, rounds alternating between the subjects (the order rotating):

- **cross-process**: the caller is this process, a runtime with a gateway only (it
  hosts nothing); the service is ``wow run benchmarks._wait_peer:app``, a separate OS
  process hosting the aggregate. The command travels on the transport, the ``PROCESSED``
  signal comes back through the transport's ``CommandWaitNotifier`` (a Redis stream, a
  NATS subject kept by the wait stream, the Kafka signal topic).
- **single-process**: caller and aggregate in this process, the same gateway call, the
  same transport; local-first off (the command crosses the broker as it does between
  processes; only the signal stays in the process) and on (the default: the command is
  handed to the local aggregate, its copy still sent).
- **raw request-reply**: the raw client against a responder in a separate OS process
  (``python -m benchmarks._wait_peer responder``): Redis ``PUBLISH`` to a request
  channel and a subscribed reply channel (redis-py), NATS ``request`` (nats-py), Kafka
  produce to a request topic and consume of the reply from a reply topic (aiokafka).

Each subject runs one round trip at a time (p50 / p99 latency) and with 64 in flight
(throughput, p50 / p99). Figures: every throughput in operations/s and in asyncio-queue
hops of the same run, its ratio to the raw request-reply (``ratio``), and the goal of
issue 13: cross-process throughput at 64 in flight >= 0.5 of single-process, local-first
off, on the same transport. Names are unique per run (key prefix, streams, topics) and
removed at the end; Kafka is a ``tansu`` started here (memory storage) unless
``WOW_BENCH_KAFKA_BOOTSTRAP`` or ``WOW_TEST_KAFKA_BOOTSTRAP`` names one; Redis at
``WOW_BENCH_REDIS_URL`` (redis://127.0.0.1:6379/0), NATS at ``WOW_BENCH_NATS_URL``
(nats://127.0.0.1:4222).

    python -m benchmarks.waits [--quick] [--repeat N]
    python -m benchmarks.waits --brokers redis nats   # a subset
    python -m benchmarks.waits --profile redis        # where the time goes (waits_profile.txt)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._harness import RESULTS, Figure, Harness
from benchmarks._wait_peer import AGGREGATE, CONTEXT, PROFILE, Bump, Peer, app
from wow_core.command import CommandStage, CommandWait
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime

BROKERS = ("redis", "nats", "kafka")
IN_FLIGHT = 64
AGGREGATES = 256
GOAL = 0.5
"""Cross-process over single-process (local-first off) throughput at 64 in flight."""
REDIS_URL = os.environ.get("WOW_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("WOW_BENCH_NATS_URL", "nats://127.0.0.1:4222")
TIMEOUT = 30.0
SEQUENTIAL_BUDGET = 4.0
CONCURRENT_BUDGET = 6.0
"""Seconds after which a run starts no more round trips (Kafka on tansu is ~30 ms a round
trip one at a time: 500 would take 15 s per subject and round)."""
COUNTER = NamedAggregate(CONTEXT, AGGREGATE)
PAYLOAD = "x" * 300
"""The raw request's payload: about the size of the benchmark's encoded command."""

RoundTrip = Callable[[int], Awaitable[None]]


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Run:
    """One measured run: ``count`` round trips, ``in_flight`` at a time."""

    seconds: float
    latencies: list[float]
    in_flight: int

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def drive(round_trip: RoundTrip, count: int, in_flight: int, budget: float | None = None) -> Run:
    """``count`` round trips by ``in_flight`` tasks each awaiting one at a time; with
    ``budget``, no round trip starts after that many seconds (a slow broker's run ends
    with fewer, the rate and percentiles are of those done)."""
    indexes = iter(range(count))
    latencies: list[float] = []
    clock = time.perf_counter
    started = clock()
    until = float("inf") if budget is None else started + budget

    async def worker() -> None:
        for index in indexes:  # shared: the tasks take the next index in turn
            began = clock()
            if began > until:
                return
            await round_trip(index)
            latencies.append(clock() - began)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return Run(clock() - started, latencies, in_flight)


@dataclass
class Subject:
    """What one round trip is, for one figure family (``raw``, ``single-off``...)."""

    key: str
    label: str
    round_trip: RoundTrip
    best: dict[int, Run] = field(default_factory=dict)
    """The best run per in-flight count: the highest rate (64), the lowest p50 (1)."""

    def keep(self, run: Run) -> None:
        kept = self.best.get(run.in_flight)
        if kept is None:
            self.best[run.in_flight] = run
        elif run.in_flight == 1 and run.percentile(50) < kept.percentile(50):
            self.best[1] = run
        elif run.in_flight > 1 and run.rate > kept.rate:
            self.best[run.in_flight] = run


# -- the framework's subjects --------------------------------------------------------------


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` while a runtime reads its settings, then as before."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def local_first(enabled: bool) -> dict[str, str]:
    value = "true" if enabled else "false"
    return {
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": value,
        "WOW_EVENT__BUS__LOCAL_FIRST__ENABLED": value,
        "WOW_EVENTSOURCING__STATE__BUS__LOCAL_FIRST__ENABLED": value,
    }


async def started(wow_app: WowApp, env: dict[str, str]) -> WowRuntime:
    with environment(env):
        runtime = wow_app.runtime()
        await runtime.start()
    return runtime


def waiting(runtime: WowRuntime, tag: str) -> RoundTrip:
    """One ``send_and_wait(PROCESSED)`` of a ``Bump`` to one of 256 aggregates (new ones
    for every ``tag``: the first command of each creates it)."""
    gateway = runtime.gateway
    plan = CommandWait.processed()
    ids = [AggregateId(COUNTER, f"{tag}-{n}") for n in range(AGGREGATES)]

    async def round_trip(index: int) -> None:
        command = CommandMessage(ids[index % AGGREGATES], Bump(index), "bump", allow_create=True)
        result = await gateway.send_and_wait(command, plan, timeout=TIMEOUT)
        if not result.succeeded or result.stage is not CommandStage.PROCESSED:
            raise RuntimeError(f"send_and_wait(PROCESSED) failed: {result}")

    return round_trip


# -- the raw clients' request-reply ---------------------------------------------------------


class Replies:
    """Futures of the requests in flight, by id, completed by a reader task."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[None]] = {}

    def expect(self, request: str) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self.waiting[request] = future
        return future

    def arrived(self, request: str) -> None:
        future = self.waiting.pop(request, None)
        if future is not None and not future.done():
            future.set_result(None)


@contextlib.asynccontextmanager
async def raw_redis(prefix: str) -> AsyncIterator[RoundTrip]:
    """PUBLISH ``<reply channel> <id> <payload>`` to the responder's channel; its reply
    arrives on this process's subscribed channel."""
    from redis.asyncio import Redis

    requests, reply = f"{prefix}raw:requests", f"{prefix}raw:reply:{uuid.uuid4().hex}"
    responder = Peer.responder("redis", [REDIS_URL, requests], dict(os.environ))
    client = Redis.from_url(REDIS_URL, protocol=2, socket_timeout=None)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    replies = Replies()

    async def read() -> None:
        while True:
            message = await pubsub.get_message(timeout=1.0)
            if message is not None and message.get("type") == "message":
                replies.arrived(message["data"].partition(b" ")[0].decode())

    reader: asyncio.Task[None] | None = None
    try:
        await responder.ready()
        await pubsub.subscribe(reply)
        reader = asyncio.create_task(read())

        async def round_trip(index: int) -> None:
            request = uuid.uuid4().hex[:16]
            answered = replies.expect(request)
            await client.publish(requests, f"{reply} {request} {PAYLOAD}")
            await asyncio.wait_for(answered, TIMEOUT)

        yield round_trip
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await client.aclose()
        responder.stop()


@contextlib.asynccontextmanager
async def raw_nats(prefix: str) -> AsyncIterator[RoundTrip]:
    """``nc.request`` to the responder's subject (nats-py's shared reply inbox)."""
    import nats

    subject = f"{prefix}raw.requests"
    responder = Peer.responder("nats", [NATS_URL, subject], dict(os.environ))
    client = None
    try:
        await responder.ready()
        client = await nats.connect(NATS_URL)
        payload = PAYLOAD.encode()
        connection = client

        async def round_trip(index: int) -> None:
            await connection.request(subject, payload, timeout=TIMEOUT)

        yield round_trip
    finally:
        if client is not None:
            await client.close()
        responder.stop()


@contextlib.asynccontextmanager
async def raw_kafka(bootstrap: str, prefix: str, fetch_max_wait_ms: int) -> AsyncIterator[RoundTrip]:
    """Produce ``(id, payload)`` to a request topic (awaiting the ack); the responder
    produces it again to a reply topic, which this process reads (one partition each, no
    consumer group)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from wow_kafka import KafkaSettings
    from wow_kafka.connection import common_config
    from wow_kafka.topics import KafkaTopics

    requests, replies_topic = f"{prefix}raw.requests", f"{prefix}raw.replies"
    settings = KafkaSettings(bootstrap_servers=bootstrap, partitions=1)
    topics = KafkaTopics(settings, common_config(settings))
    await topics.ensure([requests, replies_topic])
    await topics.close()
    responder = Peer.responder(
        "kafka",
        [bootstrap, requests, replies_topic, f"--fetch-max-wait-ms={fetch_max_wait_ms}"],
        dict(os.environ),
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )
    replies = Replies()
    payload = PAYLOAD.encode()

    async def read() -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                for record in records:
                    if record.key is not None:
                        replies.arrived(record.key.decode())

    reader: asyncio.Task[None] | None = None
    try:
        await responder.ready()
        await producer.start()
        await consumer.start()
        partition = TopicPartition(replies_topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_end(partition)
        await consumer.position(partition)
        reader = asyncio.create_task(read())

        async def round_trip(index: int) -> None:
            request = uuid.uuid4().hex[:16]
            answered = replies.expect(request)
            await producer.send_and_wait(requests, payload, key=request.encode(), partition=0)
            await asyncio.wait_for(answered, TIMEOUT)

        yield round_trip
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        with contextlib.suppress(Exception):
            await consumer.stop()
        with contextlib.suppress(Exception):
            await producer.stop()
        responder.stop()


# -- brokers: settings, names, clean-up ----------------------------------------------------


@dataclass
class Broker:
    name: str
    env: Callable[[str], dict[str, str]]
    """The settings of every process of one subject, by the subject's unique namespace."""
    raw: Callable[[str], contextlib.AbstractAsyncContextManager[RoundTrip]]
    clean: Callable[[list[str]], Awaitable[None]]
    """Remove everything named under these namespaces."""
    stop: Callable[[], None] = lambda: None


def redis_broker() -> Broker:
    async def clean(spaces: list[str]) -> None:
        from redis.asyncio import Redis

        client = Redis.from_url(REDIS_URL)
        try:
            for space in spaces:
                keys = [key async for key in client.scan_iter(match=f"{space}*", count=500)]
                if keys:
                    await client.delete(*keys)
        finally:
            await client.aclose()

    return Broker(
        "redis",
        lambda space: {"WOW_TRANSPORT": "redis", "WOW_REDIS__URL": REDIS_URL, "WOW_REDIS__KEY_PREFIX": space},
        raw_redis,
        clean,
    )


def nats_broker() -> Broker:
    async def clean(spaces: list[str]) -> None:
        import nats

        client = await nats.connect(NATS_URL)
        try:
            stream = client.jetstream()
            for info in await stream.streams_info():
                name = info.config.name or ""
                if any(name.startswith(stream_prefix(space)) for space in spaces):
                    await stream.delete_stream(name)
        finally:
            await client.close()

    def stream_prefix(space: str) -> str:
        return "wowb" + space.replace(".", "_")

    return Broker(
        "nats",
        lambda space: {
            "WOW_TRANSPORT": "nats",
            "WOW_NATS__SERVERS": NATS_URL,
            "WOW_NATS__STREAM_PREFIX": stream_prefix(space),
            "WOW_MESSAGING__TOPIC_PREFIX": space,
        },
        raw_nats,
        clean,
    )


KAFKA_FETCH_MAX_WAIT_MS = 50
"""The Kafka consumers' fetch wait, the framework's and the raw client's alike (the
tests' value: tansu holds a fetch that long when the partition has nothing)."""


def kafka_broker() -> Broker:
    external = os.environ.get("WOW_BENCH_KAFKA_BOOTSTRAP") or os.environ.get("WOW_TEST_KAFKA_BOOTSTRAP")
    tansu: Any = None
    if external:
        bootstrap = external
    else:
        from tests.wow_kafka.tansu import TansuBroker, tansu_binary

        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("no tansu binary (install the dev group) and no WOW_BENCH_KAFKA_BOOTSTRAP")
        tansu = TansuBroker(binary)
        tansu.start()
        bootstrap = tansu.bootstrap

    async def clean(spaces: list[str]) -> None:
        if tansu is not None:
            return  # memory storage: stopping it removes everything
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            names = [name for name in await admin.list_topics() if name.startswith(tuple(spaces))]
            if names:
                await admin.delete_topics(names)
        finally:
            await admin.close()

    return Broker(
        "kafka",
        lambda space: {
            "WOW_TRANSPORT": "kafka",
            "WOW_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "WOW_KAFKA__TOPIC_PREFIX": space,
            "WOW_KAFKA__SESSION_TIMEOUT_MS": "3000",  # tansu assigns a joining group after half of it
            "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
            "WOW_KAFKA__FETCH_MAX_WAIT_MS": str(KAFKA_FETCH_MAX_WAIT_MS),
            "WOW_KAFKA__AUTO_OFFSET_RESET": "earliest",
        },
        lambda space: raw_kafka(bootstrap, space, KAFKA_FETCH_MAX_WAIT_MS),
        clean,
        stop=(tansu.stop if tansu is not None else lambda: None),
    )


BROKER_FACTORIES: dict[str, Callable[[], Broker]] = {
    "redis": redis_broker,
    "nats": nats_broker,
    "kafka": kafka_broker,
}


# -- one broker ------------------------------------------------------------------------------


SUBJECTS = (
    ("raw", "raw request-reply"),
    ("single_off", "single-process send_and_wait(PROCESSED), local-first off"),
    ("single_on", "single-process send_and_wait(PROCESSED), local-first on"),
    ("cross", "cross-process send_and_wait(PROCESSED)"),
)


@contextlib.asynccontextmanager
async def prepared(
    broker: Broker, keys: tuple[str, ...], service_env: dict[str, str] | None = None
) -> AsyncIterator[tuple[dict[str, Subject], Peer | None]]:
    """The subjects ``keys`` ready and warmed up (connections, topics, groups, the first
    aggregates), and the cross-process service (when ``cross`` is one of them); at the
    end everything is stopped and every name of the run removed from the broker."""
    run_id = uuid.uuid4().hex[:8]
    separator = ":" if broker.name == "redis" else "."
    spaces = {key: f"wb{run_id}{key.replace('_', '')}{separator}" for key in keys}
    labels = dict(SUBJECTS)
    runtimes: list[WowRuntime] = []
    service: Peer | None = None
    subjects: dict[str, Subject] = {}
    try:
        async with contextlib.AsyncExitStack() as stack:
            if "raw" in keys:
                raw = await stack.enter_async_context(broker.raw(spaces["raw"]))
                subjects["raw"] = Subject("raw", labels["raw"], raw)
            for key, enabled in (("single_off", False), ("single_on", True)):
                if key in keys:
                    runtime = await started(app, {**broker.env(spaces[key]), **local_first(enabled)})
                    runtimes.append(runtime)
                    subjects[key] = Subject(key, labels[key], waiting(runtime, key))
            if "cross" in keys:
                cross_env = {**broker.env(spaces["cross"]), **local_first(False)}
                service = Peer.service(
                    {**os.environ, "PYTHONUNBUFFERED": "1", **cross_env, **(service_env or {})}
                )
                await service.ready()
                caller = await started(WowApp("", body_types=[Bump]), cross_env)
                runtimes.append(caller)
                subjects["cross"] = Subject("cross", labels["cross"], waiting(caller, "cross"))
            for subject in subjects.values():
                await drive(subject.round_trip, IN_FLIGHT * 2, IN_FLIGHT)
                await drive(subject.round_trip, 20, 1)
            yield subjects, service
    finally:
        for runtime in reversed(runtimes):
            await runtime.stop()
        if service is not None:
            service.stop()
        await broker.clean(list(spaces.values()))


async def measure_broker(h: Harness, broker: Broker, sequential: int, concurrent: int) -> list[Figure]:
    async with prepared(broker, tuple(key for key, _ in SUBJECTS)) as (subjects, _):
        hop = hop_latency = float("inf")
        order = list(subjects.values())
        for round_no in range(h.repeat):
            hop = min(hop, await h.hop_once())
            hop_latency = min(hop_latency, await h.hop_once(latency=True))
            shift = round_no % len(order)
            for subject in order[shift:] + order[:shift]:
                subject.keep(await drive(subject.round_trip, sequential, 1, SEQUENTIAL_BUDGET))
                subject.keep(await drive(subject.round_trip, concurrent, IN_FLIGHT, CONCURRENT_BUDGET))
            print(f"   {broker.name}: round {round_no + 1} of {h.repeat} done", file=sys.stderr, flush=True)
    return figures_of(broker.name, subjects, hop, hop_latency)


PROFILED = re.compile(r"^profiled$")


async def profile_broker(broker: Broker, concurrent: int) -> Path:
    """pyinstrument profiles of 64 in flight for ``CONCURRENT_BUDGET`` seconds: the caller
    and the service of the cross-process subject, then the single-process one (local-first
    off), into ``results/waits_profile.txt``."""
    from pyinstrument import Profiler

    service_profile = RESULTS / "waits_profile_service.tmp"
    sections: list[str] = []
    async with prepared(broker, ("single_off", "cross"), {PROFILE: str(service_profile)}) as (
        subjects,
        service,
    ):
        assert service is not None
        for key in ("cross", "single_off"):
            profiler = Profiler(async_mode="disabled", interval=0.0005)
            if key == "cross":
                service.process.send_signal(signal.SIGUSR1)
            profiler.start()
            done = await drive(subjects[key].round_trip, concurrent, IN_FLIGHT, CONCURRENT_BUDGET)
            profiler.stop()
            if key == "cross":
                service.process.send_signal(signal.SIGUSR2)
                await service.printed(PROFILED)
            what = f"{subjects[key].label}, {IN_FLIGHT} in flight: {done.rate:,.0f} commands/s"
            text = profiler.output_text(unicode=False, color=False, show_all=False)
            if key == "cross":
                sections.append(f"== {broker.name} {what}: the caller process\n{text}")
                service_text = service_profile.read_text(encoding="utf-8")
                service_profile.unlink()
                sections.append(f"== {broker.name} {what}: the service process\n{service_text}")
            else:
                sections.append(f"== {broker.name} {what}: the one process\n{text}")
    target = RESULTS / "waits_profile.txt"
    target.write_text("\n".join(sections), encoding="utf-8")
    return target


def figures_of(broker: str, subjects: dict[str, Subject], hop: float, hop_latency: float) -> list[Figure]:
    figures: list[Figure] = []
    raw_rate = subjects["raw"].best[IN_FLIGHT].rate
    for key, subject in subjects.items():
        one, many = subject.best[1], subject.best[IN_FLIGHT]
        unit = "round trips/s" if key == "raw" else "commands/s"
        figures.append(
            Figure(
                f"{broker} {subject.label}: throughput, {IN_FLIGHT} in flight",
                many.rate,
                unit,
                hops=1 / many.rate / hop,
                ratio=None if key == "raw" else many.rate / raw_rate,
                ratio_of=None if key == "raw" else subjects["raw"].label,
                detail={
                    "round_trips": len(many.latencies),
                    "in_flight": IN_FLIGHT,
                    "p50_us": round(many.percentile(50) * 1e6, 1),
                    "p99_us": round(many.percentile(99) * 1e6, 1),
                },
            )
        )
        for q in (50, 99):
            figures.append(
                Figure(
                    f"{broker} {subject.label}: latency p{q}, one at a time",
                    one.percentile(q) * 1e6,
                    "µs",
                    # in the detail, not drawn: thousands of hops on Kafka would flatten the plot
                    detail={
                        "round_trips": len(one.latencies),
                        "in_flight": 1,
                        "rate": round(one.rate, 1),
                        "queue_hop_latencies": round(one.percentile(q) / hop_latency, 1),
                    },
                )
            )
    cross, single = subjects["cross"].best[IN_FLIGHT].rate, subjects["single_off"].best[IN_FLIGHT].rate
    default = subjects["single_on"].best[IN_FLIGHT].rate
    figures.append(
        Figure(
            f"{broker} cross-process over single-process throughput, {IN_FLIGHT} in flight",
            cross / single * 100,
            "% of single-process, local-first off",
            detail={
                "ratio": round(cross / single, 3),
                "goal_ratio": GOAL,
                "meets_goal": cross / single >= GOAL,
                "over_single_process_local_first_on": round(cross / default, 3),
                "over_raw_request_reply": round(cross / raw_rate, 3),
                "p50_one_at_a_time_over_raw": round(
                    subjects["cross"].best[1].percentile(50) / subjects["raw"].best[1].percentile(50), 3
                ),
            },
        )
    )
    return figures


async def run(h: Harness) -> list[Figure]:
    sequential = max(50, h.n(500) // 2) if h.quick else h.n(500)
    concurrent = max(IN_FLIGHT * 4, h.n(3200) // 2) if h.quick else h.n(3200)
    if h.options.profile:
        profiled = BROKER_FACTORIES[h.options.profile]()
        try:
            print(f"wrote {await profile_broker(profiled, concurrent)}", file=sys.stderr)
        finally:
            profiled.stop()
        raise SystemExit(0)  # a profile run writes no figures
    figures: list[Figure] = []
    for name in h.options.brokers:
        print(f"== waits on {name}", file=sys.stderr, flush=True)
        broker: Broker | None = None
        began = time.perf_counter()
        try:
            broker = BROKER_FACTORIES[name]()
            figures += await measure_broker(h, broker, sequential, concurrent)
            print(f"== waits on {name}: {time.perf_counter() - began:.0f}s", file=sys.stderr, flush=True)
        except Exception as error:  # a broker that is down: the others still run
            h.failures.append(f"waits on {name}: {error!r}")
            print(f"!! waits on {name} failed: {error!r}", file=sys.stderr, flush=True)
        finally:
            if broker is not None:
                broker.stop()
    return figures


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--brokers",
        nargs="+",
        choices=BROKERS,
        default=list(BROKERS),
        help="measure only these brokers (default: all three)",
    )
    parser.add_argument(
        "--profile",
        choices=BROKERS,
        help="instead: pyinstrument profiles of the cross-process caller and service and of the "
        "single-process subject on this broker, 64 in flight (results/waits_profile.txt)",
    )


if __name__ == "__main__":
    Harness.main("waits", run, __doc__, options, repeat=3)
