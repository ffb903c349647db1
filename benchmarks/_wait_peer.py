"""The other process of the cross-process wait benchmark (:mod:`benchmarks.waits`).

- ``wow run benchmarks._wait_peer:app``: the service, hosting the one aggregate the
  benchmark's commands go to (configured by the environment, as any ``wow run``);
- ``python -m benchmarks._wait_peer responder {redis,nats,kafka} ...``: the raw clients'
  responder of the request-reply baseline, answering every request with its payload
  (Redis: ``PUBLISH`` to the reply channel the request names; NATS: ``msg.respond``;
  Kafka: a record on the reply topic keyed like the request). It prints ``ready`` once
  subscribed (or positioned), then serves until SIGTERM or its standard input closes.

:class:`Peer` starts either as a separate OS process and waits for its ready line.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from wow_core.modeling import aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp

CONTEXT = "waitbench"
AGGREGATE = "counter"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Tally:
    value: int = 0


@dataclass(frozen=True, slots=True)
class Bump:
    by: int
    note: str = "cross-process wait benchmark"


@dataclass(frozen=True, slots=True)
class Bumped:
    by: int


@aggregate(CONTEXT, AGGREGATE, state=Tally)
class Counter:
    @on_command(allow_create=True)
    def bump(self, state: Tally, body: Bump) -> Bumped:
        return Bumped(body.by)

    @on_sourcing
    def bumped(self, state: Tally, event: Bumped) -> Tally:
        return Tally(state.value + event.by)


PROFILE = "WOW_BENCH_PROFILE"
"""A file path: the service profiles itself (pyinstrument) from SIGUSR1 to SIGUSR2, writes
the text profile there and prints ``profiled``."""


def profiling(runtime: object) -> None:
    """The installer behind :data:`PROFILE` (nothing without it)."""
    path = os.environ.get(PROFILE)
    if not path:
        return
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="disabled", interval=0.0005)

    def begin(*_: object) -> None:
        profiler.start()

    def end(*_: object) -> None:
        profiler.stop()
        text = profiler.output_text(unicode=False, color=False, show_all=False)
        Path(path).write_text(text, encoding="utf-8")
        print("profiled", flush=True)

    signal.signal(signal.SIGUSR1, begin)
    signal.signal(signal.SIGUSR2, end)


app = WowApp("waitbench", aggregates=[Counter], installers=[profiling])
"""The service: ``wow run benchmarks._wait_peer:app``."""

SERVING = re.compile(r"serving (\S+); SIGINT or SIGTERM stops")
READY = re.compile(r"^ready\b")


class Peer:
    """One separate OS process of the benchmark; its output lines are kept."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], ready: re.Pattern[str]) -> None:
        self.name = name
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: collections.deque[str] = collections.deque(maxlen=2000)
        """The last lines of its output."""
        self._ready_line = ready
        self._ended = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name=f"{name}-output", daemon=True).start()

    @classmethod
    def service(cls, env: dict[str, str]) -> Peer:
        """``wow run benchmarks._wait_peer:app``, configured by ``env``."""
        wow = str(Path(sys.executable).parent / "wow")
        return cls("service", [wow, "run", "benchmarks._wait_peer:app"], env, SERVING)

    @classmethod
    def responder(cls, broker: str, arguments: list[str], env: dict[str, str]) -> Peer:
        command = [sys.executable, "-m", "benchmarks._wait_peer", "responder", broker, *arguments]
        return cls(f"{broker} responder", command, env, READY)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def _waited(self, pattern: re.Pattern[str], timeout: float) -> bool:
        def seen() -> bool:
            return any(pattern.search(line) for line in self.lines)

        with self._changed:
            self._changed.wait_for(lambda: seen() or self._ended, timeout)
            return seen()

    async def printed(self, pattern: re.Pattern[str], timeout: float = 60.0) -> None:
        """Until the process printed a line ``pattern`` finds; raises if it ended or timed out first."""
        if not await asyncio.to_thread(self._waited, pattern, timeout):
            self.stop()
            raise RuntimeError(
                f"{self.name} did not print {pattern.pattern!r}:\n{''.join(list(self.lines)[-30:])}"
            )

    async def ready(self, timeout: float = 60.0) -> None:
        """Until the process printed its ready line; raises if it ended or timed out first."""
        await self.printed(self._ready_line, timeout)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


# -- the raw responders -------------------------------------------------------------------


async def respond_redis(url: str, channel: str) -> None:
    """Every request on ``channel`` is ``<reply channel> <id> <payload>``: PUBLISH
    ``<id> <payload>`` to the reply channel."""
    from redis.asyncio import Redis

    client = Redis.from_url(url, protocol=2, socket_timeout=None)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(channel)
    print("ready", flush=True)
    try:
        while True:
            message = await pubsub.get_message(timeout=1.0)
            if message is None or message.get("type") != "message":
                continue
            reply, _, rest = message["data"].partition(b" ")
            await client.publish(reply, rest)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await client.aclose()


async def respond_nats(url: str, subject: str) -> None:
    """Every request on ``subject`` is answered with its payload (``msg.respond``)."""
    import nats
    from nats.aio.msg import Msg

    client = await nats.connect(url)

    async def answer(message: Msg) -> None:
        await message.respond(message.data)

    await client.subscribe(subject, cb=answer)
    await client.flush()
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await client.close()


async def respond_kafka(bootstrap: str, requests: str, replies: str, fetch_max_wait_ms: int) -> None:
    """Every record of ``requests`` (partition 0, read from its end, no group) is produced
    again to ``replies`` with the same key and value, each send awaited to its ack."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )
    await producer.start()
    await consumer.start()
    partition = TopicPartition(requests, 0)
    consumer.assign([partition])
    await consumer.seek_to_end(partition)
    await consumer.position(partition)
    print("ready", flush=True)
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=1000)
            sends = [
                await producer.send(replies, record.value, key=record.key, partition=0)
                for records in batches.values()
                for record in records
            ]
            await asyncio.gather(*sends)
    finally:
        await consumer.stop()
        await producer.stop()


async def _serve(arguments: argparse.Namespace) -> None:
    if arguments.broker == "redis":
        work = respond_redis(arguments.url, arguments.names[0])
    elif arguments.broker == "nats":
        work = respond_nats(arguments.url, arguments.names[0])
    else:
        requests, replies = arguments.names
        work = respond_kafka(arguments.url, requests, replies, arguments.fetch_max_wait_ms)
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    loop.add_reader(sys.stdin.fileno(), lambda: task.cancel() if not sys.stdin.read(1) else None)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._wait_peer", description=__doc__)
    sub = parser.add_subparsers(dest="role", required=True)
    responder = sub.add_parser("responder", help="the raw clients' request-reply responder")
    responder.add_argument("broker", choices=["redis", "nats", "kafka"])
    responder.add_argument("url", help="Redis URL, NATS URL or Kafka bootstrap servers")
    responder.add_argument(
        "names", nargs="+", help="request channel/subject; Kafka: request and reply topics"
    )
    responder.add_argument("--fetch-max-wait-ms", type=int, default=50)
    arguments = parser.parse_args()
    if arguments.broker == "kafka" and len(arguments.names) != 2:
        parser.error("kafka takes a request topic and a reply topic")
    if arguments.broker != "kafka" and len(arguments.names) != 1:
        parser.error(f"{arguments.broker} takes one request channel or subject")
    asyncio.run(_serve(arguments))


if __name__ == "__main__":
    main()
