"""Head to head: wow-py beside the libraries a user would otherwise pick, in one run.

``python -m benchmarks head_to_head`` (or ``python -m benchmarks.head_to_head``) runs each
part that exists, each in its own process, one after the other, then merges their result
files into ``benchmarks/results/head_to_head.json``:

- ``benchmarks/head_to_head_embedded.py``: the embedded default, local-first off and the
  in-process buses beside the eventsourcing library's in-memory application (cached and
  uncached), throughput, latency and memory per aggregate;
- ``benchmarks/head_to_head_brokers.py``: sends and end-to-end flows through the gateway
  beside the raw clients and FastStream on Kafka, NATS and Redis.

Every part repeats its rows (3 times by default), rotating their order by one each repeat,
and reports medians with their spread; a peer library that is not installed
(``uv sync --all-packages --group bench``) is skipped with a message. A part that fails is
reported, the others still run, and the exit status is 1.

    python -m benchmarks.head_to_head [--quick] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results"
PARTS = ("head_to_head_embedded", "head_to_head_brokers")


def parts() -> list[str]:
    """The parts of this benchmark that exist in ``benchmarks/``."""
    return [name for name in PARTS if (HERE / f"{name}.py").exists()]


def run_part(name: str, quick: bool, repeat: int, timeout: float) -> bool:
    command = [sys.executable, "-m", f"benchmarks.{name}", "--repeat", str(repeat)]
    if quick:
        command.append("--quick")
    print(f"== head_to_head: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, timeout=timeout, cwd=HERE.parent)
    except subprocess.TimeoutExpired:
        print(f"!! {name} did not finish within {timeout:g}s", flush=True)
        return False
    print(f"== {name}: exit {done.returncode} after {time.perf_counter() - started:.1f}s", flush=True)
    return done.returncode == 0


def merge(names: list[str], failed: list[str]) -> dict[str, Any]:
    """One result file of every part's figures (each figure names its part)."""
    figures: list[dict[str, Any]] = []
    merged: dict[str, Any] = {
        "benchmark": "head_to_head",
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "parts": {},
        "failed": failed,
        "figures": figures,
    }
    for name in names:
        path = RESULTS / f"{name}.json"
        if name in failed or not path.exists():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        merged["parts"][name] = {
            key: data[key]
            for key in ("written", "load_average", "repeat", "skipped", "machine")
            if key in data
        }
        for figure in data.get("figures", []):
            if isinstance(figure, dict):
                figures.append({**figure, "part": name})
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.head_to_head",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="pass --quick to every part")
    parser.add_argument("--repeat", type=int, default=3, help="repeats per part (medians, spreads)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per part")
    args = parser.parse_args()
    names = parts()
    if not names:
        print("no head-to-head part found", file=sys.stderr)
        return 1
    failed = [name for name in names if not run_part(name, args.quick, args.repeat, args.timeout)]
    merged = merge(names, failed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "head_to_head.json"
    path.write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path} ({len(merged['figures'])} figures from {', '.join(merged['parts']) or 'no part'})")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
