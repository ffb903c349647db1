"""Draws ``states.svg``, the state diagram of the ``ExecutionFailed`` record, from the
mermaid source beside it (``states.mmd``), so the docs show it without loading mermaid
from a CDN.

Run ``python docs/compensation/states.py`` after changing ``states.mmd``. The test
``tests/docs/test_compensation_states.py`` checks that the committed SVG is what this
script draws and that the states are the aggregate's. It reads the subset of mermaid's
``stateDiagram-v2`` the diagram uses (``A --> B: label``, ``[*]`` for start and end) and
lays the states out on one row, where :data:`X` puts them (``[*]`` is drawn twice:
the start on the left, the end on the right).
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "states.mmd"
TARGET = HERE / "states.svg"

X = {"[*]": 30, "FAILED": 270, "PREPARED": 560, "SUCCEEDED": 870, "[*] end": 1010}
"""Where each state's centre is."""
WIDTH, HEIGHT = 1040, 340
MID = 170
BOX_W, BOX_H = 130, 44
FONT = 13

_EDGE = re.compile(r"^\s*(\S+)\s*-->\s*([^:\s]+)\s*(?::\s*(.*))?$")


def parse(text: str) -> list[tuple[str, str, str]]:
    """The transitions ``(source, target, label)`` of a ``stateDiagram-v2`` source."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip() != "stateDiagram-v2":
        raise ValueError("states.mmd must start with stateDiagram-v2")
    edges = []
    for line in lines[1:]:
        match = _EDGE.match(line)
        if match is None:
            raise ValueError(f"not a transition this script draws: {line.strip()!r}")
        source, target, label = match.group(1), match.group(2), (match.group(3) or "").strip()
        edges.append((source, target, label))
    return edges


def _x(state: str, end: bool = False) -> float:
    name = "[*] end" if state == "[*]" and end else state
    if name not in X:
        raise ValueError(f"state {state!r} has no place in X")
    return X[name]


def _wrap(text: str, width: float) -> list[str]:
    """``text`` in lines of at most ``width`` pixels (an estimate: 0.55 em a character)."""
    limit = max(8, int(width / (FONT * 0.55)))
    lines: list[str] = []
    for part in re.split(r",\s+", text):
        line = ""
        for word in part.split():
            if line and len(line) + 1 + len(word) > limit:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}".strip()
        if line:
            lines.append(line)
    return lines


def _label(x: float, y: float, text: str, width: float = 260, above: bool = False) -> str:
    """``text`` centred on ``x``; its first line at ``y`` (its last, when ``above``)."""
    lines = _wrap(text, width)
    if above:
        y -= (len(lines) - 1) * (FONT + 3)
    out = []
    for i, line in enumerate(lines):
        out.append(
            f'<text x="{x:.0f}" y="{y + i * (FONT + 3):.0f}" text-anchor="middle">{escape(line)}</text>'
        )
    return "".join(out)


def draw(edges: list[tuple[str, str, str]]) -> str:
    parts: list[str] = []
    pairs = {(s, t) for s, t, _ in edges}
    for source, target, label in edges:
        start_x = _x(source)
        end_x = _x(target, end=True)
        if source == target:  # a loop under the right of the box
            x = start_x + 40
            bottom = MID + BOX_H / 2
            parts.append(
                f'<path d="M {x - 18:.0f} {bottom:.0f} C {x - 30:.0f} {bottom + 60:.0f} {x + 30:.0f} '
                f'{bottom + 60:.0f} {x + 18:.0f} {bottom + 2:.0f}" class="edge" marker-end="url(#arrow)"/>'
            )
            parts.append(_label(x + 20, bottom + 66 + FONT, label, 150))
        elif (target, source) in pairs and source != "[*]" and target != "[*]":
            forward = start_x < end_x
            sign = -1 if forward else 1  # forward above, backward below
            y = MID + sign * BOX_H / 2
            bend = MID + sign * 95
            a = start_x + (30 if forward else -30)
            b = end_x - (30 if forward else -30)
            parts.append(
                f'<path d="M {a:.0f} {y:.0f} C {a:.0f} {bend:.0f} {b:.0f} {bend:.0f} {b:.0f} {y:.0f}" '
                'class="edge" marker-end="url(#arrow)"/>'
            )
            if forward:
                parts.append(_label((start_x + end_x) / 2, MID - 84, label, 300, above=True))
            else:
                parts.append(_label((start_x + end_x) / 2 - 40, MID + 84 + FONT, label, 220))
        else:
            a = start_x + (12 if source == "[*]" else BOX_W / 2)
            b = end_x - (12 if target == "[*]" else BOX_W / 2) - 2
            parts.append(
                f'<line x1="{a:.0f}" y1="{MID}" x2="{b:.0f}" y2="{MID}" class="edge" '
                'marker-end="url(#arrow)"/>'
            )
            if label:
                parts.append(_label((a + b) / 2, MID - 12, label, b - a - 10, above=True))
    for name in X:
        x = X[name]
        if name == "[*]":
            parts.append(f'<circle cx="{x:.0f}" cy="{MID}" r="10" class="start"/>')
        elif name == "[*] end":
            parts.append(f'<circle cx="{x:.0f}" cy="{MID}" r="11" class="end-ring"/>')
            parts.append(f'<circle cx="{x:.0f}" cy="{MID}" r="6" class="start"/>')
        else:
            parts.append(
                f'<rect x="{x - BOX_W / 2:.0f}" y="{MID - BOX_H / 2:.0f}" width="{BOX_W}" height="{BOX_H}" '
                f'rx="8" class="state"/><text x="{x:.0f}" y="{MID + 5}" text-anchor="middle" '
                f'class="name">{escape(name)}</text>'
            )
    style = (
        f"text {{ font: {FONT}px sans-serif; fill: #1b1f24; }} .name {{ font-weight: 700; }} "
        ".edge { fill: none; stroke: #4a5260; stroke-width: 1.5; } "
        ".state { fill: #eef3fd; stroke: #0b57d0; stroke-width: 1.5; } "
        ".start { fill: #1b1f24; } .end-ring { fill: none; stroke: #1b1f24; stroke-width: 2; }"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-labelledby="title">\n'
        '<title id="title">The states of an ExecutionFailed record</title>\n'
        f"<style>{style}</style>\n"
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#4a5260"/></marker></defs>\n'
        + "\n".join(parts)
        + "\n</svg>\n"
    )


def render() -> str:
    return draw(parse(SOURCE.read_text(encoding="utf-8")))


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET}")
