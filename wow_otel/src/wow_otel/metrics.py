"""``OtelMetrics``: the metrics backend ``otel`` (``WOW_METRICS=otel``).

The core's metrics facade (:class:`~wow_core.metrics.Metrics`) written to OpenTelemetry
instruments of one meter: ``increment`` to an observable counter (summed here, a dict
update per call, read by the SDK when it collects: the SDK's synchronous counter costs
tens of microseconds per call; the tags of a dict the core keeps are sorted once, not at
every call), ``observe`` to a histogram, and
``gauge`` to an **observable gauge** (the last value of each attribute set, read by the
SDK when it collects: ``wow.local_first.backlog`` is reported on every change and
exported at each collection). Instruments are created on first use, with the unit of a
known name (``s`` for durations, ``{copy}``, ``{message}``...).

The core's observers bind their series (``bind_counter``, ``bind_gauge``): a bound
counter is one addition to its total, a bound gauge one item assignment.

The core's ``wow.bus.sent`` and ``wow.bus.received`` are not counted here
(``records_messaging``): the otel middleware counts the same sends and receives by the
conventions (``messaging.client.sent.messages``, ``messaging.client.consumed.messages``);
nor does the core decorate the command handler (``records_command_outcomes``): the otel
middleware's handler decorator counts the ``wow.command.*`` outcomes into this facade.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Histogram, Meter, Observation

from wow_core.metrics import CounterSource, GaugeSource, Tags

OVERFLOW = {"otel.metric.overflow": "true"}
"""The attribute set of counter and gauge values past ``max_counter_series`` /
``max_gauge_series`` (the name the SDK uses for its own overflow)."""
_OVERFLOW_KEY = tuple(OVERFLOW.items())
_MAX_KEYED = 4096

UNITS: dict[str, str] = {
    "wow.local_first.backlog": "{copy}",
    "wow.local_first.sends": "{message}",
    "wow.local_first.filtered": "{message}",
    "wow.local_first.copies.sent": "{copy}",
    "wow.local_first.copy.failed": "{copy}",
    "wow.local_first.copies.cancelled": "{copy}",
    "wow.local_first.hand_off.timeouts": "{message}",
    "wow.processing.outcomes": "{outcome}",
    "wow.processing.rejected": "{message}",
    "wow.command.rejections": "{command}",
    "wow.command.duplicates": "{command}",
    "wow.command.version_conflicts": "{conflict}",
    "wow.command.publish_failures": "{stream}",
    "wow.command.void_dropped": "{command}",
    "wow.transport.decode_failures": "{record}",
    "wow.intake.received": "{command}",
    "wow.intake.settled": "{command}",
    "wow.intake.retries": "{command}",
    "wow.intake.busy_retries": "{command}",
    "wow.intake.parked": "{aggregate}",
    "wow.intake.revoked_dropped": "{command}",
    "wow.intake.lane_depth": "{command}",
}


def unit_of(name: str) -> str:
    if name in UNITS:
        return UNITS[name]
    return "s" if name.endswith((".duration", ".latency")) else ""


Key = tuple[tuple[str, str], ...]


class _Total:
    """The running total of one counter series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class _Counter:
    """One counter series bound: ``add`` is one addition once the series exists (it
    appears at the first ``add``, as with ``increment``)."""

    __slots__ = ("key", "metrics", "total", "totals")

    def __init__(self, metrics: OtelMetrics, totals: dict[Key, _Total], key: Key) -> None:
        self.metrics = metrics
        self.totals = totals
        self.key = key
        self.total: _Total | None = None

    def add(self, value: float = 1.0) -> None:
        total = self.total
        if total is None:
            total = self.total = self.metrics._total(self.totals, self.key)
        total.value += value


class _Gauge:
    """One gauge series bound: ``set`` is an item assignment once the series exists."""

    __slots__ = ("key", "metrics", "values")

    def __init__(self, metrics: OtelMetrics, values: dict[Key, float], key: Key) -> None:
        self.metrics = metrics
        self.values = values
        self.key = key

    def set(self, value: float) -> None:
        if self.key in self.values:  # a dict item assignment: atomic, no lock
            self.values[self.key] = value
        else:
            self.key = self.metrics._slot(self.values, self.key, value)


class OtelMetrics:
    """The facade over one OpenTelemetry meter (module docstring).

    ``bind_counter`` and ``bind_gauge`` (used by :func:`wow_core.metrics.bound_counter`
    and :func:`~wow_core.metrics.bound_gauge`) resolve the series once: a bound counter
    is one addition to its total, a bound gauge one dict item assignment, no key made
    per call. ``records_messaging`` (the otel middleware is installed with metrics) also
    says that the middleware counts the command handler's outcomes itself
    (``records_command_outcomes``), so the core leaves the handler undecorated.
    """

    def __init__(
        self,
        meter: Meter,
        *,
        max_gauge_series: int = 2000,
        max_counter_series: int = 2000,
        records_messaging: bool = True,
    ) -> None:
        self.meter = meter
        self.max_gauge_series = max_gauge_series
        self.records_messaging = records_messaging
        self.records_command_outcomes = records_messaging
        self.max_counter_series = max_counter_series
        self._counters: dict[str, dict[Key, _Total]] = {}
        self._histograms: dict[str, Histogram] = {}
        self._gauges: dict[str, dict[Key, float]] = {}
        self._gauge_sources: dict[str, list[GaugeSource]] = {}
        self._counter_sources: dict[int, list[CounterSource]] = {}
        self._keys: dict[int, tuple[Tags, Key]] = {}
        self._lock = threading.Lock()

    def _totals(self, name: str) -> dict[Key, _Total]:
        totals = self._counters.get(name)
        if totals is None:
            with self._lock:
                totals = self._counters.get(name)
                if totals is None:
                    totals = self._counters[name] = {}
                    self.meter.create_observable_counter(
                        name, callbacks=[self._totals_reader(totals)], unit=unit_of(name)
                    )
        return totals

    def _total(self, totals: dict[Key, _Total], key: Key) -> _Total:
        total = totals.get(key)
        if total is None:
            with self._lock:
                total = totals.get(key)
                if total is None:
                    if len(totals) >= self.max_counter_series:
                        key = _OVERFLOW_KEY
                        total = totals.get(key)
                    if total is None:
                        total = totals[key] = _Total()
        return total

    def increment(self, name: str, value: float = 1.0, tags: Tags | None = None) -> None:
        totals = self._counters.get(name)
        if totals is None:
            totals = self._totals(name)
        key = self._key(tags) if tags else ()
        total = totals.get(key)
        if total is None:
            total = self._total(totals, key)
        total.value += value

    def bind_counter(self, name: str, tags: Tags | None = None) -> Callable[[float], None]:
        """``add(value)`` of the series of ``name`` and ``tags`` (class docstring)."""
        key = tuple(sorted(tags.items())) if tags else ()
        return _Counter(self, self._totals(name), key).add

    def _key(self, tags: Tags) -> Key:
        """The sorted items of ``tags``, found by the dict's identity for the dicts the
        core keeps (its tags are cached per aggregate and route): no sort per call. The
        first ``_MAX_KEYED`` dicts are remembered (and kept alive, so that an id is never
        another dict's); others are sorted each time."""
        found = self._keys.get(id(tags))
        if found is not None:
            return found[1]
        key = tuple(sorted(tags.items()))
        if len(self._keys) < _MAX_KEYED:
            self._keys[id(tags)] = (tags, key)
        return key

    def observe_counter(self, name: str, source: CounterSource) -> bool:
        """Read totals of counter ``name`` from ``source`` at each collection (its
        observable counter's callback), added to those counted by :meth:`increment`
        under the same tags: ``source()`` gives ``(tags, total)`` pairs, is called on the
        collecting thread and must not block (:func:`wow_core.metrics.observed_counter`)."""
        totals = self._totals(name)
        with self._lock:
            self._counter_sources.setdefault(id(totals), []).append(source)
        return True

    def _totals_reader(self, totals: dict[Key, _Total]) -> Any:
        lock = self._lock
        sources = self._counter_sources.setdefault(id(totals), [])

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with lock:  # no series added while the totals are read
                found = {key: total.value for key, total in totals.items()}
                read = list(sources)
            for source in read:
                for tags, total in source():
                    key = tuple(sorted(tags.items()))
                    found[key] = found.get(key, 0.0) + total
            return [Observation(value, dict(key)) for key, value in found.items()]

        return observe

    def observe(self, name: str, value: float, tags: Tags | None = None) -> None:
        histogram = self._histograms.get(name)
        if histogram is None:
            with self._lock:
                histogram = self._histograms.get(name)
                if histogram is None:
                    histogram = self._histograms[name] = self.meter.create_histogram(name, unit=unit_of(name))
        histogram.record(value, tags)

    def _values(self, name: str) -> dict[Key, float]:
        values = self._gauges.get(name)
        if values is None:
            with self._lock:
                values = self._gauges.get(name)
                if values is None:
                    values = self._gauges[name] = {}
                    sources = self._gauge_sources[name] = []
                    self.meter.create_observable_gauge(
                        name, callbacks=[self._reader(values, sources)], unit=unit_of(name)
                    )
        return values

    def _slot(self, values: dict[Key, float], key: Key, value: float) -> Key:
        """Add the series ``key`` (or find it past the limit: the overflow series)."""
        with self._lock:
            if key not in values and len(values) >= self.max_gauge_series:
                key = _OVERFLOW_KEY
            values[key] = value
        return key

    def gauge(self, name: str, value: float, tags: Tags | None = None) -> None:
        values = self._gauges.get(name)
        if values is None:
            values = self._values(name)
        key = self._key(tags) if tags else ()
        if key in values:  # a dict item assignment: atomic, no lock
            values[key] = value
            return
        self._slot(values, key, value)

    def bind_gauge(self, name: str, tags: Tags | None = None) -> Callable[[float], None]:
        """``set(value)`` of the series of ``name`` and ``tags``: the series appears at
        its first value, as with :meth:`gauge` (class docstring)."""
        key = tuple(sorted(tags.items())) if tags else ()
        values = self._values(name)
        if key in values:  # an item assignment, no frame of its own
            return functools.partial(values.__setitem__, key)
        return _Gauge(self, values, key).set

    def observe_gauge(self, name: str, source: GaugeSource) -> bool:
        """Read the series of gauge ``name`` from ``source`` at each collection (an
        observable gauge's callback), besides those set by :meth:`gauge`: ``source()``
        gives ``(tags, value)`` pairs, is called on the collecting thread and must not
        block (:func:`wow_core.metrics.observed_gauge`)."""
        self._values(name)
        with self._lock:
            self._gauge_sources[name].append(source)
        return True

    def _reader(self, values: dict[Key, float], sources: list[GaugeSource]) -> Any:
        lock = self._lock

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with lock:
                found = [Observation(value, dict(key)) for key, value in values.items()]
                read = list(sources)
            for source in read:
                found.extend(Observation(value, dict(tags)) for tags, value in source())
            return found

        return observe
