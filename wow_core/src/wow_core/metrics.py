"""A small metrics facade: counters, gauges and histograms with bounded tag sets.

The core writes its metrics here (``wow.local_first.backlog``,
``wow.processing.outcomes``, bus send and receive counts); ``wow-otel`` registers the
backend ``otel`` (``WOW_METRICS=otel``), which writes them to OpenTelemetry instruments.
The core depends on no metrics library. Tag values are bounded: past
``max_series`` distinct tag sets per metric, new tag sets are recorded as
``{"overflow": "true"}`` so business ids can never blow up a backend.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Tags = Mapping[str, str]
TagKey = tuple[tuple[str, str], ...]

OVERFLOW: TagKey = (("overflow", "true"),)

metrics_source: contextvars.ContextVar[str] = contextvars.ContextVar("wow_metrics_source", default="")
"""Who is sending (``gateway``, ``saga:<name>``...); a tag of send metrics.

Local-first copies capture it (see :mod:`wow_core.context`) so a copy sent later is
still attributed to its sender.
"""


RECORDS_MESSAGING = "records_messaging"
"""The attribute of a backend that records the bus metrics itself (true on wow-otel's,
which counts sends and receives by the OpenTelemetry messaging conventions in its own
middleware): the core's metrics middleware then counts no ``wow.bus.sent`` or
``wow.bus.received`` into it, so no message is counted twice under two names."""


RECORDS_COMMAND_OUTCOMES = "records_command_outcomes"
"""The attribute of a backend whose own middleware counts the command handler's
outcomes (``wow.command.rejections``, ``wow.command.duplicates``,
``wow.command.version_conflicts``, ``wow.command.publish_failures``,
``wow.command.void_dropped``, same names and tags) in its own handler decorator: the
core's metrics middleware then leaves the handler undecorated, so a command passes one
decorator frame, not two (true on wow-otel's)."""

GaugeSource = Callable[[], Iterable[tuple[Tags, float]]]
"""``source()``: the ``(tags, value)`` series of a gauge read when it is collected
(:func:`observed_gauge`)."""

Record = Callable[[float], None]
"""``record(value)``: one metric and one tag set bound (:func:`bound_counter`,
:func:`bound_gauge`)."""


def bound_counter(metrics: Metrics, name: str, tags: Tags | None = None) -> Record:
    """``add(value)`` = ``metrics.increment(name, value, tags)``, the name and tags bound
    once: for a hot path that records the same series again and again.

    A backend with ``bind_counter(name, tags)`` returns its own (wow-otel's resolves the
    series once, so an ``add`` is one addition); any other backend gets the plain call.
    ``tags`` must not change afterwards. The counts are the same either way.
    """
    bind = getattr(metrics, "bind_counter", None)
    if bind is not None:
        bound: Record = bind(name, tags)
        return bound
    return functools.partial(metrics.increment, name, tags=tags)


def bound_gauge(metrics: Metrics, name: str, tags: Tags | None = None) -> Record:
    """``set(value)`` = ``metrics.gauge(name, value, tags)``, bound once (as
    :func:`bound_counter`; a backend may provide ``bind_gauge(name, tags)``)."""
    bind = getattr(metrics, "bind_gauge", None)
    if bind is not None:
        bound: Record = bind(name, tags)
        return bound
    return functools.partial(metrics.gauge, name, tags=tags)


def observed_gauge(metrics: Metrics, name: str, source: GaugeSource) -> bool:
    """Read the gauge ``name`` from ``source`` when the backend collects, if it can.

    A backend with ``observe_gauge(name, source)`` (wow-otel's: an observable gauge's
    callback, called on the SDK's collecting thread) takes it and this returns True:
    the caller then does not report each change. Any other backend returns False and is
    told each value by :meth:`Metrics.gauge` as before.
    """
    observe = getattr(metrics, "observe_gauge", None)
    if observe is None:
        return False
    return bool(observe(name, source))


CounterSource = Callable[[], Iterable[tuple[Tags, float]]]
"""The ``(tags, total)`` pairs of a monotonic counter, totals since the start."""


def observed_counter(metrics: Metrics, name: str, source: CounterSource) -> bool:
    """Read the counter ``name``'s totals from ``source`` when the backend collects, if
    it can (as :func:`observed_gauge`): a backend with ``observe_counter(name, source)``
    (wow-otel's: an observable counter's callback) takes it and this returns True, the
    caller then keeps its totals itself and reports no increment; any other backend
    returns False and is told each increment by :meth:`Metrics.increment` as before."""
    observe = getattr(metrics, "observe_counter", None)
    if observe is None:
        return False
    return bool(observe(name, source))


@runtime_checkable
class Metrics(Protocol):
    """Where metrics are written."""

    def increment(self, name: str, value: float = 1.0, tags: Tags | None = None) -> None: ...

    def gauge(self, name: str, value: float, tags: Tags | None = None) -> None: ...

    def observe(self, name: str, value: float, tags: Tags | None = None) -> None:
        """Record one value into a histogram."""
        ...


class NoopMetrics:
    """The default: records nothing, costs nothing."""

    __slots__ = ()

    def increment(self, name: str, value: float = 1.0, tags: Tags | None = None) -> None:
        pass

    def gauge(self, name: str, value: float, tags: Tags | None = None) -> None:
        pass

    def observe(self, name: str, value: float, tags: Tags | None = None) -> None:
        pass


@dataclass(slots=True)
class _Series:
    counters: dict[TagKey, float] = field(default_factory=dict)
    gauges: dict[TagKey, float] = field(default_factory=dict)
    histograms: dict[TagKey, list[float]] = field(default_factory=dict)


class InMemoryMetrics:
    """Keeps every value in memory; tests read it back."""

    def __init__(self, max_series: int = 1000) -> None:
        self.max_series = max_series
        self._metrics: dict[str, _Series] = {}
        self._lock = threading.Lock()

    def _key(self, series: dict[TagKey, object], tags: Tags | None) -> TagKey:
        key: TagKey = tuple(sorted(tags.items())) if tags else ()
        if key not in series and len(series) >= self.max_series:
            return OVERFLOW
        return key

    def _series(self, name: str) -> _Series:
        series = self._metrics.get(name)
        if series is None:
            series = self._metrics[name] = _Series()
        return series

    def increment(self, name: str, value: float = 1.0, tags: Tags | None = None) -> None:
        with self._lock:
            counters = self._series(name).counters
            key = self._key(counters, tags)  # type: ignore[arg-type]
            counters[key] = counters.get(key, 0.0) + value

    def gauge(self, name: str, value: float, tags: Tags | None = None) -> None:
        with self._lock:
            gauges = self._series(name).gauges
            gauges[self._key(gauges, tags)] = value  # type: ignore[arg-type]

    def observe(self, name: str, value: float, tags: Tags | None = None) -> None:
        with self._lock:
            histograms = self._series(name).histograms
            histograms.setdefault(self._key(histograms, tags), []).append(value)  # type: ignore[arg-type]

    # -- reading ------------------------------------------------------------------------

    def counter_value(self, name: str, **tags: str) -> float:
        """Sum of the counter over every series whose tags include ``tags``."""
        series = self._metrics.get(name)
        if series is None:
            return 0.0
        wanted = set(tags.items())
        return sum(v for k, v in series.counters.items() if wanted <= set(k))

    def gauge_value(self, name: str, **tags: str) -> float | None:
        series = self._metrics.get(name)
        if series is None:
            return None
        return series.gauges.get(tuple(sorted(tags.items())))

    def histogram_values(self, name: str, **tags: str) -> list[float]:
        series = self._metrics.get(name)
        if series is None:
            return []
        wanted = set(tags.items())
        return [v for k, values in series.histograms.items() if wanted <= set(k) for v in values]

    def series(self, name: str) -> dict[str, dict[TagKey, object]]:
        found = self._metrics.get(name) or _Series()
        return {
            "counters": dict(found.counters),
            "gauges": dict(found.gauges),
            "histograms": dict(found.histograms),
        }

    def names(self) -> list[str]:
        return sorted(self._metrics)
