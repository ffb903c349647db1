"""The benchmark runner's module selection and plot layout (no benchmark is run)."""

from __future__ import annotations

import re

import pytest

from benchmarks import __main__ as runner


def test_the_parts_of_head_to_head_run_through_it_unless_named() -> None:
    assert "head_to_head" in runner.modules()
    assert "head_to_head_embedded" not in runner.modules()
    assert "head_to_head_embedded" in runner.modules(include_parts=True)


def test_wrap_keeps_every_line_within_its_width() -> None:
    text = "command side, in-process buses, gc.freeze after warm-up: send_and_wait(PROCESSED) throughput"
    lines = runner.wrap(text, 200)
    assert len(lines) > 1
    assert " ".join(lines) == text
    assert all(runner.text_width(line) <= 200 for line in lines)
    assert all(runner.text_width(line) <= 100 for line in runner.wrap("x" * 500, 100))


def test_labels_fit_their_column_and_ratios_show_their_absolute_figure() -> None:
    long_label = "embedded default (local-first over InMemoryTransport, snapshots): " * 3
    results = [
        {
            "benchmark": "h",
            "figures": [
                {"name": long_label, "value": 12.5, "unit": "µs", "hops": 300.0, "goal_hops": 50.0},
                {
                    "name": "wow embedded default: throughput",
                    "value": 6543.2,
                    "unit": "commands/s",
                    "ratio": 2.5,
                    "detail": {"ratio_to": "eventsourcing cached"},
                },
            ],
        }
    ]
    svg = runner.draw(results)
    label = r'<text x="([\d.]+)" y="[\d.]+" font-size="(\d+)" text-anchor="end">([^<]*)</text>'
    labels = re.findall(label, svg)
    assert len(labels) > 3, "the long label wrapped onto several lines"
    for x, size, text in labels:
        assert runner.text_width(text, float(size)) <= float(x), f"cut on the left: {text!r}"
    values = re.findall(r'<text x="([\d.]+)" y="[\d.]+" font-size="(\d+)">([^<]*)</text>', svg)
    for x, size, text in values:
        assert float(x) + runner.text_width(text, float(size)) <= runner.WIDTH, f"cut on the right: {text!r}"
    assert "2.50x  (6,543 commands/s)" in svg
    assert "(vs eventsourcing cached)" in svg


def test_a_figure_line_names_what_its_ratio_is_against() -> None:
    from benchmarks._harness import Figure

    cpu = Figure("bus, otel metrics", 1000.0, ratio=0.98, ratio_of="otel off, per CPU second")
    assert cpu.line() == "bus, otel metrics: 1,000 ops/s, ratio 0.98 of otel off, per CPU second"
    peer = Figure("asyncpg inserts", 10.0, "inserts/s", ratio=1.5, ratio_of="psycopg")
    assert peer.line().endswith("ratio 1.50 of psycopg")
    assert peer.as_json()["ratio_of"] == "psycopg"
    assert "ratio" not in Figure("raw", 5.0).line()
    # a ratio that does not say what it is against is refused, not printed as "of raw"
    with pytest.raises(ValueError, match="ratio_of"):
        Figure("bus", 5.0, ratio=0.5)


def test_the_plot_names_what_a_ratio_is_against_from_the_harness_field() -> None:
    """Figures written by the harness say it in ``ratio_of``; older files in ``detail``."""
    results = [
        {
            "benchmark": "h",
            "figures": [
                {
                    "name": "gateway send",
                    "value": 10.0,
                    "unit": "ops/s",
                    "ratio": 0.8,
                    "ratio_of": "aiokafka",
                },
                {
                    "name": "older",
                    "value": 5.0,
                    "unit": "ops/s",
                    "ratio": 2.0,
                    "detail": {"ratio_to": "eventsourcing cached"},
                },
            ],
        }
    ]
    svg = runner.draw(results)
    assert "gateway send (vs aiokafka)" in svg
    assert "older (vs eventsourcing cached)" in svg
