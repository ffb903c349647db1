"""The in-process duration histograms export what the SDK's synchronous histogram does.

Two SDK meter providers get the same recordings: one through the SDK's own histogram
(created with the same advisory boundaries), one through
:func:`~wow_otel.histograms.duration_histogram`. Their readers' points are compared
field by field (name, unit, description, temporality, scope, attributes, count, sum,
bucket counts, bounds, min, max) over two collections, for a cumulative and a delta
reader. Values are multiples of 1/1024 s so that both sums are exact whatever the order
of the additions.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import View

from wow_otel import semconv
from wow_otel.histograms import DurationHistogram, SdkDurations, duration_histogram

NAME = "wow.test.duration"
UNIT = "s"
DESCRIPTION = "A duration, for the test."

SETS: list[dict[str, Any]] = [
    {"messaging.system": "kafka", "messaging.destination.name": "wow.bank.account.command"},
    {"messaging.system": "kafka", "messaging.destination.name": "wow.bank.account.event", "error.type": "X"},
    {"wow.aggregate": "bank.account", "wow.outcome": "ok", "wow.eventstore.operation": "append"},
]

FIRST = [
    (0, 0.0),  # on the first boundary
    (0, 1 / 1024),
    (1, 0.0025),  # on a boundary (not a dyadic: only recorded once, in both)
    (1, 3 / 1024),
    (2, 12.0),  # past the last boundary
    (0, 7 / 1024),
    (2, 1 / 8),
]
SECOND = [(0, 5 / 1024), (1, 2.0), (1, 1 / 1024)]  # set 2 not measured in the second interval


def reader(delta: bool, **options: Any) -> InMemoryMetricReader:
    temporality = {Histogram: AggregationTemporality.DELTA} if delta else None
    return InMemoryMetricReader(preferred_temporality=temporality, **options)


def points(data: Any) -> dict[tuple[tuple[str, Any], ...], dict[str, Any]]:
    """The points of ``NAME`` by attributes, as the fields a backend receives."""
    found: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != NAME:
                    continue
                for point in metric.data.data_points:
                    found[tuple(sorted(point.attributes.items()))] = {
                        "scope": (scope.scope.name, scope.scope.version, scope.scope.schema_url),
                        "unit": metric.unit,
                        "description": metric.description,
                        "temporality": metric.data.aggregation_temporality,
                        "count": point.count,
                        "sum": point.sum,
                        "bucket_counts": tuple(point.bucket_counts),
                        "explicit_bounds": tuple(point.explicit_bounds),
                        "min": point.min,
                        "max": point.max,
                        "times": (point.start_time_unix_nano, point.time_unix_nano),
                    }
    return found


def without_times(found: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {key: {k: v for k, v in point.items() if k != "times"} for key, point in found.items()}


def pair(delta: bool, **options: Any) -> tuple[Any, InMemoryMetricReader, Any, InMemoryMetricReader]:
    sdk_reader, ours_reader = reader(delta, **options), reader(delta, **options)
    sdk_meter = MeterProvider(metric_readers=[sdk_reader]).get_meter(
        semconv.INSTRUMENTATION_NAME, "1.0", schema_url=semconv.SCHEMA_URL
    )
    ours_meter = MeterProvider(metric_readers=[ours_reader]).get_meter(
        semconv.INSTRUMENTATION_NAME, "1.0", schema_url=semconv.SCHEMA_URL
    )
    sdk = sdk_meter.create_histogram(
        NAME, unit=UNIT, description=DESCRIPTION, explicit_bucket_boundaries_advisory=semconv.DURATION_BUCKETS
    )
    ours = duration_histogram(ours_meter, NAME, UNIT, DESCRIPTION, semconv.DURATION_BUCKETS)
    assert isinstance(ours, DurationHistogram)
    return sdk, sdk_reader, ours, ours_reader


@pytest.mark.parametrize("delta", [False, True], ids=["cumulative", "delta"])
def test_the_exported_points_are_the_sdk_histograms(delta: bool) -> None:
    sdk, sdk_reader, ours, ours_reader = pair(delta)
    for recordings in (FIRST, SECOND):
        for index, value in recordings:
            sdk.record(value, SETS[index])
            ours.record(value, SETS[index])
        expected = points(sdk_reader.get_metrics_data())
        got = points(ours_reader.get_metrics_data())
        assert without_times(got) == without_times(expected)
        assert len(got) == (3 if not delta or recordings is FIRST else 2)
    for point in got.values():
        start, end = point["times"]
        assert 0 < start <= end


def test_a_delta_point_starts_at_the_previous_collection() -> None:
    sdk, sdk_reader, ours, ours_reader = pair(delta=True)
    for histogram, metrics_reader in ((sdk, sdk_reader), (ours, ours_reader)):
        histogram.record(0.5, SETS[0])
        (first,) = points(metrics_reader.get_metrics_data()).values()
        histogram.record(0.5, SETS[0])
        histogram.record(0.5, SETS[1])
        second = points(metrics_reader.get_metrics_data())
        assert {point["times"][0] for point in second.values()} == {first["times"][1]}
        assert points(metrics_reader.get_metrics_data()) == {}, "nothing measured: no point"


def test_fresh_dicts_of_the_same_content_are_one_series() -> None:
    _, _, ours, ours_reader = pair(delta=False)
    for _ in range(5):
        ours.record(1 / 1024, dict(SETS[0]))
    (point,) = points(ours_reader.get_metrics_data()).values()
    assert point["count"] == 5


@pytest.mark.parametrize("delta", [False, True], ids=["cumulative", "delta"])
def test_past_the_readers_cardinality_limit_the_rest_is_one_overflow_point(delta: bool) -> None:
    sdk, sdk_reader, ours, ours_reader = pair(delta, cardinality_limits={Histogram: 2})
    sets = [{"n": str(n)} for n in range(5)]
    for histogram in (sdk, ours):
        for n, attributes in enumerate(sets):
            histogram.record((n + 1) / 1024, attributes)
            histogram.record((n + 2) / 1024, attributes)
    expected = without_times(points(sdk_reader.get_metrics_data()))
    assert (("otel.metric.overflow", True),) in expected
    assert without_times(points(ours_reader.get_metrics_data())) == expected
    for histogram in (sdk, ours):
        histogram.record(1.0, sets[4])
    assert without_times(points(ours_reader.get_metrics_data())) == without_times(
        points(sdk_reader.get_metrics_data())
    )


def test_a_reader_added_later_collects_the_durations() -> None:
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    ours = duration_histogram(provider.get_meter("test"), NAME, UNIT, DESCRIPTION, semconv.DURATION_BUCKETS)
    later = InMemoryMetricReader()
    provider.add_metric_reader(later)
    ours.record(1 / 1024, SETS[0])
    (point,) = points(later.get_metrics_data()).values()
    assert point["count"] == 1


def test_a_provider_with_views_or_no_sdk_records_to_the_sdk_histogram() -> None:
    viewed = MeterProvider(metric_readers=[InMemoryMetricReader()], views=[View(instrument_name="other")])
    for meter in (viewed.get_meter("test"), NoOpMeterProvider().get_meter("test")):
        assert isinstance(
            duration_histogram(meter, NAME, UNIT, DESCRIPTION, semconv.DURATION_BUCKETS), SdkDurations
        )


def test_the_same_name_and_scope_is_the_same_histogram() -> None:
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("test")
    first = duration_histogram(meter, NAME, UNIT, DESCRIPTION, semconv.DURATION_BUCKETS)
    assert duration_histogram(meter, NAME, UNIT, DESCRIPTION, semconv.DURATION_BUCKETS) is first


def test_a_negative_or_not_finite_duration_is_dropped_as_the_sdk_does() -> None:
    sdk, sdk_reader, ours, ours_reader = pair(delta=False)
    for histogram in (sdk, ours):
        for amount in (1 / 1024, -1.0, float("nan"), float("inf")):
            histogram.record(amount, SETS[0])
    expected = without_times(points(sdk_reader.get_metrics_data()))
    assert [point["count"] for point in expected.values()] == [1]
    assert without_times(points(ours_reader.get_metrics_data())) == expected


def test_nanoseconds_on_a_kept_point_are_bucketed_as_the_sdk_buckets_their_seconds() -> None:
    """``series(attributes).record_ns(ns)`` (the decorators' hot path: the boundaries in
    nanoseconds) exports what the SDK makes of ``ns / 1e9``, on and beside every boundary."""
    sdk, sdk_reader, ours, ours_reader = pair(delta=False)
    bounds_ns = [round(b * 1e9) for b in semconv.DURATION_BUCKETS]
    durations = [ns + offset for ns in bounds_ns for offset in (-1, 0, 1) if ns + offset >= 0]
    durations += [0, 123_456_789_012]
    point = ours.series(SETS[0])
    assert ours.series(dict(SETS[0])) is point, "one point per attribute set"
    for ns in durations:
        sdk.record(ns / 1e9, SETS[0])
        point.record_ns(ns)
    expected = without_times(points(sdk_reader.get_metrics_data()))
    assert without_times(points(ours_reader.get_metrics_data())) == expected
    (found,) = expected.values()
    assert found["count"] == len(durations)
