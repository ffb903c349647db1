"""``DurationHistogram``: durations bucketed in the process, exported by the SDK's readers.

The SDK's synchronous histogram validates, copies and hashes the attributes of every
measurement, asks the exemplar filter, reads the clock and takes two locks (10-60 µs a
measurement on a busy 2-core machine); a command on the embedded runtime records eight
durations. A :class:`DurationHistogram` does a dict lookup by the identity of a cached
attribute dict, a ``bisect`` and four additions under one lock, and hands the SDK ready
points when a reader collects.

**What a reader exports** is what the SDK's own explicit-bucket histogram exports for the
same recordings (a test compares both): one :class:`HistogramDataPoint` per attribute set
with ``count``, ``sum``, ``min``, ``max``, the ``bucket_counts`` over the same boundaries
(:data:`~wow_otel.semconv.DURATION_BUCKETS`, the advisory boundaries the synchronous
instrument is created with), the instrument's ``name``, ``unit`` and ``description``, in
the instrumentation scope of the meter, with the temporality the reader prefers for
histograms: cumulative (every attribate set seen, started at its first measurement) or
delta (the sets measured since the reader's previous collection, started then). Past
the reader's cardinality limit for histograms (the SDK's default: 2000 attribute sets),
the later sets are one point with ``otel.metric.overflow=true`` (a delta reader: per
collection, among the sets measured since the previous one). What differs: no
exemplars; past the limit of a delta reader, which sets keep their own point (the first
measured since the process started here, since the last collection in the SDK).

**How they reach the readers.** The Python SDK (1.45) has no ``MetricProducer`` yet (the
specification's hook for pre-aggregated data). :func:`producer_of` wraps the collect
callback the meter provider gives each of its readers (``MetricReader._collect``, set
through ``_set_collect_callback``, also for readers added later): the SDK collects as
always, then the producer adds its metrics to the result (into the scope's
``ScopeMetrics``, or a new one). When this is not possible it returns ``None`` and the
caller records to the SDK's synchronous histogram instead, so nothing is lost and the
points are the SDK's: the meter is not the SDK's (the API's no-op or proxy meter,
another implementation), the provider has **views** (they may rename, filter or
re-aggregate), a reader prefers another aggregation than the default for histograms,
or the SDK's internals are not the ones this module knows.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import replace
from time import time_ns
from typing import Any

from opentelemetry.metrics import Histogram as ApiHistogram
from opentelemetry.metrics import Meter

_logger = logging.getLogger(__name__)

Attributes = dict[str, Any]

OVERFLOW_ATTRIBUTES: Attributes = {"otel.metric.overflow": True}
"""The attributes of the point past the cardinality limit (the SDK's)."""

DEFAULT_LIMIT = 2000
"""Attribute sets per histogram (the SDK's default cardinality limit)."""


class _Point:
    """The totals of one attribute set since its first measurement.

    :meth:`record_ns` is the hot path of a decorator that keeps the point (resolved
    once per attribute set, :meth:`DurationHistogram.series`): one ``bisect`` of the
    nanoseconds on the boundaries in nanoseconds (the same bucket as the seconds on
    the boundaries in seconds: ``ns > b_ns`` exactly when ``ns / 1e9 > b``) and four
    updates under the histogram's lock.
    """

    __slots__ = (
        "attributes",
        "bounds_ns",
        "counts",
        "intervals",
        "lock",
        "max",
        "min",
        "owner",
        "start",
        "sum",
    )

    def __init__(
        self, attributes: Attributes, bounds_ns: tuple[int, ...], intervals: int, lock: threading.Lock
    ) -> None:
        self.attributes = dict(attributes)
        self.owner = attributes  # kept alive: its id finds this point
        self.bounds_ns = bounds_ns
        self.lock = lock
        self.counts = [0] * (len(bounds_ns) + 1)
        self.sum: float = 0
        self.min = math.inf
        self.max = -math.inf
        self.start = time_ns()
        # [min, max] since the last collection of each delta reader, by its slot
        self.intervals = [[math.inf, -math.inf] for _ in range(intervals)]

    def record_ns(self, ns: int) -> None:
        """Count a duration of ``ns`` nanoseconds (the difference of two readings of a
        monotonic clock: never negative)."""
        amount = ns / 1e9
        with self.lock:
            self.counts[bisect_left(self.bounds_ns, ns)] += 1
            self.sum += amount
            if amount < self.min:
                self.min = amount
            if amount > self.max:
                self.max = amount
            for interval in self.intervals:
                if amount < interval[0]:
                    interval[0] = amount
                if amount > interval[1]:
                    interval[1] = amount


class DurationHistogram:
    """One histogram instrument aggregated in the process (module docstring).

    ``record`` takes an attribute dict kept for the process's life (a cache's): points
    are found by its identity, and by its content for any other dict.
    """

    __slots__ = (
        "_by_content",
        "_by_id",
        "_intervals",
        "_lock",
        "boundaries",
        "bounds_ns",
        "description",
        "instrument",
        "limit",
        "name",
        "scope",
        "unit",
    )

    def __init__(
        self,
        name: str,
        unit: str,
        description: str,
        boundaries: Sequence[float],
        *,
        scope: Any = None,
        instrument: Any = None,
        limit: int = 10 * DEFAULT_LIMIT,
    ) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self.boundaries = tuple(float(b) for b in boundaries)
        self.bounds_ns = tuple(round(b * 1e9) for b in self.boundaries)
        self.scope = scope
        self.instrument = instrument
        self.limit = limit
        self._by_id: dict[int, _Point] = {}
        self._by_content: dict[frozenset[tuple[str, Any]], _Point] = {}
        self._intervals = 0
        self._lock = threading.Lock()

    def record(self, amount: float, attributes: Attributes) -> None:
        """Count ``amount`` (seconds) under ``attributes``. A negative, infinite or NaN
        amount is dropped with a warning, as the SDK's histogram does."""
        if not 0.0 <= amount < math.inf:
            _logger.warning("%s: dropped the measurement %r (not a finite duration)", self.name, amount)
            return
        point = self._by_id.get(id(attributes))
        if point is None:
            point = self._point(attributes)
            if point is None:
                return
        with self._lock:
            point.counts[bisect_left(self.boundaries, amount)] += 1
            point.sum += amount
            if amount < point.min:
                point.min = amount
            if amount > point.max:
                point.max = amount
            for interval in point.intervals:
                if amount < interval[0]:
                    interval[0] = amount
                if amount > interval[1]:
                    interval[1] = amount

    def _point(self, attributes: Attributes) -> _Point | None:
        key = frozenset(attributes.items())
        with self._lock:
            point = self._by_content.get(key)
            if point is None:
                if len(self._by_content) >= self.limit:
                    key = frozenset(OVERFLOW_ATTRIBUTES.items())
                    point = self._by_content.get(key)
                    attributes = OVERFLOW_ATTRIBUTES
                if point is None:
                    point = self._by_content[key] = _Point(
                        attributes, self.bounds_ns, self._intervals, self._lock
                    )
                    self._by_id[id(point.owner)] = point
        return point

    def series(self, attributes: Attributes) -> _Point:
        """The point of ``attributes`` (past the limit: the overflow point), for a caller
        that keeps it and records with :meth:`_Point.record_ns`."""
        point = self._by_id.get(id(attributes)) or self._point(attributes)
        assert point is not None
        return point

    # -- collection ---------------------------------------------------------------------

    def snapshot(
        self, slot: int | None
    ) -> tuple[int | None, list[tuple[_Point, tuple[int, ...], float, float, float]]]:
        """``(slot, [(point, counts, sum, min, max)...])`` now.

        ``slot`` ``None``: a cumulative reader, the min and max since the start. A delta
        reader passes the slot this returned at its previous collection (``-1`` at its
        first): the min and max since then, reset; at the first, the min and max since
        the start, and a new slot.
        """
        taken = []
        with self._lock:
            for point in self._by_content.values():
                if slot is None or slot < 0:
                    low, high = point.min, point.max
                else:
                    interval = point.intervals[slot]
                    low, high = interval
                    interval[0], interval[1] = math.inf, -math.inf
                taken.append((point, tuple(point.counts), point.sum, low, high))
            if slot is not None and slot < 0:
                slot = self._intervals
                self._intervals += 1
                for point in self._by_content.values():
                    point.intervals.append([math.inf, -math.inf])
        return slot, taken


_Row = tuple[Attributes, int, tuple[int, ...], float, float, float]
"""attributes, start, bucket counts, sum, min, max of one exported point."""


class _ReaderState:
    """What one reader has collected: its temporality, its delta slot and totals."""

    __slots__ = ("delta", "last", "limit", "previous", "slots")

    def __init__(self, delta: bool, limit: int) -> None:
        self.delta = delta
        self.limit = limit
        self.last: int | None = None  # the time of its previous collection (delta)
        self.slots: dict[int, int | None] = {}  # by id(histogram)
        self.previous: dict[int, tuple[tuple[int, ...], float]] = {}  # by id(point)


class DurationProducer:
    """The :class:`DurationHistogram` instruments of one SDK meter provider, added to
    what each of its readers collects (module docstring). One per provider:
    :func:`producer_of`."""

    def __init__(
        self,
        resource: Any,
        delta_of: Callable[[Any], bool],
        limit_of: Callable[[Any], int] = lambda _: DEFAULT_LIMIT,
    ) -> None:
        self.resource = resource
        self._delta_of = delta_of
        self._limit_of = limit_of
        self._histograms: dict[tuple[Any, str], DurationHistogram] = {}
        self._readers: weakref.WeakKeyDictionary[Any, _ReaderState] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def histogram(
        self,
        scope: Any,
        name: str,
        unit: str,
        description: str,
        boundaries: Sequence[float],
        instrument: Any = None,
    ) -> DurationHistogram:
        """The histogram ``name`` of ``scope`` (the one already made for that scope and
        name, as the SDK returns the same instrument twice)."""
        with self._lock:
            found = self._histograms.get((scope, name))
            if found is None:
                found = self._histograms[(scope, name)] = DurationHistogram(
                    name, unit, description, boundaries, scope=scope, instrument=instrument
                )
            return found

    def produce(self, reader: Any) -> dict[Any, list[Any]]:
        """The metrics of ``reader``'s collection now, by instrumentation scope."""
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            Histogram,
            HistogramDataPoint,
            Metric,
        )

        with self._lock:
            state = self._readers.get(reader)
            if state is None:
                state = self._readers[reader] = _ReaderState(self._delta_of(reader), self._limit_of(reader))
            histograms = list(self._histograms.values())
        now = time_ns()
        temporality = AggregationTemporality.DELTA if state.delta else AggregationTemporality.CUMULATIVE
        produced: dict[Any, list[Any]] = {}
        for histogram in histograms:
            instrument = histogram.instrument
            if instrument is not None and not _enabled(instrument):
                continue
            slot = state.slots.get(id(histogram), -1) if state.delta else None
            slot, taken = histogram.snapshot(slot)
            state.slots[id(histogram)] = slot
            rows: list[_Row] = []
            for point, counts, total, low, high in taken:
                start = point.start
                if state.delta:
                    before = state.previous.get(id(point))
                    state.previous[id(point)] = (counts, total)
                    if before is not None:
                        counts = tuple(now_ - then for now_, then in zip(counts, before[0], strict=True))
                        total -= before[1]
                    if not any(counts):
                        continue
                    if state.last is not None:
                        start = state.last
                rows.append((point.attributes, start, counts, total, low, high))
            if len(rows) > state.limit:  # the reader's cardinality limit: the rest overflow
                rows = [*rows[: state.limit], _merged(rows[state.limit :])]
            points = [
                HistogramDataPoint(
                    attributes=attributes,
                    start_time_unix_nano=start,
                    time_unix_nano=now,
                    count=sum(counts),
                    sum=total,
                    bucket_counts=counts,
                    explicit_bounds=histogram.boundaries,
                    min=low,
                    max=high,
                    exemplars=[],
                )
                for attributes, start, counts, total, low, high in rows
            ]
            if points:
                metric = Metric(
                    name=histogram.name,
                    description=histogram.description,
                    unit=histogram.unit,
                    data=Histogram(data_points=points, aggregation_temporality=temporality),
                )
                produced.setdefault(histogram.scope, []).append(metric)
        state.last = now
        return produced

    def merge(self, reader: Any, data: Any) -> Any:
        """``data`` (the SDK's collection for ``reader``, or ``None``) with this
        producer's metrics added."""
        from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics

        produced = self.produce(reader)
        if not produced:
            return data
        resources = list(data.resource_metrics) if data is not None else []
        if not resources:
            resources = [
                ResourceMetrics(resource=self.resource, scope_metrics=[], schema_url=self.resource.schema_url)
            ]
        first = resources[0]
        scopes = list(first.scope_metrics)
        for index, scope_metrics in enumerate(scopes):
            extra = produced.pop(scope_metrics.scope, None)
            if extra:
                scopes[index] = replace(scope_metrics, metrics=[*scope_metrics.metrics, *extra])
        for scope, metrics in produced.items():
            scopes.append(ScopeMetrics(scope=scope, metrics=metrics, schema_url=scope.schema_url))
        resources[0] = replace(first, scope_metrics=scopes)
        return MetricsData(resource_metrics=resources)


def _merged(rest: list[_Row]) -> _Row:
    """The rows past a reader's limit as its one overflow point."""
    counts = tuple(sum(column) for column in zip(*(row[2] for row in rest), strict=True))
    return (
        OVERFLOW_ATTRIBUTES,
        min(row[1] for row in rest),
        counts,
        sum(row[3] for row in rest),
        min(row[4] for row in rest),
        max(row[5] for row in rest),
    )


def _enabled(instrument: Any) -> bool:
    check = getattr(instrument, "_is_enabled", None)
    return bool(check()) if check is not None else True


_producers: weakref.WeakKeyDictionary[Any, DurationProducer] = weakref.WeakKeyDictionary()
_producers_lock = threading.Lock()


def producer_of(meter: Meter) -> DurationProducer | None:
    """The producer of ``meter``'s SDK meter provider, installed into its readers at the
    first call; ``None`` when the durations must go to the SDK's histograms (module
    docstring)."""
    consumer = getattr(meter, "_measurement_consumer", None)
    config = getattr(consumer, "_sdk_config", None)
    storages = getattr(consumer, "_reader_storages", None)
    if consumer is None or config is None or storages is None or not hasattr(meter, "_instrumentation_scope"):
        return None
    with _producers_lock:
        found = _producers.get(consumer)
        if found is not None:
            return found
        try:
            from opentelemetry.sdk.metrics._internal.instrument import _Histogram
            from opentelemetry.sdk.metrics.view import DefaultAggregation, ExplicitBucketHistogramAggregation
        except ImportError:  # pragma: no cover - another SDK layout
            return None
        if list(getattr(config, "views", ()) or ()):
            return None
        readers = list(storages)
        for reader in readers:
            aggregation = getattr(reader, "_instrument_class_aggregation", {}).get(_Histogram)
            if not isinstance(
                aggregation, (DefaultAggregation, ExplicitBucketHistogramAggregation, type(None))
            ):
                return None
            if not hasattr(reader, "_set_collect_callback"):
                return None

        def delta(reader: Any) -> bool:
            from opentelemetry.sdk.metrics.export import AggregationTemporality

            preferred = getattr(reader, "_instrument_class_temporality", {}).get(_Histogram)
            return preferred is AggregationTemporality.DELTA

        def limit(reader: Any) -> int:
            limits = getattr(reader, "_instrument_class_cardinality_limit", None) or {}
            return int(limits.get(_Histogram, DEFAULT_LIMIT))

        producer = DurationProducer(config.resource, delta, limit)
        sdk_collect = consumer.collect

        def collect(reader: Any, timeout_millis: float = 10_000) -> Any:
            data = sdk_collect(reader, timeout_millis=timeout_millis)
            try:
                return producer.merge(reader, data)
            except Exception:  # a failing producer must not cost the SDK's own metrics
                _logger.exception("wow-otel: the in-process durations could not be collected")
                return data

        consumer.collect = collect  # readers added later get it (MeterProvider.add_metric_reader)
        for reader in readers:
            reader._set_collect_callback(collect)
        _producers[consumer] = producer
        return producer


class SdkDurations:
    """The fallback: the SDK's synchronous histogram, same ``record`` signature."""

    __slots__ = ("histogram",)

    def __init__(self, histogram: ApiHistogram) -> None:
        self.histogram = histogram

    def record(self, amount: float, attributes: Attributes) -> None:
        self.histogram.record(amount, attributes)

    def series(self, attributes: Attributes) -> _SdkSeries:
        return _SdkSeries(self.histogram, attributes)


class _SdkSeries:
    """One attribute set of the SDK's histogram (the fallback of :meth:`DurationHistogram.series`)."""

    __slots__ = ("attributes", "histogram")

    def __init__(self, histogram: ApiHistogram, attributes: Attributes) -> None:
        self.histogram = histogram
        self.attributes = attributes

    def record_ns(self, ns: int) -> None:
        self.histogram.record(ns / 1e9, self.attributes)


def duration_histogram(
    meter: Meter, name: str, unit: str, description: str, boundaries: Sequence[float]
) -> DurationHistogram | SdkDurations:
    """A duration instrument of ``meter``: a :class:`DurationHistogram` exported by the
    provider's readers, or the SDK's synchronous histogram when that cannot be (module
    docstring). The SDK instrument is created either way (the SDK checks its name, and
    tells whether its meter is enabled)."""
    instrument = meter.create_histogram(
        name, unit=unit, description=description, explicit_bucket_boundaries_advisory=boundaries
    )
    producer = producer_of(meter)
    if producer is None:
        return SdkDurations(instrument)
    scope = meter._instrumentation_scope  # type: ignore[attr-defined]
    return producer.histogram(scope, name, unit, description, boundaries, instrument)
