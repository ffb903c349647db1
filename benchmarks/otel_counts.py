"""What wow-otel costs an embedded command, counted instead of timed.

The CPU-time ratios of :mod:`benchmarks.otel` move by ±0.15 between two runs of the same
code on a shared machine (``docs/observability.md``, "Cost"): a change of a few per cent
cannot be seen in them. This module counts the work of one command instead, the same
work as that module's ``embedded`` rows run as ``wow run`` runs the service
(``send_and_wait(PROCESSED)``, 64 callers over 1,000 accounts), for each configuration
(inactive, metrics only, metrics and always-on tracing, tracing 1 in 10):

- **Python bytecode instructions per command**: every instruction the interpreter runs
  in Python code from the end of the warm-up (``sys.settrace`` with opcode events), the
  marginal between a run of ``N`` and of ``3 N`` commands, so the start-up, the warm-up
  and the shut-down cancel out. What the framework's own Python code does; not what C
  code does for it (a dict built, a string formatted). It repeats to within a fraction
  of a per cent (the 1 in 10 sampler draws its traces at random; the span processor's
  worker thread, not counted, wakes when it is scheduled).
- **Machine instructions per command**, with ``--machine`` (``valgrind`` on the
  ``PATH``; minutes per configuration): the same marginal under ``valgrind
  --tool=cachegrind`` (the interpreter, C extensions, the allocator and the collector
  included; about ±1 %: the batch span processor's worker wakes at times that depend on
  the scheduling). Cache misses and branch mispredictions are not in it: the CPU time of
  an instruction is not the same in every part of the work.

Every run is a fresh process, on its main thread (the OpenTelemetry globals are set once
per process). Each figure's ratio is the inactive command's count over the
configuration's, read as :mod:`benchmarks.otel`'s ratios are (1.0: costs nothing). The
detail of the always-on row lists the functions that add the most bytecode over metrics
only: where the next change has to look.

    python -m benchmarks.otel_counts [--quick] [--machine]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks._harness import Figure, Harness
from benchmarks.otel import CONFIGURATIONS, embedded

Counts = collections.Counter[str]

ROOT = Path(__file__).resolve().parent.parent
_I_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


class Bytecodes:
    """Counts the Python bytecode instructions run on this thread between :meth:`start`
    and :meth:`stop`, by function (``file:name:first line``). Frames already running at
    the start count from their next resumption or call."""

    def __init__(self) -> None:
        self.counts: Counts = collections.Counter()
        self._previous: Any = None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            code = frame.f_code
            self.counts[f"{Path(code.co_filename).name}:{code.co_name}:{code.co_firstlineno}"] += 1
        return self._local

    def _call(self, frame: FrameType, event: str, arg: Any) -> Any:
        # every "call" event (a coroutine resumed included) gets the opcode tracer. f_trace
        # is assigned, not only returned: on CPython 3.12 and 3.13 (sys.settrace on
        # sys.monitoring; seen on 3.12.1 and 3.13.0) f_trace_opcodes set here with the
        # tracer only returned gave no opcode event.
        frame.f_trace_opcodes = True
        frame.f_trace = self._local
        return self._local

    def start(self) -> None:
        self._previous = sys.gettrace()
        # CPython 3.12.1 (sys.settrace on sys.monitoring; cpython#114480) gives the first
        # sys.settrace of a process no opcode event unless a frame already has
        # f_trace_opcodes set: this frame asks for a moment. It has no f_trace of its own,
        # so none of its opcodes is counted.
        here = sys._getframe()
        asked, here.f_trace_opcodes = here.f_trace_opcodes, True
        sys.settrace(self._call)
        here.f_trace_opcodes = asked

    def stop(self) -> Counts:
        sys.settrace(self._previous)
        return self.counts


def bytecodes(run: Callable[[], Any]) -> Counts:
    """The Python bytecode instructions ``run()`` executes on this thread, by function."""
    counter = Bytecodes()
    counter.start()
    try:
        run()
    finally:
        counter.stop()
    return counter.counts


def commands_run(name: str, count: int, warmed_up: Callable[[], None] | None = None) -> int:
    """Run the embedded benchmark of configuration ``name`` for ``count`` commands (a
    multiple of its 64 callers), ``warmed_up`` called after its warm-up; the commands run."""
    if count % 64:
        raise ValueError(f"{count} commands: not a multiple of the 64 callers")
    asyncio.run(embedded(name, count, wow_run=True, warmed_up=warmed_up))
    return count


def _child(what: str, *options: str) -> list[str]:
    """A fresh interpreter running ``--child WHAT OPTIONS``: each count in a process of
    its own, on its main thread, with nothing configured by an earlier run (the
    OpenTelemetry globals are set once per process)."""
    return [sys.executable, "-m", "benchmarks.otel_counts", "--child", what, *options]


def _run_child(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[-4:])} failed ({done.returncode}): {done.stderr[-800:]}")
    return done


def bytecodes_of_run(name: str, count: int) -> Counts:
    """The bytecodes a fresh process runs for ``count`` commands of ``name``, by function."""
    done = _run_child(_child("bytecodes", name, str(count)), timeout=900)
    return collections.Counter(json.loads(done.stdout.splitlines()[-1]))


def bytecodes_per_command(name: str, count: int) -> tuple[float, dict[str, float]]:
    """The marginal bytecode count of one command of configuration ``name`` between
    ``count`` and ``3 * count`` commands: the total and by function."""
    short, long = bytecodes_of_run(name, count), bytecodes_of_run(name, 3 * count)
    by_function = {key: (long[key] - short.get(key, 0)) / (2 * count) for key in long}
    return (sum(long.values()) - sum(short.values())) / (2 * count), by_function


def instructions(name: str, count: int) -> int:
    """Machine instructions of a process running ``count`` commands of ``name``, counted by
    ``valgrind --tool=cachegrind`` (its "I refs")."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not on the PATH")
    cachegrind = [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    done = _run_child([*cachegrind, *_child("run", name, str(count))], timeout=1800)
    found = _I_REFS.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr[-800:]}")
    return int(found.group(1).replace(",", ""))


def instructions_per_command(name: str, count: int) -> float:
    return (instructions(name, 3 * count) - instructions(name, count)) / (2 * count)


def top_over(base: dict[str, float], counted: dict[str, float], most: int = 12) -> dict[str, float]:
    """The functions that add the most bytecode per command in ``counted`` over ``base``."""
    added = {key: counted.get(key, 0) - base.get(key, 0) for key in set(base) | set(counted)}
    return {key: round(value, 1) for key, value in sorted(added.items(), key=lambda kv: -kv[1])[:most]}


async def run(h: Harness) -> list[Figure]:
    count = 128 if h.quick else 320
    found: list[Figure] = []
    # the children run one after the other: two at once would share the CPU's caches
    counted = {name: await asyncio.to_thread(bytecodes_per_command, name, count) for name in CONFIGURATIONS}
    off = counted["off"][0]
    for name in CONFIGURATIONS:
        total, by_function = counted[name]
        detail: dict[str, Any] = {"commands": [count, 3 * count]}
        if name == "all":
            detail["most_over_metrics"] = top_over(counted["metrics"][1], by_function)
        found.append(
            Figure(
                f"embedded send_and_wait(PROCESSED) as wow run runs it, otel {name}: Python bytecodes",
                total,
                "bytecodes/command",
                ratio=None if name == "off" else off / total,
                ratio_of=None if name == "off" else "otel off, Python bytecodes per command",
                detail=detail,
            )
        )
    if not h.options.machine:
        return found
    if shutil.which("valgrind") is None:
        h.failures.append("--machine: valgrind is not on the PATH")
        return found
    machine_count = 128 if h.quick else 320
    machine = {
        name: await asyncio.to_thread(instructions_per_command, name, machine_count)
        for name in CONFIGURATIONS
    }
    for name in CONFIGURATIONS:
        found.append(
            Figure(
                f"embedded send_and_wait(PROCESSED) as wow run runs it, otel {name}: machine instructions",
                machine[name],
                "instructions/command",
                ratio=None if name == "off" else machine["off"] / machine[name],
                ratio_of=None if name == "off" else "otel off, machine instructions per command",
                detail={
                    "commands": [machine_count, 3 * machine_count],
                    "counted_by": "valgrind --tool=cachegrind",
                },
            )
        )
    return found


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--machine",
        action="store_true",
        help="count machine instructions too, under valgrind (minutes per configuration)",
    )


def _main_of_child(what: str, name: str, count: int) -> None:
    if what == "run":
        commands_run(name, count)
    elif what == "bytecodes":  # from the end of the warm-up to the end of the process's run
        counter = Bytecodes()
        try:
            commands_run(name, count, warmed_up=counter.start)
        finally:
            counter.stop()
        print(json.dumps(counter.counts))
    else:
        raise SystemExit(f"unknown child {what!r}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _main_of_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        Harness.main("otel_counts", run, __doc__, _options)
