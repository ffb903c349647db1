"""Run every benchmark module, then draw their results: ``python -m benchmarks``.

Every ``benchmarks/<name>.py`` (not starting with ``_``) runs as
``python -m benchmarks.<name>`` in its own process, one after the other, each writing
``benchmarks/results/<name>.json``. Then every result file is drawn into one SVG
(``benchmarks/results/benchmarks.svg``, copied to ``docs/benchmarks/benchmarks.svg``):
cost per operation in asyncio-queue hops measured in the same run, and framework over
raw-client throughput ratios. A module that fails (a broker that is down) is reported
and the others still run; the exit status says whether all succeeded.

    python -m benchmarks [NAME ...] [--only NAME ...] [--quick] [--timeout SECONDS] [--plot-only]

``python -m benchmarks head_to_head`` runs only the named modules (``--only`` does the
same). The parts of ``head_to_head`` (``head_to_head_embedded``, ``head_to_head_brokers``)
run through it, not on their own, unless named.
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


PARTS_OF = {"head_to_head_": "head_to_head"}
"""Modules run as parts of another (``head_to_head`` runs ``head_to_head_*``): not run on
their own by ``python -m benchmarks`` unless named."""


def modules(include_parts: bool = False) -> list[str]:
    return sorted(
        path.stem
        for path in HERE.glob("*.py")
        if not path.stem.startswith("_")
        and path.stem != "__main__"
        and (include_parts or not any(path.stem.startswith(prefix) for prefix in PARTS_OF))
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


Ratio = tuple[str, float, str]
"""``(label, ratio, absolute figure beside it)``."""


def _absolute(figure: dict[str, Any]) -> str:
    value = _number(figure.get("value"))
    if value is None:
        return ""
    unit = str(figure.get("unit", ""))
    return f"{value:,.0f} {unit}".strip() if abs(value) >= 10 else f"{value:,.2f} {unit}".strip()


def bars(data: dict[str, Any]) -> tuple[list[tuple[str, float, float | None]], list[Ratio]]:
    """``(hops bars (label, hops, goal), ratio bars (label, ratio, absolute))`` of one result file."""
    hops: list[tuple[str, float, float | None]] = []
    ratios: list[Ratio] = []
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
                # what the ratio is against: the harness's ratio_of; older files kept it in detail
                detail = figure.get("detail") if isinstance(figure.get("detail"), dict) else {}
                baseline = figure.get("ratio_of") or (
                    detail.get("ratio_to") if isinstance(detail, dict) else None
                )
                shown = f"{label} (vs {baseline})" if baseline else label
                ratios.append((shown, float(figure["ratio"]), _absolute(figure)))
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
                ratios.append((f"{label} ({key})", ratio, ""))
    return hops, ratios


def load() -> list[dict[str, Any]]:
    """Every result file (not the ``.rows.json`` of rows run alone); the parts of
    ``head_to_head`` only when it was not merged."""
    found = []
    merged = (RESULTS / "head_to_head.json").exists()
    for path in sorted(RESULTS.glob("*.json")):
        if path.name.endswith(".rows.json"):
            continue  # some rows run alone (head_to_head_brokers --rows), not a result
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            print(f"!! {path.name} is not readable JSON: {error}")
            continue
        if isinstance(data, dict) and not (merged and data.get("part_of") == "head_to_head"):
            found.append(data)
    return found


# -- drawing -----------------------------------------------------------------------------
# The figure is drawn 960 px wide and shown about 750 px wide on the docs page, so the
# text is 13 px (about 10 px rendered). Text widths are estimated (sans-serif averages
# ~0.56 em per character; 0.6 keeps a margin): labels wrap onto several lines within the
# label column, and bars leave room on their right for the longest value text.

WIDTH = 960
LABEL_WIDTH = 470
FONT = 13
LINE = 16
BAR_HEIGHT = 18
GAP = 10


def text_width(text: str, size: float = FONT) -> float:
    """Estimated width in px of ``text`` at ``size`` px."""
    return len(text) * 0.6 * size


def wrap(text: str, width: float, size: float = FONT) -> list[str]:
    """``text`` in lines no wider than ``width`` px, broken between words (a word longer
    than a line is broken inside)."""
    limit = max(8, int(width / (0.6 * size)))
    lines: list[str] = []
    current = ""
    for word in text.split():
        while len(word) > limit:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:limit])
            word = word[limit:]
        candidate = f"{current} {word}" if current else word
        if len(candidate) <= limit:
            current = candidate
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines or [""]


def _panel(
    title: str,
    rows: list[tuple[str, float, float | None, str]],
    top: float,
    unit: str,
) -> tuple[list[str], float]:
    """A bar panel: rows ``(label, value, goal, note)``; ``note`` is written after the value."""
    parts: list[str] = []
    y = top + 4
    for line in wrap(title, WIDTH - 20, 15):
        y += 18
        parts.append(f'<text x="10" y="{y:.0f}" font-size="15" font-weight="bold">{escape(line)}</text>')
    y += 12
    if not rows:
        parts.append(f'<text x="10" y="{y + 14}" font-size="{FONT}" fill="#666">no figures</text>')
        return parts, y + 30
    values = [f"{value:.2f}{unit}" + (f"  {note}" if note else "") for _, value, _, note in rows]
    span = WIDTH - LABEL_WIDTH - 10 - max(text_width(v) for v in values) - 8
    span = max(120.0, span)
    scale_max = max(max(value, goal or 0) for _, value, goal, _ in rows) * 1.05 or 1.0
    for (label, value, goal, _), shown in zip(rows, values, strict=True):
        lines = wrap(label, LABEL_WIDTH - 16)
        height = max(BAR_HEIGHT, len(lines) * LINE)
        for n, line in enumerate(lines):
            parts.append(
                f'<text x="{LABEL_WIDTH - 8}" y="{y + 13 + n * LINE:.0f}" font-size="{FONT}" '
                f'text-anchor="end">{escape(line)}</text>'
            )
        length = max(1.0, value / scale_max * span)
        color = "#3b82f6" if goal is None or value <= goal else "#ef4444"
        parts.append(
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{length:.1f}" height="{BAR_HEIGHT}" fill="{color}"/>'
        )
        parts.append(
            f'<text x="{LABEL_WIDTH + length + 4:.1f}" y="{y + 13}" font-size="{FONT}">{escape(shown)}</text>'
        )
        if goal is not None:
            x = LABEL_WIDTH + goal / scale_max * span
            parts.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 2}" y2="{y + BAR_HEIGHT + 2}" '
                'stroke="#111" stroke-width="2" stroke-dasharray="3,2"/>'
            )
        y += height + GAP
    return parts, y + 10


def draw(results: list[dict[str, Any]]) -> str:
    hop_rows: list[tuple[str, float, float | None, str]] = []
    ratio_rows: list[tuple[str, float, float | None, str]] = []
    yardsticks = []
    for data in results:
        hops, ratios = bars(data)
        hop_rows += [(label, value, goal, "") for label, value, goal in hops]
        ratio_rows += [
            (label, ratio, None, f"({absolute})" if absolute else "") for label, ratio, absolute in ratios
        ]
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
    more, y = _panel(
        "Throughput over its baseline measured in the same run (higher is better; 1 = as fast): "
        "the raw client, or the peer named in brackets; the absolute figure in brackets",
        ratio_rows,
        y,
        "x",
    )
    body += more
    note = "Yardstick (pipelined asyncio.Queue hops): " + ("; ".join(yardsticks) or "none recorded")
    for line in wrap(note, WIDTH - 20, 11):
        y += 14
        body.append(f'<text x="10" y="{y:.0f}" font-size="11" fill="#444">{escape(line)}</text>')
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    body.append(f'<text x="10" y="{y + 16:.0f}" font-size="11" fill="#444">drawn {stamp}</text>')
    height = y + 30
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
    parser.add_argument("names", nargs="*", metavar="NAME", help="run only these modules (as --only)")
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
        wanted = [*args.names, *(args.only or [])]
        if wanted:
            known = modules(include_parts=True)
            unknown = sorted(set(wanted) - set(known))
            if unknown:
                parser.error(f"no benchmark module {', '.join(unknown)}; found {', '.join(known)}")
            names = [name for name in known if name in wanted]
        for name in names:
            if not run_module(name, args.quick, args.timeout):
                failed.append(name)
    if args.quick and not args.plot_only:
        print("--quick: the figures are in benchmarks/results/quick/; the plot is of the recorded ones")
    else:
        target = plot()
        print(f"plot: {target} and {DOCS_FIGURE}")
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
