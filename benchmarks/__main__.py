"""Run every benchmark module, then draw their results: ``python -m benchmarks``.

Every ``benchmarks/<name>.py`` (not starting with ``_``) runs as
``python -m benchmarks.<name>`` in its own process, one after the other, each writing
``benchmarks/results/<name>.json``. Then every result file is drawn into one SVG
(``benchmarks/results/benchmarks.svg``, copied to ``docs/benchmarks/benchmarks.svg``):
cost per operation in asyncio-queue hops measured in the same run, and framework over
raw-client throughput ratios. A module that fails (a broker that is down) is reported
and the others still run; the exit status says whether all succeeded.

    python -m benchmarks [--only NAME ...] [--quick] [--timeout SECONDS] [--plot-only]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from html import escape
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results"
DOCS_FIGURE = HERE.parent / "docs" / "benchmarks" / "benchmarks.svg"


def modules() -> list[str]:
    return sorted(
        path.stem for path in HERE.glob("*.py") if not path.stem.startswith("_") and path.stem != "__main__"
    )


def run_module(name: str, quick: bool, timeout: float) -> bool:
    command = [sys.executable, "-m", f"benchmarks.{name}"]
    help_text = subprocess.run(
        [*command, "--help"], capture_output=True, text=True, timeout=60, cwd=HERE.parent
    )
    if quick and "--quick" in help_text.stdout:
        command.append("--quick")
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, timeout=timeout, cwd=HERE.parent)
    except subprocess.TimeoutExpired:
        print(f"!! {name} did not finish within {timeout:g}s", flush=True)
        return False
    print(f"== {name}: exit {done.returncode} after {time.perf_counter() - started:.1f}s", flush=True)
    return done.returncode == 0


# -- reading results ---------------------------------------------------------------------


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def bars(data: dict[str, Any]) -> tuple[list[tuple[str, float, float | None]], list[tuple[str, float]]]:
    """``(hops bars (label, hops, goal), ratio bars (label, ratio))`` of one result file."""
    hops: list[tuple[str, float, float | None]] = []
    ratios: list[tuple[str, float]] = []
    name = str(data.get("benchmark", "?"))
    if isinstance(data.get("figures"), list):
        for figure in data["figures"]:
            if not isinstance(figure, dict):
                continue
            label = str(figure.get("name", name))
            if isinstance(figure.get("hops"), int | float):
                goal = figure.get("goal_hops")
                hops.append(
                    (label, float(figure["hops"]), float(goal) if isinstance(goal, int | float) else None)
                )
            if isinstance(figure.get("ratio"), int | float):
                ratios.append((label, float(figure["ratio"])))
        return hops, ratios
    # Other shapes: rows of "results" with a queue-hop cost (the one a goal names, else the
    # first "queue_hops_per_<op>" that is not a rate) or ratio figures.
    rows = data.get("results") if isinstance(data.get("results"), list) else []
    for row in rows or []:
        if not isinstance(row, dict):
            continue
        keys = [f"{k}={v}" for k, v in row.items() if isinstance(v, int) and not isinstance(v, bool)][:1]
        label = f"{name}: {', '.join(keys)}" if keys else name
        costs = [
            k
            for k, v in row.items()
            if "queue_hops_per" in k and "per_second" not in k and not k.startswith("goal")
        ]
        costs = [k for k in costs if f"goal_{k}" in row] or costs[:1]
        for key in costs:
            value = _number(row[key])
            if value is not None:
                hops.append((label, value, _number(row.get(f"goal_{key}"))))
        for key, raw in row.items():
            ratio = _number(raw)
            if "ratio" in key and ratio is not None:
                ratios.append((f"{label} ({key})", ratio))
    return hops, ratios


def load() -> list[dict[str, Any]]:
    found = []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            print(f"!! {path.name} is not readable JSON: {error}")
            continue
        if isinstance(data, dict):
            found.append(data)
    return found


# -- drawing -----------------------------------------------------------------------------

WIDTH = 960
LABEL_WIDTH = 520
BAR_HEIGHT = 18
GAP = 8


def _panel(
    title: str, rows: list[tuple[str, float, float | None]], top: float, unit: str
) -> tuple[list[str], float]:
    parts = [f'<text x="10" y="{top + 16}" font-size="15" font-weight="bold">{escape(title)}</text>']
    y = top + 30
    if not rows:
        parts.append(f'<text x="10" y="{y + 14}" font-size="12" fill="#666">no figures</text>')
        return parts, y + 30
    scale_max = max(max(value, goal or 0) for _, value, goal in rows) * 1.1 or 1.0
    span = WIDTH - LABEL_WIDTH - 90
    for label, value, goal in rows:
        length = max(1.0, value / scale_max * span)
        color = "#3b82f6" if goal is None or value <= goal else "#ef4444"
        parts.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 13}" font-size="12" '
            f'text-anchor="end">{escape(label)}</text>'
        )
        parts.append(
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{length:.1f}" height="{BAR_HEIGHT}" fill="{color}"/>'
        )
        parts.append(
            f'<text x="{LABEL_WIDTH + length + 4:.1f}" y="{y + 13}" font-size="12">{value:.2f}{unit}</text>'
        )
        if goal is not None:
            x = LABEL_WIDTH + goal / scale_max * span
            parts.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 2}" y2="{y + BAR_HEIGHT + 2}" '
                'stroke="#111" stroke-width="2" stroke-dasharray="3,2"/>'
            )
        y += BAR_HEIGHT + GAP
    return parts, y + 10


def draw(results: list[dict[str, Any]]) -> str:
    hop_rows: list[tuple[str, float, float | None]] = []
    ratio_rows: list[tuple[str, float, float | None]] = []
    yardsticks = []
    for data in results:
        hops, ratios = bars(data)
        hop_rows += hops
        ratio_rows += [(label, ratio, None) for label, ratio in ratios]
        stick = data.get("yardstick") or {}
        rate = stick.get("queue_hops_per_second") if isinstance(stick, dict) else None
        rate = rate or data.get("queue_hops_per_second")
        if isinstance(rate, int | float):
            yardsticks.append(f"{data.get('benchmark')}: {rate:,.0f} hops/s")
    body, y = _panel(
        "Cost per operation in asyncio-queue hops of the same run (lower is better; dashed: goal)",
        hop_rows,
        10,
        "",
    )
    more, y = _panel("Throughput over the raw client's (higher is better; 1 = as fast)", ratio_rows, y, "x")
    body += more
    note = "Yardstick (pipelined asyncio.Queue hops): " + ("; ".join(yardsticks) or "none recorded")
    body.append(f'<text x="10" y="{y + 10}" font-size="11" fill="#444">{escape(note)}</text>')
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    body.append(f'<text x="10" y="{y + 26}" font-size="11" fill="#444">drawn {stamp}</text>')
    height = y + 40
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="sans-serif">\n'
        f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )


def plot() -> Path:
    svg = draw(load())
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / "benchmarks.svg"
    target.write_text(svg, encoding="utf-8")
    DOCS_FIGURE.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(target, DOCS_FIGURE)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these modules")
    parser.add_argument("--quick", action="store_true", help="pass --quick to modules that take it")
    # 15 minutes: the cross-process waits (three brokers, processes started per broker) take
    # 5 to 6 on the busy 2-core machine, and more when the neighbours are busier
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per module")
    parser.add_argument("--plot-only", action="store_true", help="only redraw the plot from the results")
    args = parser.parse_args()
    failed: list[str] = []
    if not args.plot_only:
        names = modules()
        if args.only:
            unknown = sorted(set(args.only) - set(names))
            if unknown:
                parser.error(f"no benchmark module {', '.join(unknown)}; found {', '.join(names)}")
            names = [name for name in names if name in args.only]
        for name in names:
            if not run_module(name, args.quick, args.timeout):
                failed.append(name)
    target = plot()
    print(f"plot: {target} and {DOCS_FIGURE}")
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
