"""Local-first over a real broker (goal 5 of issue 15): on against off in one run.

The head-to-head notebook service (``benchmarks.head_to_head_embedded``: one command, one
~300-byte event, snapshots) with Redis or Kafka (a ``tansu`` started here) as the
distributed bus, local-first on (the default) and off
(``WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED=false`` and its event and state twins), in
alternating order, ``--repeat`` (3) times, medians with the spread:

- p50 and p99 latency of ``gateway.send_and_wait(command, PROCESSED)`` one command at a
  time (goal: on lower than off);
- throughput with 50 concurrent callers over 100 aggregates (goal: on at least 0.8 of off).

With local-first on a command is handed to the local aggregate at once and each of the
three messages it produces still has its distributed copy sent (a broker cannot tell
who reads it); with it off, every message crosses the broker before it is processed.
Unique key, stream and topic prefixes per run; the Redis keys are deleted after it.

    python -m benchmarks.local_first_brokers [--quick] [--repeat N] [--brokers redis,kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks._harness import Figure, Harness
from benchmarks.head_to_head_embedded import (
    BODY,
    NotebookAggregate,
    OpenNotebook,
    WriteNote,
    load_average,
    percentile,
    spread,
)
from wow_core.command import CommandWait
from wow_core.runtime.app import WowApp
from wow_core.runtime.settings import WowSettings

BENCHMARK = "local_first_brokers"
AGGREGATES = 100
CALLERS = 50
THROUGHPUT_GOAL = 0.8
REDIS_URL = os.environ.get("WOW_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

_OFF = {"bus": {"local_first": {"enabled": False}}}


def settings(broker: str, local_first: bool) -> WowSettings:
    if local_first:
        return WowSettings(transport=broker)
    return WowSettings(transport=broker, command=_OFF, event=_OFF, eventsourcing={"state": _OFF})


def with_env(env: dict[str, str], make: Callable[[], Any]) -> Any:
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        return make()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def wow_commands(
    broker: str, env: dict[str, str], local_first: bool, callers: int, commands: int
) -> tuple[float, list[float]]:
    """(seconds of the timed part, latencies) of ``commands`` PROCESSED waits."""
    runtime = with_env(
        env, lambda: WowApp("lfb", aggregates=[NotebookAggregate]).runtime(settings(broker, local_first))
    )
    plan = CommandWait.processed()
    async with runtime:
        build = runtime.aggregates.command
        gateway = runtime.gateway
        ids = [f"n-{uuid.uuid4().hex[:8]}-{i}" for i in range(AGGREGATES)]
        for aggregate_id in ids:
            result = await gateway.send_and_wait(build(OpenNotebook(), aggregate_id), plan, timeout=60)
            if not result.succeeded:
                raise RuntimeError(result.error_msg)
        per_caller = max(1, commands // callers)
        latencies: list[float] = []

        async def caller(index: int) -> None:
            for n in range(per_caller):
                command = build(WriteNote(BODY), ids[(index + n * callers) % AGGREGATES])
                began = time.perf_counter()
                result = await gateway.send_and_wait(command, plan, timeout=60)
                latencies.append(time.perf_counter() - began)
                if not result.succeeded:
                    raise RuntimeError(result.error_msg)

        started = time.perf_counter()
        await asyncio.gather(*(caller(i) for i in range(callers)))
        return time.perf_counter() - started, latencies


class Broker:
    def __init__(self, name: str, env: dict[str, str], cleanup: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.env = env
        self.cleanup = cleanup


def redis_broker() -> Broker:
    prefix = f"lfb-{uuid.uuid4().hex[:8]}"

    async def cleanup() -> None:
        from redis.asyncio import Redis

        client = Redis.from_url(REDIS_URL)
        try:
            keys = [found async for found in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()

    env = {
        "WOW_REDIS__URL": REDIS_URL,
        "WOW_REDIS__KEY_PREFIX": prefix + ":",
        "WOW_MESSAGING__TOPIC_PREFIX": prefix + ".",
    }
    return Broker("redis", env, cleanup)


def kafka_broker(bootstrap: str) -> Broker:
    async def nothing() -> None:
        return None  # tansu is started for this run and stopped after it

    env = {
        "WOW_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "WOW_KAFKA__TOPIC_PREFIX": f"lfb{uuid.uuid4().hex[:8]}.",
        "WOW_KAFKA__PARTITIONS": "3",
        "WOW_KAFKA__SESSION_TIMEOUT_MS": "3000",
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "100",
        "WOW_KAFKA__AUTO_OFFSET_RESET": "earliest",
    }
    return Broker("kafka", env, nothing)


async def measure_broker(broker: Broker, args: argparse.Namespace, loads: list[str]) -> list[Figure]:
    commands = 300 if args.quick else 2_000
    sequential = 100 if args.quick else 500
    modes = {"on": True, "off": False}
    rate: dict[str, list[float]] = {m: [] for m in modes}
    p50: dict[str, list[float]] = {m: [] for m in modes}
    p99: dict[str, list[float]] = {m: [] for m in modes}
    for repeat in range(args.repeat):
        loads.append(load_average())
        names = list(modes)
        for mode in names[repeat % 2 :] + names[: repeat % 2]:
            seconds, _ = await wow_commands(broker.name, broker.env, modes[mode], CALLERS, commands)
            rate[mode].append(commands // CALLERS * CALLERS / seconds)
            _, latencies = await wow_commands(broker.name, broker.env, modes[mode], 1, sequential)
            p50[mode].append(percentile(latencies, 50) * 1e6)
            p99[mode].append(percentile(latencies, 99) * 1e6)
            print(
                f"repeat {repeat + 1} {broker.name} local-first {mode}: {rate[mode][-1]:,.0f} commands/s, "
                f"p50 {p50[mode][-1]:,.0f} µs",
                flush=True,
            )
    on_rate, off_rate = statistics.median(rate["on"]), statistics.median(rate["off"])
    on_p50, off_p50 = statistics.median(p50["on"]), statistics.median(p50["off"])
    figures = [
        Figure(
            f"{broker.name} local-first on: throughput",
            on_rate,
            "commands/s",
            ratio=on_rate / off_rate,
            ratio_of=f"{broker.name} local-first off",
            detail={
                "ratio_to": f"{broker.name} local-first off",
                "goal_ratio": THROUGHPUT_GOAL,
                "meets_goal": on_rate / off_rate >= THROUGHPUT_GOAL,
                "callers": CALLERS,
                "aggregates": AGGREGATES,
                "commands": commands,
                "spread": spread(rate["on"]),
            },
        ),
        Figure(
            f"{broker.name} local-first off: throughput",
            off_rate,
            "commands/s",
            detail={
                "callers": CALLERS,
                "aggregates": AGGREGATES,
                "commands": commands,
                "spread": spread(rate["off"]),
            },
        ),
        Figure(
            f"{broker.name} local-first on: latency p50, 1 caller",
            on_p50,
            "µs",
            ratio=on_p50 / off_p50,
            ratio_of=f"{broker.name} local-first off's p50 (lower is better)",
            detail={
                "ratio_to": f"{broker.name} local-first off",
                "meets_goal": on_p50 < off_p50,
                "commands": sequential,
                "spread": spread(p50["on"]),
            },
        ),
        Figure(
            f"{broker.name} local-first off: latency p50, 1 caller",
            off_p50,
            "µs",
            detail={"commands": sequential, "spread": spread(p50["off"])},
        ),
    ]
    for mode in modes:
        figures.append(
            Figure(
                f"{broker.name} local-first {mode}: latency p99, 1 caller",
                statistics.median(p99[mode]),
                "µs",
                detail={"commands": sequential, "spread": spread(p99[mode])},
            )
        )
    return figures


async def measure(args: argparse.Namespace) -> tuple[list[Figure], dict[str, Any]]:
    figures: list[Figure] = []
    loads: list[str] = []
    for name in [b.strip() for b in args.brokers.split(",") if b.strip()]:
        if name == "redis":
            broker = redis_broker()
            try:
                figures += await measure_broker(broker, args, loads)
            finally:
                await broker.cleanup()
        elif name == "kafka":
            from benchmarks.kafka_transport import bootstrap_or_tansu

            bootstrap, tansu = bootstrap_or_tansu()
            try:
                figures += await measure_broker(kafka_broker(bootstrap), args, loads)
            finally:
                if tansu is not None:
                    tansu.stop()
        else:
            raise SystemExit(f"unknown broker {name!r} (redis, kafka)")
    return figures, {"load_average": loads, "repeat": args.repeat, "machine": Harness.machine()}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{BENCHMARK}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="fewer commands")
    parser.add_argument("--repeat", type=int, default=3, help="repeats (medians and spreads)")
    parser.add_argument("--brokers", default="redis,kafka", help="comma-separated: redis, kafka")
    args = parser.parse_args()
    figures, report = asyncio.run(measure(args))
    path = Harness.write(BENCHMARK, figures, report)
    print(f"load average per repeat: {report['load_average']}")
    for figure in figures:
        line = f"{figure.name}: {figure.value:,.0f} {figure.unit}"
        if figure.ratio is not None:
            line += f", {figure.ratio:.2f}x off"
        print(line)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
