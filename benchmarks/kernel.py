"""Command kernel figures: ``send_and_wait(PROCESSED)`` on the embedded runtime.

1,000 accounts exist; 256 concurrent callers each send ``Deposit`` commands to accounts
(caller ``i`` picks from its own slice so no two callers contend on one aggregate at a
time more than the lanes allow) and wait for PROCESSED. Figures: processed commands per
second, p50/p99 latency of one ``send_and_wait``, and the asyncio-queue hop rate measured
in the same run as the machine's yardstick (goal: a processed command for every 50 hops
or fewer, i.e. >= 20,000/s where a hop costs ~1 µs).

    python -m benchmarks.kernel            # figures, JSON in benchmarks/results/kernel.json
    python -m benchmarks.kernel --profile  # plus a pyinstrument profile (kernel_profile.txt)
    python -m benchmarks.kernel --quick    # a short run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from wow_core.command import CommandWait
from wow_core.modeling import Emit, aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings

RESULTS = Path(__file__).parent / "results"
GOAL_HOPS = 50.0


@dataclass(frozen=True, slots=True)
class BenchState:
    balance: int = 0


@dataclass(frozen=True, slots=True)
class Open:
    initial: int = 0


@dataclass(frozen=True, slots=True)
class Add:
    amount: Annotated[int, Field(gt=0)]


@dataclass(frozen=True, slots=True)
class Opened:
    initial: int


@dataclass(frozen=True, slots=True)
class Added:
    amount: int


@aggregate("bench", "account", state=BenchState)
class BenchAccount:
    @on_command(create=True)
    def open(self, state: BenchState, body: Open) -> Opened:
        return Opened(body.initial)

    @on_command
    def add(self, state: BenchState, body: Add) -> Emit:
        return Emit(Added(body.amount))

    @on_sourcing
    def opened(self, state: BenchState, event: Opened) -> BenchState:
        return BenchState(event.initial)

    @on_sourcing
    def added(self, state: BenchState, event: Added) -> BenchState:
        return BenchState(state.balance + event.amount)


async def queue_hops(count: int) -> float:
    """Items per second through one asyncio.Queue, producer and consumer tasks."""
    q: asyncio.Queue[int | None] = asyncio.Queue()

    async def consume() -> None:
        while await q.get() is not None:
            pass

    consumer = asyncio.create_task(consume())
    started = time.perf_counter()
    for i in range(count):
        q.put_nowait(i)
        if i % 64 == 0:
            await asyncio.sleep(0)
    q.put_nowait(None)
    await consumer
    return count / (time.perf_counter() - started)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def processed_throughput(
    runtime: WowRuntime, aggregates: int, callers: int, commands: int
) -> tuple[float, list[float]]:
    build = runtime.aggregates.command
    gateway = runtime.gateway
    ids: list[str] = []
    for i in range(aggregates):
        result = await gateway.send_and_wait(build(Open(), f"acc-{i}"), CommandWait.processed())
        assert result.succeeded, result.error_msg
        ids.append(f"acc-{i}")
    per_caller = commands // callers
    latencies: list[float] = []
    plan = CommandWait.processed()

    async def caller(index: int) -> None:
        clock = time.perf_counter
        record = latencies.append
        for n in range(per_caller):
            command = build(Add(1), ids[(index + n * callers) % aggregates])
            began = clock()
            result = await gateway.send_and_wait(command, plan)
            record(clock() - began)
            if not result.succeeded:
                raise RuntimeError(result.error_msg)

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    elapsed = time.perf_counter() - started
    return per_caller * callers / elapsed, latencies


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    hop_rate = await queue_hops(args.hops)
    app = WowApp("bench", aggregates=[BenchAccount])
    runtime = app.runtime(WowSettings())
    async with runtime:
        rate, latencies = await processed_throughput(runtime, args.aggregates, args.callers, args.commands)
    hop_rate_after = await queue_hops(args.hops)
    yardstick = (hop_rate + hop_rate_after) / 2
    hops = yardstick / rate
    p50 = percentile(latencies, 50) * 1e3
    p99 = percentile(latencies, 99) * 1e3
    return {
        "benchmark": "kernel",
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "yardstick": {"name": "asyncio.Queue hop", "value": yardstick, "unit": "hops/s"},
        "figures": [
            {
                "name": "send_and_wait(PROCESSED) throughput",
                "value": rate,
                "unit": "commands/s",
                "hops": hops,
                "goal_hops": GOAL_HOPS,
                "meets_goal": hops <= GOAL_HOPS,
                "detail": {
                    "aggregates": args.aggregates,
                    "callers": args.callers,
                    "commands": args.commands,
                    "bus": type(runtime.command_bus).__name__,
                },
            },
            {"name": "send_and_wait(PROCESSED) latency p50", "value": p50, "unit": "ms"},
            {"name": "send_and_wait(PROCESSED) latency p99", "value": p99, "unit": "ms"},
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--aggregates", type=int, default=1000)
    parser.add_argument("--callers", type=int, default=256)
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--hops", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="20,000 commands")
    parser.add_argument("--profile", action="store_true", help="write a pyinstrument profile too")
    args = parser.parse_args()
    if args.quick:
        args.commands = 20_000
        args.hops = 200_000
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="disabled")
        profiler.start()
        result = asyncio.run(measure(args))
        profiler.stop()
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "kernel_profile.txt").write_text(
            profiler.output_text(unicode=False, color=False, show_all=False)
        )
        result["profiled"] = True
    else:
        result = asyncio.run(measure(args))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("kernel_profiled.json" if args.profile else "kernel.json")).write_text(
        json.dumps(result, indent=2) + "\n"
    )
    print(f"asyncio.Queue hop: {result['yardstick']['value']:,.0f} hops/s")
    for figure in result["figures"]:
        line = f"{figure['name']}: {figure['value']:,.2f} {figure['unit']}"
        if "hops" in figure:
            line += f" = one per {figure['hops']:.1f} queue hops (goal <= {GOAL_HOPS:g})"
        print(line)


if __name__ == "__main__":
    main()
