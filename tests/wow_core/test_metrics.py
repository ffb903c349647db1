from __future__ import annotations

import asyncio
from typing import Any

from wow_core.context import CapturedContext, ContextCapture, MetricsSourceCapture
from wow_core.metrics import (
    OVERFLOW,
    InMemoryMetrics,
    Metrics,
    NoopMetrics,
    bound_counter,
    bound_gauge,
    metrics_source,
)


def test_both_recorders_are_metrics() -> None:
    assert isinstance(NoopMetrics(), Metrics)
    assert isinstance(InMemoryMetrics(), Metrics)
    noop = NoopMetrics()
    noop.increment("x")
    noop.gauge("x", 1)
    noop.observe("x", 1)


def test_counters_add_up_and_are_read_by_tag_subsets() -> None:
    metrics = InMemoryMetrics()
    metrics.increment("wow.processing.outcomes", tags={"outcome": "HANDLED", "function": "f"})
    metrics.increment("wow.processing.outcomes", 2, tags={"outcome": "HANDLED", "function": "g"})
    metrics.increment("wow.processing.outcomes", tags={"outcome": "FAILURE_RECORDED", "function": "f"})
    assert metrics.counter_value("wow.processing.outcomes") == 4
    assert metrics.counter_value("wow.processing.outcomes", outcome="HANDLED") == 3
    assert metrics.counter_value("wow.processing.outcomes", outcome="HANDLED", function="f") == 1
    assert metrics.counter_value("wow.never") == 0
    assert metrics.names() == ["wow.processing.outcomes"]


def test_gauges_keep_the_last_value_per_tag_set() -> None:
    metrics = InMemoryMetrics()
    metrics.gauge("wow.local_first.backlog", 5, tags={"aggregate": "order"})
    metrics.gauge("wow.local_first.backlog", 2, tags={"aggregate": "order"})
    metrics.gauge("wow.local_first.backlog", 9, tags={"aggregate": "cart"})
    assert metrics.gauge_value("wow.local_first.backlog", aggregate="order") == 2
    assert metrics.gauge_value("wow.local_first.backlog", aggregate="cart") == 9
    assert metrics.gauge_value("wow.local_first.backlog", aggregate="user") is None
    assert metrics.gauge_value("wow.nothing") is None


def test_histograms_keep_every_value() -> None:
    metrics = InMemoryMetrics()
    for value in (0.1, 0.2, 0.3):
        metrics.observe("wow.send.latency", value, tags={"bus": "command"})
    metrics.observe("wow.send.latency", 1.0, tags={"bus": "event"})
    assert metrics.histogram_values("wow.send.latency", bus="command") == [0.1, 0.2, 0.3]
    assert len(metrics.histogram_values("wow.send.latency")) == 4
    assert metrics.histogram_values("wow.none") == []


def test_tag_sets_are_bounded_per_metric() -> None:
    metrics = InMemoryMetrics(max_series=2)
    for request in range(10):
        metrics.increment("wow.bus.sent", tags={"id": str(request)})
    series = metrics.series("wow.bus.sent")["counters"]
    assert len(series) == 3, "two real series and the overflow series"
    assert series[OVERFLOW] == 8
    metrics.increment("wow.bus.sent", tags={"id": "0"})
    assert metrics.counter_value("wow.bus.sent", id="0") == 2, "a known series keeps counting"
    metrics.increment("wow.other", tags={"id": "new"})
    assert metrics.counter_value("wow.other", id="new") == 1, "the bound is per metric"


async def test_a_captured_metrics_source_is_restored_in_another_task() -> None:
    capture = MetricsSourceCapture()
    assert isinstance(capture, ContextCapture)
    token = metrics_source.set("saga:shipping")
    try:
        captured = CapturedContext([capture])
    finally:
        metrics_source.reset(token)
    seen: list[str] = []

    async def deferred_send() -> None:
        seen.append(metrics_source.get())
        with captured.restored():
            seen.append(metrics_source.get())
        seen.append(metrics_source.get())

    await asyncio.create_task(deferred_send())
    assert seen == ["", "saga:shipping", ""]


async def test_a_captured_metrics_source_taken_for_a_queued_copy_is_restored_in_another_task() -> None:
    token = metrics_source.set("saga:shipping")
    try:
        captured = CapturedContext.take([MetricsSourceCapture()])
    finally:
        metrics_source.reset(token)
    assert not captured.empty
    seen: list[str] = []

    async def deferred_send() -> None:
        with captured.restored():
            seen.append(metrics_source.get())
        seen.append(metrics_source.get())

    await asyncio.create_task(deferred_send())
    assert seen == ["saga:shipping", ""]


def test_the_default_metrics_source_is_not_kept_and_nothing_kept_is_shared() -> None:
    # The default ("") is what a worker's empty context has: nothing to keep per copy.
    assert MetricsSourceCapture().capture() is None
    first = CapturedContext.take([MetricsSourceCapture()])
    second = CapturedContext.take([MetricsSourceCapture()])
    assert first.empty
    assert first is second  # one shared instance, no allocation per queued copy
    with first.restored():
        assert metrics_source.get() == ""


class Binding(InMemoryMetrics):
    """A backend that binds its own series (and says which it bound)."""

    def __init__(self) -> None:
        super().__init__()
        self.bound: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []

    def bind_counter(self, name: str, tags: dict[str, str] | None = None) -> Any:
        self.bound.append(("counter", name, tuple(sorted((tags or {}).items()))))
        return lambda value: self.increment(name, value, tags)

    def bind_gauge(self, name: str, tags: dict[str, str] | None = None) -> Any:
        self.bound.append(("gauge", name, tuple(sorted((tags or {}).items()))))
        return lambda value: self.gauge(name, value, tags)


def test_a_bound_series_records_what_the_plain_calls_record() -> None:
    plain, bound = InMemoryMetrics(), InMemoryMetrics()
    add = bound_counter(bound, "wow.local_first.sends", {"bus": "command", "outcome": "handed_off"})
    set_backlog = bound_gauge(bound, "wow.local_first.backlog", {"aggregate": "order"})
    assert bound.names() == [], "binding records nothing: a series appears at its first value"
    for value in (1.0, 2.0):
        add(value)
        plain.increment("wow.local_first.sends", value, {"bus": "command", "outcome": "handed_off"})
    set_backlog(3)
    set_backlog(1)
    plain.gauge("wow.local_first.backlog", 1, {"aggregate": "order"})
    for name in ("wow.local_first.sends", "wow.local_first.backlog"):
        assert bound.series(name) == plain.series(name)


def test_a_backend_that_binds_its_series_is_asked_to() -> None:
    metrics = Binding()
    bound_counter(metrics, "wow.command.duplicates")(1.0)
    bound_gauge(metrics, "wow.local_first.backlog", {"aggregate": "order"})(4)
    assert metrics.bound == [
        ("counter", "wow.command.duplicates", ()),
        ("gauge", "wow.local_first.backlog", (("aggregate", "order"),)),
    ]
    assert metrics.counter_value("wow.command.duplicates") == 1
    assert metrics.gauge_value("wow.local_first.backlog", aggregate="order") == 4
