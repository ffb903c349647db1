"""Head to head, embedded: wow-py's ``send_and_wait(PROCESSED)`` beside the eventsourcing library.

Part of ``python -m benchmarks head_to_head`` (which runs it in its own process and merges
its JSON); it also runs alone: ``python -m benchmarks.head_to_head_embedded``.

Every row does the same work per command: load the aggregate, decide one command whose
body is a ~300-byte string, append the one event it produces (save). Rows:

- **wow embedded default**: ``WowApp(...).runtime()`` with nothing set, which is what
  ``wow run`` starts (local-first buses over the in-memory transport, in-memory event
  store and snapshots); ``gateway.send_and_wait(command, PROCESSED)``. Every wow row does
  what ``wow run`` does once its runtime started (``freeze_start_up``: ``gc.freeze()``,
  young-generation threshold 10000) and restores Python's collector after the row;
- **wow local-first off**: the same with ``WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED=false``
  and its event and state twins (every message through the in-memory transport);
- **wow in-process buses**: the in-memory buses, no transport at all
  (``wow_core.runtime.assembly.in_process_buses``);
- **eventsourcing cached** / **uncached**: the eventsourcing library's ``Application``
  over its in-memory ("POPO") persistence, with its aggregate cache
  (``AGGREGATE_CACHE_MAXSIZE``) and without (every ``repository.get`` replays the
  aggregate's events); ``repository.get(id)``, the decorated command method, ``save``.
  eventsourcing is synchronous: its rows call it in a plain loop, its best case (50
  threads only add lock and GIL hand-offs).

Figures, each the median of ``--repeat`` (3) repeats whose row order rotates by one each
repeat, with the spread (min, max) beside it:

1. throughput at 1,000 aggregates and 50 concurrent callers (commands/s), and each row's
   ratio to eventsourcing cached (goal of issue 15: the embedded default >= 5x);
2. latency one command at a time (1 caller): p50 and p99 in µs;
3. memory per aggregate after creating 100,000 aggregates (one command each), the growth
   of the process's resident set (RSS) divided by the count, each measured in a fresh
   process (the embedded default and eventsourcing cached).

A peer that is not installed (``uv sync --all-packages --group bench`` installs it) is
skipped with a message. Writes ``benchmarks/results/head_to_head_embedded.json``.

    python -m benchmarks.head_to_head_embedded [--quick] [--repeat N] [--memory-aggregates N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchmarks._harness import Figure, Harness
from wow_core.command import CommandWait
from wow_core.modeling import Emit, aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime, in_process_buses
from wow_core.runtime.container import create_container
from wow_core.runtime.gc_tuning import freeze_start_up
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings

BENCHMARK = "head_to_head_embedded"
AGGREGATES = 1_000
CALLERS = 50
BODY = "x" * 300
GOAL_RATIO = 5.0
BASELINE = "eventsourcing cached"


# -- the wow-py aggregate ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Notebook:
    notes: int = 0
    last: str = ""


@dataclass(frozen=True, slots=True)
class OpenNotebook:
    pass


@dataclass(frozen=True, slots=True)
class WriteNote:
    text: str


@dataclass(frozen=True, slots=True)
class NotebookOpened:
    pass


@dataclass(frozen=True, slots=True)
class NoteWritten:
    text: str


@aggregate("h2h", "notebook", state=Notebook)
class NotebookAggregate:
    @on_command(create=True)
    def open(self, state: Notebook, body: OpenNotebook) -> NotebookOpened:
        return NotebookOpened()

    @on_command
    def write(self, state: Notebook, body: WriteNote) -> Emit[NoteWritten]:
        return Emit(NoteWritten(body.text))

    @on_sourcing
    def opened(self, state: Notebook, event: NotebookOpened) -> Notebook:
        return Notebook()

    @on_sourcing
    def written(self, state: Notebook, event: NoteWritten) -> Notebook:
        return Notebook(state.notes + 1, event.text)


def _off() -> WowSettings:
    bus = {"bus": {"local_first": {"enabled": False}}}
    return WowSettings(command=bus, event=bus, eventsourcing={"state": bus})


def wow_runtime(mode: str) -> WowRuntime:
    """``default`` (what ``wow run`` starts), ``local-first off`` or ``in-process``."""
    app = WowApp("h2h", aggregates=[NotebookAggregate])
    if mode == "default":
        return app.runtime()
    if mode == "local-first off":
        return app.runtime(_off())
    container = create_container(WowSettings())
    in_process_buses(container)
    return build_runtime(app, container=container)


@dataclass
class Run:
    seconds: float
    commands: int
    latencies: list[float]


async def wow_run(mode: str, aggregates: int, callers: int, commands: int) -> Run:
    runtime = wow_runtime(mode)
    plan = CommandWait.processed()
    threshold = gc.get_threshold()
    async with runtime:
        tuning = runtime.settings.runtime
        if tuning.gc_freeze:  # what `wow run` does once the runtime started
            freeze_start_up(tuning.gc_threshold)
        try:
            return await _commands(runtime, plan, aggregates, callers, commands)
        finally:
            gc.unfreeze()  # the next row starts from Python's collector
            gc.set_threshold(*threshold)


async def _commands(
    runtime: WowRuntime, plan: CommandWait, aggregates: int, callers: int, commands: int
) -> Run:
    build = runtime.aggregates.command
    gateway = runtime.gateway
    ids = [f"n-{i}" for i in range(aggregates)]
    for aggregate_id in ids:
        result = await gateway.send_and_wait(build(OpenNotebook(), aggregate_id), plan, timeout=60)
        if not result.succeeded:
            raise RuntimeError(result.error_msg)
    per_caller = max(1, commands // callers)
    latencies: list[float] = []

    async def caller(index: int) -> None:
        clock = time.perf_counter
        record = latencies.append
        for n in range(per_caller):
            command = build(WriteNote(BODY), ids[(index + n * callers) % aggregates])
            began = clock()
            result = await gateway.send_and_wait(command, plan, timeout=60)
            record(clock() - began)
            if not result.succeeded:
                raise RuntimeError(result.error_msg)

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    seconds = time.perf_counter() - started
    return Run(seconds, per_caller * callers, latencies)


# -- the eventsourcing peer ---------------------------------------------------------------


def eventsourcing_installed() -> bool:
    return importlib.util.find_spec("eventsourcing") is not None


_ES_CLASSES: list[Any] = []


def _eventsourcing_classes() -> Any:
    """The eventsourcing aggregate and application, defined once (it registers topics)."""
    if _ES_CLASSES:
        return _ES_CLASSES[0]
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class EsNotebook(Aggregate):  # type: ignore[misc]
        def __init__(self) -> None:
            self.notes = 0
            self.last = ""

        @event("NoteWritten")  # type: ignore[untyped-decorator]
        def write(self, text: str) -> None:
            self.notes += 1
            self.last = text

    class Notebooks(Application[Any]):  # type: ignore[misc]
        def open(self) -> Any:
            notebook = EsNotebook()
            self.save(notebook)
            return notebook.id

        def write(self, notebook_id: Any, text: str) -> None:
            notebook = self.repository.get(notebook_id)
            notebook.write(text)
            self.save(notebook)

    _ES_CLASSES.append(Notebooks)
    return Notebooks


def eventsourcing_app(cached: bool) -> Any:
    """An eventsourcing ``Application`` over in-memory persistence, cached or not."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.popo"}
    if cached:
        env["AGGREGATE_CACHE_MAXSIZE"] = "1000000"
    return _eventsourcing_classes()(env=env)


def eventsourcing_run(cached: bool, aggregates: int, commands: int) -> Run:
    app = eventsourcing_app(cached)
    ids = [app.open() for _ in range(aggregates)]
    latencies: list[float] = []
    record = latencies.append
    clock = time.perf_counter
    write = app.write
    started = clock()
    for n in range(commands):
        began = clock()
        write(ids[n % aggregates], BODY)
        record(clock() - began)
    return Run(clock() - started, commands, latencies)


# -- rows -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    run: Callable[[int, int, int], Awaitable[Run]]
    """``run(aggregates, callers, commands)``."""


def _wow(mode: str) -> Callable[[int, int, int], Awaitable[Run]]:
    async def run(aggregates: int, callers: int, commands: int) -> Run:
        return await wow_run(mode, aggregates, callers, commands)

    return run


def _es(cached: bool) -> Callable[[int, int, int], Awaitable[Run]]:
    async def run(aggregates: int, callers: int, commands: int) -> Run:
        return eventsourcing_run(cached, aggregates, commands)

    return run


def rows(skipped: list[str]) -> list[Row]:
    found = [
        Row("wow embedded default", _wow("default")),
        Row("wow local-first off", _wow("local-first off")),
        Row("wow in-process buses", _wow("in-process")),
    ]
    if eventsourcing_installed():
        found += [Row("eventsourcing cached", _es(True)), Row("eventsourcing uncached", _es(False))]
    else:
        skipped.append(
            "eventsourcing is not installed (uv sync --all-packages --group bench): its rows are skipped"
        )
    return found


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def spread(values: list[float]) -> dict[str, Any]:
    return {"min": min(values), "max": max(values), "runs": [round(v, 3) for v in values]}


def load_average() -> str:
    try:
        return " ".join(os.getloadavg().__repr__().strip("()").split(", "))
    except OSError:
        return "unknown"


# -- memory per aggregate (a fresh process per peer) --------------------------------------


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(peer: str, count: int) -> dict[str, Any]:
    """Bytes of resident set per aggregate after ``count`` aggregates got one command each."""
    if peer == "eventsourcing":
        app = eventsourcing_app(True)
        gc.collect()
        before = _rss()
        for _ in range(count):
            notebook_id = app.open()
            app.write(notebook_id, BODY)
        gc.collect()
        return {"bytes_per_aggregate": (_rss() - before) / count}

    async def wow() -> float:
        runtime = wow_runtime("default")
        plan = CommandWait.processed()
        async with runtime:
            build = runtime.aggregates.command
            gateway = runtime.gateway
            gc.collect()
            before = _rss()
            for i in range(count):
                aggregate_id = f"m-{i}"
                for body in (OpenNotebook(), WriteNote(BODY)):
                    result = await gateway.send_and_wait(build(body, aggregate_id), plan, timeout=60)
                    if not result.succeeded:
                        raise RuntimeError(result.error_msg)
            gc.collect()
            return (_rss() - before) / count

    return {"bytes_per_aggregate": asyncio.run(wow())}


def memory(peer: str, count: int) -> float:
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{BENCHMARK}", "--memory-child", peer, str(count)],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["bytes_per_aggregate"])


# -- the run ------------------------------------------------------------------------------


async def measure(args: argparse.Namespace) -> tuple[list[Figure], dict[str, Any]]:
    skipped: list[str] = []
    found = rows(skipped)
    for message in skipped:
        print(f"skipped: {message}", flush=True)
    commands = 2_000 if args.quick else 10_000
    sequential = 500 if args.quick else 2_000
    throughput: dict[str, list[float]] = {row.name: [] for row in found}
    p50: dict[str, list[float]] = {row.name: [] for row in found}
    p99: dict[str, list[float]] = {row.name: [] for row in found}
    loads: list[str] = []
    for repeat in range(args.repeat):
        order = found[repeat % len(found) :] + found[: repeat % len(found)]
        loads.append(load_average())
        for row in order:
            gc.collect()
            many = await row.run(AGGREGATES, CALLERS, commands)
            throughput[row.name].append(many.commands / many.seconds)
            gc.collect()
            one = await row.run(AGGREGATES, 1, sequential)
            p50[row.name].append(percentile(one.latencies, 50) * 1e6)
            p99[row.name].append(percentile(one.latencies, 99) * 1e6)
            print(
                f"repeat {repeat + 1} {row.name}: {throughput[row.name][-1]:,.0f} commands/s, "
                f"1 caller p50 {p50[row.name][-1]:,.0f} µs",
                flush=True,
            )
    baseline = statistics.median(throughput[BASELINE]) if BASELINE in throughput else None
    figures: list[Figure] = []
    for row in found:
        rate = statistics.median(throughput[row.name])
        ratio = rate / baseline if baseline else None
        detail: dict[str, Any] = {
            "aggregates": AGGREGATES,
            "callers": CALLERS if row.name.startswith("wow") else 1,
            "commands": commands,
            "body_bytes": len(BODY),
            "spread": spread(throughput[row.name]),
        }
        if ratio is not None:
            detail["ratio_to"] = BASELINE
            if row.name == "wow embedded default":
                detail["goal_ratio"] = GOAL_RATIO
                detail["meets_goal"] = ratio >= GOAL_RATIO
        figures.append(
            Figure(
                f"{row.name}: throughput",
                rate,
                "commands/s",
                ratio=ratio,
                ratio_of=BASELINE if ratio is not None else None,
                detail=detail,
            )
        )
    for row in found:
        for q, values in ((50, p50), (99, p99)):
            figures.append(
                Figure(
                    f"{row.name}: latency p{q}, 1 caller",
                    statistics.median(values[row.name]),
                    "µs",
                    detail={"commands": sequential, "spread": spread(values[row.name])},
                )
            )
    if args.memory_aggregates:
        peers = ["wow"] + (["eventsourcing"] if eventsourcing_installed() else [])
        names = {"wow": "wow embedded default", "eventsourcing": "eventsourcing cached"}
        for peer in peers:
            value = memory(peer, args.memory_aggregates)
            figures.append(
                Figure(
                    f"{names[peer]}: memory per aggregate",
                    value,
                    "bytes (RSS growth)",
                    detail={"aggregates": args.memory_aggregates, "events_per_aggregate": 2},
                )
            )
    report = {
        "part_of": "head_to_head",
        "load_average": loads,
        "repeat": args.repeat,
        "skipped": skipped,
        "machine": Harness.machine(),
    }
    return figures, report


def main() -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{BENCHMARK}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a fifth of the commands, 10k aggregates")
    parser.add_argument("--repeat", type=int, default=3, help="repeats (medians and spreads)")
    parser.add_argument(
        "--memory-aggregates", type=int, default=None, help="aggregates of the memory rows (100000)"
    )
    parser.add_argument("--memory-child", nargs=2, metavar=("PEER", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]))))
        return
    if args.memory_aggregates is None:
        args.memory_aggregates = 10_000 if args.quick else 100_000
    figures, report = asyncio.run(measure(args))
    path = Harness.write(BENCHMARK, figures, report)
    print(f"load average per repeat: {report['load_average']}")
    for figure in figures:
        line = f"{figure.name}: {figure.value:,.0f} {figure.unit}"
        if figure.ratio is not None:
            line += f", {figure.ratio:.2f}x {BASELINE}"
        print(line)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
