"""Command kernel figures: ``send_and_wait(PROCESSED)`` on the embedded runtime.

1,000 accounts exist; 256 concurrent callers each send ``Add`` commands round-robin over
the accounts and wait for PROCESSED. Three configurations: the command side alone over
the in-memory buses (gateway, command dispatcher, kernel, in-memory store: the kernel's
own cost), the same with the snapshot dispatcher the embedded runtime runs, and the
embedded default (local-first buses over the in-memory transport, whose copies nobody
could process are not sent). Figures: processed commands per
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
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from wow_core.command import CommandWait
from wow_core.modeling import Emit, aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime, in_process_buses
from wow_core.runtime.container import create_container
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
    def add(self, state: BenchState, body: Add) -> Emit[Added]:
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
    runtime: WowRuntime,
    aggregates: int,
    callers: int,
    commands: int,
    warmed: Callable[[], None] | None = None,
) -> tuple[float, list[float]]:
    build = runtime.aggregates.command
    gateway = runtime.gateway
    ids: list[str] = []
    for i in range(aggregates):
        result = await gateway.send_and_wait(build(Open(), f"acc-{i}"), CommandWait.processed())
        assert result.succeeded, result.error_msg
        ids.append(f"acc-{i}")
    if warmed is not None:
        warmed()
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


def _runtime(in_process: bool, event_dispatch: bool = True) -> WowRuntime:
    container = create_container(WowSettings())
    if in_process:
        in_process_buses(container)
    app = WowApp("bench", aggregates=[BenchAccount])
    if event_dispatch:
        return build_runtime(app, container=container)
    # The command side alone: gateway, command dispatcher, kernel, stores (no snapshot
    # dispatcher or other event dispatch).
    aggregates = container.aggregate_registry()
    aggregates.register(BenchAccount)
    aggregates.register_body_types(container.body_types())
    runtime: WowRuntime = container.runtime()
    return runtime


async def _configuration(
    name: str,
    in_process: bool,
    event_dispatch: bool,
    commands: int,
    args: argparse.Namespace,
    gc_mode: str | None = None,
) -> dict[str, Any]:
    hop_cpu = time.process_time()
    hop_before = await queue_hops(args.hops)
    hop_cpu = (time.process_time() - hop_cpu) / args.hops
    runtime = _runtime(in_process, event_dispatch)
    default_threshold = gc.get_threshold()
    gc.collect()
    if gc_mode == "threshold":
        gc.set_threshold(50_000, *default_threshold[1:])

    def warmed() -> None:
        if gc_mode == "freeze":
            # The heap after start-up and the 1,000 creations leaves the collector's view;
            # what the run itself allocates and keeps is still collected as usual.
            gc.collect()
            gc.freeze()

    try:
        async with runtime:
            cpu = time.process_time()
            rate, latencies = await processed_throughput(
                runtime, args.aggregates, args.callers, commands, warmed
            )
            cpu = (time.process_time() - cpu) / (commands + args.aggregates)
            bus = type(runtime.command_bus).__name__
    finally:
        gc.set_threshold(*default_threshold)
        gc.unfreeze()
    hop_after = await queue_hops(args.hops)
    yardstick = (hop_before + hop_after) / 2
    hops = yardstick / rate
    detail = {
        "aggregates": args.aggregates,
        "callers": args.callers,
        "commands": commands,
        "bus": bus,
        "gc": gc_mode or "python default",
        # The same ratio on the process's CPU clock (this process's CPU per processed
        # command over its CPU per queue hop, opens included): less sensitive to other
        # processes taking the cores than the wall-clock ratio.
        "cpu_us_per_command": cpu * 1e6,
        "cpu_hops": cpu / hop_cpu,
    }
    return {
        "yardstick": yardstick,
        "figures": [
            {
                "name": f"{name}: send_and_wait(PROCESSED) throughput",
                "value": rate,
                "unit": "commands/s",
                "hops": hops,
                "goal_hops": GOAL_HOPS,
                "meets_goal": hops <= GOAL_HOPS,
                "detail": detail,
            },
            {"name": f"{name}: latency p50", "value": percentile(latencies, 50) * 1e3, "unit": "ms"},
            {"name": f"{name}: latency p99", "value": percentile(latencies, 99) * 1e3, "unit": "ms"},
        ],
    }


CONFIGURATIONS: tuple[tuple[str, bool, bool, float, str | None], ...] = (
    # name, in-process buses, event dispatch (snapshot dispatcher), share of the commands,
    # gc: None (Python's defaults), "freeze" (gc.freeze() after the warm-up, a benchmark
    # measure only), "threshold" (generation-0 threshold 50,000 instead of 700)
    ("command side, in-process buses", True, False, 1.0, None),
    ("command side, in-process buses, gc.freeze after warm-up", True, False, 0.5, "freeze"),
    ("command side, in-process buses, gc threshold 50000", True, False, 0.5, "threshold"),
    ("embedded runtime with snapshots, in-process buses", True, True, 0.5, None),
    ("embedded default (local-first over InMemoryTransport, snapshots)", False, True, 0.1, None),
)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    results = [
        await _configuration(
            name, in_process, dispatch, max(args.callers, int(args.commands * share)), args, threshold
        )
        for name, in_process, dispatch, share, threshold in CONFIGURATIONS
    ]
    return {
        "benchmark": "kernel",
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "yardstick": {
            "name": "asyncio.Queue hop",
            "value": sum(r["yardstick"] for r in results) / len(results),
            "unit": "hops/s",
        },
        "figures": [figure for r in results for figure in r["figures"]],
    }


def profile(args: argparse.Namespace) -> None:
    """Profile the command side (in-process buses) with pyinstrument: kernel_profile.txt."""
    from pyinstrument import Profiler

    async def run() -> None:
        runtime = _runtime(True, False)
        async with runtime:
            profiler = Profiler(async_mode="disabled", interval=0.0005)
            profiler.start()
            await processed_throughput(runtime, args.aggregates, args.callers, args.commands)
            profiler.stop()
        RESULTS.mkdir(exist_ok=True)
        text = profiler.output_text(unicode=False, color=False, show_all=False)
        (RESULTS / "kernel_profile.txt").write_text(text)
        print(text)

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--aggregates", type=int, default=1000)
    parser.add_argument("--callers", type=int, default=256)
    parser.add_argument("--commands", type=int, default=60_000)
    parser.add_argument("--hops", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="20,000 commands")
    parser.add_argument(
        "--profile", action="store_true", help="profile the command side instead (kernel_profile.txt)"
    )
    args = parser.parse_args()
    if args.quick:
        args.commands = 20_000
        args.hops = 200_000
    if args.profile:
        profile(args)
        return
    result = asyncio.run(measure(args))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kernel.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"asyncio.Queue hop: {result['yardstick']['value']:,.0f} hops/s")
    for figure in result["figures"]:
        line = f"{figure['name']}: {figure['value']:,.2f} {figure['unit']}"
        if "hops" in figure:
            line += (
                f" = one per {figure['hops']:.1f} queue hops (goal <= {GOAL_HOPS:g});"
                f" CPU: {figure['detail']['cpu_us_per_command']:.0f} us/command ="
                f" {figure['detail']['cpu_hops']:.1f} hops"
            )
        print(line)


if __name__ == "__main__":
    main()
