"""The span operations ``benchmarks.otel`` measures alone make the span tree of one
traced command, as the decorators make it."""

from __future__ import annotations

from benchmarks._harness import commands
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks import otel
from wow_otel.lean import LeanTracer, lean_tracer


def test_the_span_operations_alone_make_one_commands_span_tree() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer), "the lean path the decorators take"
    otel.span_operations(tracer, iter(commands(2)))
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert sorted(spans) == ["append a", "process d", "send d", "snapshot f", "wait Add"]
    assert len({span.context.trace_id for span in spans.values()}) == 1, "one trace"

    def parent_of(name: str) -> str | None:
        parent = spans[name].parent
        found = [other for other, span in spans.items() if parent and span.context.span_id == parent.span_id]
        return found[0] if found else None

    assert parent_of("wait Add") is None
    assert parent_of("send d") == "wait Add"
    assert parent_of("process d") == "send d", "through the injected traceparent"
    assert parent_of("append a") == "process d"
    assert parent_of("snapshot f") == "process d", "through the stream's traceparent"
    assert [event.name for event in spans["wait Add"].events] == ["SENT", "PROCESSED"]
    provider.shutdown()
