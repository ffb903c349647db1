"""In-memory OpenTelemetry for tests: :class:`OtelCapture`.

``with OtelCapture() as otel:`` records every runtime assembled inside the block to an
SDK tracer provider with an in-memory span exporter and an SDK meter provider with an
in-memory metric reader (neither made global); ``otel.spans()`` and
``otel.metric_points(name)`` read them back.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from wow_otel.sdk import use_providers


class OtelCapture:
    """SDK providers over in-memory exporters, used by wow-otel inside the ``with`` block."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self._stack = ExitStack()

    def __enter__(self) -> OtelCapture:
        self._stack.enter_context(use_providers(self.tracer_provider, self.meter_provider))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def metric_points(self, name: str) -> list[Any]:
        """Every data point of the metric ``name`` collected now (an empty list if none)."""
        data = self.reader.get_metrics_data()
        points: list[Any] = []
        if data is None:
            return points
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points

    def metric_names(self) -> set[str]:
        data = self.reader.get_metrics_data()
        if data is None:
            return set()
        return {
            metric.name
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }
