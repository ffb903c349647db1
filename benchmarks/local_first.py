"""Local-first figures: ``send_and_wait(PROCESSED)`` with local-first on and off.

The same embedded runtime and workload twice in one run, the distributed bus being the
in-memory transport both times:

- **local-first on** (the default): commands, domain events and state events are handed
  to the in-process receivers; their distributed copies are queued in turn and, since
  nobody in this process could process them (every receiver would drop a copy handled
  locally; the domain events have no receiver), not sent (see "Copies nobody could
  process" in docs/messaging/local-first.md);
- **local-first off** (``WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED=false`` and the event and
  state equivalents): every message goes through the in-memory transport (JSON encoding,
  partition queues, decoding) before a dispatcher sees it.

Figures: processed commands per second with 64 concurrent callers over 200 aggregates,
and the latency (p50, p99) of one ``send_and_wait(PROCESSED)`` at a time; the ratio of
local-first on over off for each; every throughput also in asyncio-queue hops measured in
the same run. Runs alternate between the two modes and the best of ``--repeat`` is kept.

    python -m benchmarks.local_first [--quick] [--repeat N]
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from benchmarks._harness import Figure, Harness
from wow_core.command import CommandWait
from wow_core.modeling import Emit, aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp
from wow_core.runtime.settings import WowSettings

AGGREGATES = 200
CALLERS = 64


@dataclass(frozen=True, slots=True)
class Counter:
    value: int = 0


@dataclass(frozen=True, slots=True)
class Start:
    pass


@dataclass(frozen=True, slots=True)
class Bump:
    by: int = 1


@dataclass(frozen=True, slots=True)
class Started:
    pass


@dataclass(frozen=True, slots=True)
class Bumped:
    by: int


@aggregate("lfbench", "counter", state=Counter)
class CounterAggregate:
    @on_command(create=True)
    def start(self, state: Counter, body: Start) -> Started:
        return Started()

    @on_command
    def bump(self, state: Counter, body: Bump) -> Emit[Bumped]:
        return Emit(Bumped(body.by))

    @on_sourcing
    def started(self, state: Counter, event: Started) -> Counter:
        return Counter()

    @on_sourcing
    def bumped(self, state: Counter, event: Bumped) -> Counter:
        return Counter(state.value + event.by)


def settings(local_first: bool) -> WowSettings:
    bus = {"bus": {"local_first": {"enabled": local_first}}}
    return WowSettings(command=bus, event=bus, eventsourcing={"state": bus})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def workload(
    local_first: bool, commands: int, callers: int
) -> tuple[float, list[float], dict[str, Any]]:
    """Seconds for ``commands`` PROCESSED waits by ``callers`` concurrent callers, and each latency."""
    runtime = WowApp("lfbench", aggregates=[CounterAggregate]).runtime(settings(local_first))
    plan = CommandWait.processed()
    latencies: list[float] = []
    async with runtime:
        build = runtime.aggregates.command
        gateway = runtime.gateway
        ids = [f"c-{i}" for i in range(AGGREGATES)]
        for aggregate_id in ids:
            result = await gateway.send_and_wait(build(Start(), aggregate_id), plan, timeout=30)
            assert result.succeeded, result.error_msg
        per_caller = commands // callers

        async def caller(index: int) -> None:
            clock = time.perf_counter
            for n in range(per_caller):
                command = build(Bump(), ids[(index + n * callers) % AGGREGATES])
                began = clock()
                result = await gateway.send_and_wait(command, plan, timeout=30)
                latencies.append(clock() - began)
                if not result.succeeded:
                    raise RuntimeError(result.error_msg)

        started = time.perf_counter()
        await asyncio.gather(*(caller(i) for i in range(callers)))
        elapsed = time.perf_counter() - started
        bus = type(runtime.command_bus).__name__
    return elapsed, latencies, {"bus": bus, "commands": per_caller * callers}


async def run(h: Harness) -> list[Figure]:
    commands = h.n(6400)
    sequential = h.n(2000)
    best: dict[bool, float] = {True: float("inf"), False: float("inf")}
    latency: dict[bool, list[float]] = {True: [], False: []}
    p50_best: dict[bool, float] = {True: float("inf"), False: float("inf")}
    detail: dict[bool, dict[str, Any]] = {}
    hop = float("inf")
    for _ in range(h.repeat):
        hop = min(hop, await h.hop_once())
        for mode in (True, False):
            seconds, _, info = await workload(mode, commands, CALLERS)
            best[mode] = min(best[mode], seconds)
            detail[mode] = info
            _, one_at_a_time, _ = await workload(mode, sequential, 1)
            p50 = percentile(one_at_a_time, 50)
            if p50 < p50_best[mode]:
                p50_best[mode] = p50
                latency[mode] = one_at_a_time
    hop_latency = await h.queue_hop_latency()
    figures: list[Figure] = []
    rates = {mode: detail[mode]["commands"] / best[mode] for mode in (True, False)}
    for mode, label in ((True, "on"), (False, "off")):
        figures.append(
            Figure(
                f"local-first {label}: send_and_wait(PROCESSED) throughput",
                rates[mode],
                "commands/s",
                hops=best[mode] / detail[mode]["commands"] / hop,
                detail={**detail[mode], "callers": CALLERS, "aggregates": AGGREGATES},
            )
        )
    for mode, label in ((True, "on"), (False, "off")):
        for q in (50, 99):
            value = percentile(latency[mode], q)
            figures.append(
                Figure(
                    f"local-first {label}: send_and_wait(PROCESSED) latency p{q}",
                    value * 1e6,
                    "µs",
                    hops=value / hop_latency,
                    detail={"commands": sequential, "callers": 1},
                )
            )
    throughput_ratio = rates[True] / rates[False]
    latency_ratio = percentile(latency[True], 50) / percentile(latency[False], 50)
    figures.append(
        Figure(
            "local-first on/off: throughput",
            throughput_ratio * 100,
            "% of local-first off",
            detail={"ratio": round(throughput_ratio, 3), "meaning": "processed commands/s, on over off"},
        )
    )
    figures.append(
        Figure(
            "local-first on/off: p50 latency",
            latency_ratio * 100,
            "% of local-first off",
            detail={
                "ratio": round(latency_ratio, 3),
                "meaning": "p50 latency, on over off (lower is better)",
            },
        )
    )
    return figures


if __name__ == "__main__":
    Harness.main("local_first", run, __doc__)
