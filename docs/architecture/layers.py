"""Draws ``layers.svg``, the layer diagram of docs/architecture.md, from :data:`LAYERS`.

Run ``python docs/architecture/layers.py`` after changing :data:`LAYERS`. The test
``tests/docs/test_architecture_page.py`` checks that the committed SVG is what this
script draws, that every package of ``wow_core`` is drawn, and that every import
between them goes from a row to a row below it (the claim the picture makes).
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
TARGET = HERE / "layers.svg"

LAYERS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "foundations: import nothing of wow_core",
        [
            ("model", "ids, messages, wire"),
            ("settings", "sections, bounds"),
            ("metrics", "facade"),
            ("concurrency", "LanePool, eager"),
            ("executor", "Executor protocol"),
            ("stop_signals", "StartupSignals"),
        ],
    ),
    ("", [("context", "the ContextCapture SPI")]),
    ("", [("messaging", "bus contract, exchanges, in-memory buses, local_first")]),
    (
        "",
        [
            ("command", "CommandGateway, waits, WaitCoordinator"),
            ("eventsourcing", "EventStore, SnapshotRepository, in-memory stores"),
            ("transport", "Transport SPI, TransportMessageBus, receiver kit, in-memory"),
        ],
    ),
    (
        "",
        [
            ("modeling", "aggregates, CommandKernel, CommandDispatcher"),
            ("event", "the event dispatch pipeline"),
        ],
    ),
    (
        "",
        [
            ("middleware", "decorators of buses, gateway, handler, store"),
            ("plugins", "hookspecs, plugin manager, CLI Command"),
        ],
    ),
    (
        "",
        [
            ("cluster", "CommandIntake, receipts, failure ledger, checkpoints"),
            ("application", "application commands: bus, TransportMiddleware, serializers, CommandWorker"),
        ],
    ),
    ("", [("runtime", "WowSettings, container, assembly, WowRuntime, KeyedExecutor, WowApp, CLI")]),
    ("", [("testing", "given/when/expect specs, TestRuntime, conformance suites")]),
    ("", [("examples", "the bank example, wow demo's (a link to examples/bank in a checkout)")]),
    ("", [("launcher", "the wow executable: stop signals recorded first, then the CLI")]),
]
"""The rows of the diagram, bottom first: (caption, [(package, what it owns)])."""

SURFACES = [
    ("wow_core", "what a service imports"),
    ("wow_core.spi", "what a plugin imports"),
]
"""The top band: the public surfaces, lazy names re-exported from the rows below."""

PLUGINS = (
    "wow_kafka, wow_redis, wow_nats, wow_postgres",
    "import transport, messaging, settings, metrics, plugins; never runtime",
)

WIDTH = 840
MAIN = 620
LEFT = 40
ROW = 84
BOX = 66
GAP = 12
FONT = 12


def _wrap(text: str, width: float) -> list[str]:
    limit = max(8, int(width / (FONT * 0.56)))
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= limit:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _box(x: float, y: float, w: float, h: float, title: str, text: str, fill: str) -> list[str]:
    out = [
        f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" rx="6" '
        f'fill="{fill}" stroke="#334155"/>',
        f'<text x="{x + w / 2:.0f}" y="{y + 17:.0f}" font-size="{FONT + 1}" font-weight="bold" '
        f'text-anchor="middle">{escape(title)}</text>',
    ]
    for i, line in enumerate(_wrap(text, w - 10)[:3]):
        out.append(
            f'<text x="{x + w / 2:.0f}" y="{y + 33 + i * 14:.0f}" font-size="{FONT}" '
            f'text-anchor="middle" fill="#1f2937">{escape(line)}</text>'
        )
    return out


def draw() -> str:
    rows = len(LAYERS) + 1
    top = 50
    height = top + rows * ROW + 40
    body: list[str] = [
        f'<text x="{LEFT}" y="28" font-size="15" font-weight="bold">The layers of wow_core: '
        "a package imports only the rows below it</text>",
    ]
    # the public surfaces on top, then the rows from the highest down
    y = top
    width = (MAIN - GAP * (len(SURFACES) - 1)) / len(SURFACES)
    for i, (name, text) in enumerate(SURFACES):
        body += _box(LEFT + i * (width + GAP), y, width, BOX, name, text, "#fde68a")
    for caption, packages in reversed(LAYERS):
        y += ROW
        width = (MAIN - GAP * (len(packages) - 1)) / len(packages)
        for i, (name, text) in enumerate(packages):
            body += _box(LEFT + i * (width + GAP), y, width, BOX, name, text, "#dbeafe")
        if caption:
            body.append(
                f'<text x="{LEFT}" y="{y + BOX + 15:.0f}" font-size="{FONT}" '
                f'fill="#475569">{escape(caption)}</text>'
            )
    # the direction of imports, down the left margin
    line_x = 26
    body.append(
        f'<line x1="{line_x}" y1="{top + ROW:.0f}" x2="{line_x}" y2="{y + BOX - 6:.0f}" '
        'stroke="#334155" stroke-width="2"/>'
    )
    body.append(
        f'<path d="M {line_x - 6} {y + BOX - 12:.0f} L {line_x} {y + BOX:.0f} '
        f'L {line_x + 6} {y + BOX - 12:.0f} Z" fill="#334155"/>'
    )
    label_y = top + ROW + 200
    body.append(
        f'<text x="16" y="{label_y}" font-size="{FONT}" fill="#334155" text-anchor="middle" '
        f'transform="rotate(-90 16 {label_y})">imports point down</text>'
    )
    # the transport plugins beside the rows they use
    side = LEFT + MAIN + 24
    side_width = WIDTH - side - 12
    plugin_y = top + ROW * (len(LAYERS) - 3)
    names = _wrap(PLUGINS[0], side_width - 10)
    rules = _wrap(PLUGINS[1], side_width - 10)
    box_height = 26 + 14 * (len(names) + len(rules)) + 8
    body.append(
        f'<rect x="{side}" y="{plugin_y}" width="{side_width}" height="{box_height}" rx="6" '
        'fill="#dcfce7" stroke="#334155"/>'
    )
    body.append(
        f'<text x="{side + side_width / 2:.0f}" y="{plugin_y + 17}" font-size="{FONT + 1}" '
        'font-weight="bold" text-anchor="middle">transport plugins</text>'
    )
    for i, (line, colour) in enumerate([(n, "#1f2937") for n in names] + [(r, "#166534") for r in rules]):
        body.append(
            f'<text x="{side + side_width / 2:.0f}" y="{plugin_y + 33 + i * 14}" font-size="{FONT}" '
            f'text-anchor="middle" fill="{colour}">{escape(line)}</text>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" role="img" '
        'aria-label="The layers of wow_core">\n'
        '<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )


if __name__ == "__main__":
    TARGET.write_text(draw(), encoding="utf-8")
    print(f"wrote {TARGET}")
