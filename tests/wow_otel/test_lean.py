"""The lean span path (``wow_otel.lean``) against the SDK's own tracer, its fallbacks, and
the direct ``traceparent`` format and parse against the SDK's propagator."""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import (
    Event,
    ReadableSpan,
    SpanLimits,
    SpanProcessor,
    TracerProvider,
    _TracerConfig,
)
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from wow_core.model import AggregateId, CommandMessage, Header, NamedAggregate
from wow_otel import lean, propagation
from wow_otel.current import current_span_context
from wow_otel.lean import LeanSpan, LeanTracer, lean_tracer
from wow_otel.propagation import TRACEPARENT, TRACESTATE, extract, inject, remote_parent, traceparent


def _pipeline(batch: bool = False, **provider: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(**provider)
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    tracer_provider.add_span_processor(processor)
    return tracer_provider, exporter


def _work(tracer: trace.Tracer) -> None:
    """What the decorators do with a span: attributes at the start, a child through the
    context, events, attributes and status at the end, an exception."""
    root = tracer.start_span("wait Open", attributes={"wow.message": "Open", "n": 1, "ok": True, "f": 0.5})
    child = tracer.start_span(
        "send t", context=trace.set_span_in_context(root), kind=SpanKind.PRODUCER, attributes={"a": "b"}
    )
    child.set_attribute("wow.outcome", "ok")
    child.set_attribute("listed", ["x", "y"])  # a sequence: cleaned as the SDK does (a tuple)
    child.end(end_time=2**62)
    root.add_event("SENT")
    root.add_event("PROCESSED", attributes={"wow.processor": "p"}, timestamp=1_000)
    root.set_attributes({"wow.stage": "PROCESSED", "none": None})  # type: ignore[dict-item]
    root.set_status(Status(StatusCode.ERROR, "E: failed"))
    root.set_status(Status(StatusCode.UNSET))  # ignored
    try:
        raise ValueError("boom")
    except ValueError as error:
        root.record_exception(error)
    root.end()
    root.set_attribute("late", 1)  # after the end: ignored
    root.add_event("late")


def _view(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None
    events = [
        (event.name, {k: v for k, v in event.attributes.items() if k != "exception.stacktrace"})
        for event in span.events
    ]
    return {
        "name": span.name,
        "kind": span.kind,
        "attributes": dict(span.attributes or {}),
        "events": events,
        "status": (span.status.status_code, span.status.description),
        "parent": span.parent is not None,
        "sampled": context.trace_flags.sampled,
        "remote": context.is_remote,
        "resource": span.resource,
        "scope": span.instrumentation_scope,
        "dropped": (span.dropped_attributes, span.dropped_events, span.dropped_links),
        "end_set": span.end_time is not None and span.start_time is not None,
    }


@pytest.mark.parametrize("batch", [False, True], ids=["simple processor", "batch processor"])
def test_a_lean_span_reaches_the_exporter_as_the_sdks_span_does(batch: bool) -> None:
    """Through the batch processor a lean span goes straight to the processor's queue."""
    sdk_provider, sdk_exporter = _pipeline(batch)
    lean_provider, lean_exporter = _pipeline(batch)
    sdk = sdk_provider.get_tracer("wow")
    lean = lean_tracer(lean_provider.get_tracer("wow"))
    assert isinstance(lean, LeanTracer)
    _work(sdk)
    _work(lean)
    sdk_provider.force_flush()
    lean_provider.force_flush()
    expected = [_view(span) for span in sdk_exporter.get_finished_spans()]
    found = [_view(span) for span in lean_exporter.get_finished_spans()]
    assert [view["resource"] for view in found] == [lean_provider.resource] * 2
    for view in expected + found:
        view.pop("resource")
    assert found == expected
    child, root = lean_exporter.get_finished_spans()
    assert child.parent == root.context
    assert child.context is not None
    assert root.context is not None
    assert child.context.trace_id == root.context.trace_id
    assert child.end_time == 2**62
    assert all(isinstance(span, ReadableSpan) for span in (child, root))


def test_sampling_is_decided_once_at_the_root_and_a_dropped_trace_still_propagates() -> None:
    calls: list[str] = []

    class Counting(Sampler):
        def __init__(self, decision: Decision) -> None:
            self.decision = decision

        def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
            calls.append(kwargs["name"] if "name" in kwargs else args[2])
            return SamplingResult(self.decision)

        def get_description(self) -> str:
            return "counting"

    provider, exporter = _pipeline(sampler=ParentBased(Counting(Decision.DROP)))
    tracer = lean_tracer(provider.get_tracer("wow"))
    root = tracer.start_span("root")
    assert isinstance(root, NonRecordingSpan)
    child = tracer.start_span("child", context=trace.set_span_in_context(root))
    assert isinstance(child, NonRecordingSpan)
    root_context, child_context = root.get_span_context(), child.get_span_context()
    assert child_context.trace_id == root_context.trace_id
    assert child_context.span_id != root_context.span_id
    assert not child_context.trace_flags.sampled
    assert calls == ["root"]  # the child of a dropped root: no sampler call
    header = Header()
    header[TRACEPARENT] = traceparent(child_context)
    assert not int(header[TRACEPARENT][-2:], 16) & TraceFlags.SAMPLED  # the flags: 00 (02: random id)
    parent = trace.get_current_span(extract(header)).get_span_context()
    assert (parent.trace_id, parent.span_id, parent.is_remote) == (
        child_context.trace_id,
        child_context.span_id,
        True,
    )
    assert not exporter.get_finished_spans()

    calls.clear()  # a sampler that is not parent-based decides every span
    provider, _ = _pipeline(sampler=Counting(Decision.RECORD_AND_SAMPLE))
    tracer = lean_tracer(provider.get_tracer("wow"))
    root = tracer.start_span("root")
    tracer.start_span("child", context=trace.set_span_in_context(root)).end()
    assert calls == ["root", "child"]


def test_a_ratio_sampler_gives_the_sdks_decisions() -> None:
    for ratio in (0.0, 1.0):
        provider, exporter = _pipeline(sampler=ParentBased(TraceIdRatioBased(ratio)))
        tracer = lean_tracer(provider.get_tracer("wow"))
        assert isinstance(tracer, LeanTracer)
        root = tracer.start_span("root")
        tracer.start_span("child", context=trace.set_span_in_context(root)).end()
        root.end()
        assert len(exporter.get_finished_spans()) == (2 if ratio else 0)
        assert root.get_span_context().trace_flags.sampled == bool(ratio)


@pytest.mark.parametrize("ratio", [0.1, 0.5])
def test_a_root_under_a_ratio_sampler_is_decided_as_the_sdk_decides_it(ratio: float) -> None:
    """The lean tracer decides a root from its trace id itself: the same decision as the
    sampler's for every trace id (the id generator's ids replayed to both)."""
    provider, _ = _pipeline(sampler=ParentBased(TraceIdRatioBased(ratio)))
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    assert tracer.root_bound == TraceIdRatioBased(ratio).bound
    sampler = TraceIdRatioBased(ratio)
    sampled = 0
    for _ in range(2_000):
        span = tracer.start_span("root", attributes={"a": 1})
        context = span.get_span_context()
        expected = sampler.should_sample(None, context.trace_id, "root").decision
        assert context.trace_flags.sampled == (expected is Decision.RECORD_AND_SAMPLE)
        assert span.is_recording() == context.trace_flags.sampled
        assert context.is_valid
        sampled += context.trace_flags.sampled
        span.end()
    assert 0.5 * ratio * 2_000 < sampled < 1.5 * ratio * 2_000


class Enriching(SpanProcessor):
    """A processor whose ``on_start`` changes the span: it must see the SDK's span."""

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        assert isinstance(span, SdkSpan)
        span.set_attribute("enriched", True)


def test_another_processor_or_limits_fall_back_to_the_sdks_tracer() -> None:
    provider, exporter = _pipeline()
    provider.add_span_processor(Enriching())
    tracer = provider.get_tracer("wow")
    assert lean_tracer(tracer) is tracer

    limited = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=4))
    tracer = limited.get_tracer("wow")
    assert lean_tracer(tracer) is tracer

    provider, exporter = _pipeline()  # a processor added after: its spans are the SDK's
    lean = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(lean.start_span("before"), LeanSpan)
    provider.add_span_processor(Enriching())
    span = lean.start_span("after")
    assert isinstance(span, SdkSpan)
    span.end()
    assert exporter.get_finished_spans()[-1].attributes == {"enriched": True}


def test_a_processor_added_while_a_lean_span_runs_receives_its_end() -> None:
    """As with the SDK's span: every processor the provider has at the end is called."""
    provider, exporter = _pipeline(batch=True)
    lean = lean_tracer(provider.get_tracer("wow"))
    span = lean.start_span("across")
    assert isinstance(span, LeanSpan)
    added = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(added))
    span.end()
    provider.force_flush()
    assert [s.name for s in added.get_finished_spans()] == ["across"]
    assert [s.name for s in exporter.get_finished_spans()] == ["across"]


def test_a_span_recorded_but_not_sampled_is_not_exported() -> None:
    """A sampler's ``RECORD_ONLY``: the span records, no processor exports it (the SDK's
    batch and simple processors skip a span not sampled)."""

    class RecordOnly(Sampler):
        def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
            return SamplingResult(Decision.RECORD_ONLY)

        def get_description(self) -> str:
            return "record only"

    for batch in (False, True):
        provider, exporter = _pipeline(batch, sampler=RecordOnly())
        lean = lean_tracer(provider.get_tracer("wow"))
        span = lean.start_span("kept here")
        assert isinstance(span, LeanSpan)
        assert span.is_recording()
        assert not span.get_span_context().trace_flags.sampled
        span.end()
        provider.force_flush()
        assert exporter.get_finished_spans() == ()


def test_sdk_internals_not_found_fall_back_to_the_sdks_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, _ = _pipeline()
    tracer = provider.get_tracer("wow")
    monkeypatch.delattr(tracer, "_instrumentation_scope")
    assert lean_tracer(tracer) is tracer
    tracer = provider.get_tracer("wow")
    monkeypatch.delattr(tracer.span_processor, "_span_processors")
    assert lean_tracer(tracer) is tracer


def _sdk_extract(header: Header) -> SpanContext:
    return trace.get_current_span(TraceContextTextMapPropagator().extract(header)).get_span_context()


@pytest.mark.parametrize(
    "value",
    [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0af7651916cd43dd_448eb211c80319c-b7ad6b7169203331-01",
        "garbage",
    ],
)
def test_the_direct_traceparent_parse_agrees_with_the_sdks_propagator(value: str) -> None:
    header = Header()
    header[TRACEPARENT] = value
    header[TRACESTATE] = "vendor=abc,other=1"
    found = trace.get_current_span(extract(header)).get_span_context()
    assert found == _sdk_extract(header)
    assert found.trace_state == _sdk_extract(header).trace_state
    if found.is_valid:
        assert traceparent(found)[2:] == value.strip().lower()[2:55]  # written as version 00


def test_traceparent_is_the_sdks_format() -> None:
    context = SpanContext(2**127 + 5, 2**63 + 7, is_remote=False, trace_flags=TraceFlags(0x01))
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(NonRecordingSpan(context)))
    assert traceparent(context) == carrier[TRACEPARENT]


def test_a_header_that_carries_the_context_already_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    context = SpanContext(2**100 + 3, 2**40 + 9, is_remote=False, trace_flags=TraceFlags(0x00))
    message = CommandMessage(AggregateId(NamedAggregate("t", "a"), "a-1"), {"n": 1}, "add")
    message.header[TRACEPARENT] = traceparent(context)

    def refuse(self: Header, key: str, value: str = "") -> None:
        raise AssertionError(f"header written: {key}")

    monkeypatch.setattr(Header, "__setitem__", refuse)
    monkeypatch.setattr(Header, "__delitem__", refuse)
    assert inject(message, span_context=context) is message  # writable, not rewritten
    monkeypatch.undo()
    other = SpanContext(2**100 + 3, 2**40 + 10, is_remote=False, trace_flags=TraceFlags(0x01))
    message.header[TRACESTATE] = "vendor=abc"
    assert inject(message, span_context=other) is message
    assert message.header.get(TRACEPARENT) == traceparent(other)
    assert TRACESTATE not in message.header, "the context's (empty) trace state replaces the header's"


def test_a_traceparent_read_again_gives_the_same_parent_without_a_parse() -> None:
    value = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    first, second = Header(), Header()
    first[TRACEPARENT] = second[TRACEPARENT] = value
    found = remote_parent(first)
    assert found is not None
    assert remote_parent(second) is found
    remote, parent = found
    assert remote == trace.get_current_span(extract(first)).get_span_context() == _sdk_extract(first)
    assert remote.is_remote
    assert trace.get_current_span(parent).get_span_context() is remote
    with_state = Header()
    with_state[TRACEPARENT] = value
    with_state[TRACESTATE] = "vendor=abc"
    stated = remote_parent(with_state)
    assert stated is not None
    assert stated is not found
    assert stated[0].trace_state == _sdk_extract(with_state).trace_state
    invalid = Header()
    invalid[TRACEPARENT] = "00-00000000000000000000000000000000-b7ad6b7169203331-01"
    assert remote_parent(invalid) is None
    assert remote_parent(Header()) is None


def _command() -> CommandMessage[Any]:
    return CommandMessage(AggregateId(NamedAggregate("t", "a"), "a-1"), {"n": 1}, "add")


@pytest.mark.parametrize("flags", [0x00, 0x01, 0x03])
def test_a_traceparent_written_here_is_read_back_without_a_parse_as_the_sdk_reads_it(
    flags: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local-first copy's receiver takes its parent from the ids inject wrote."""
    context = SpanContext(2**90 + flags, 2**50 + 11, is_remote=False, trace_flags=TraceFlags(flags))
    message = inject(
        CommandMessage(AggregateId(NamedAggregate("t", "a"), "a-1"), {"n": 1}, "add"), span_context=context
    )

    def no_parse(header: Header) -> SpanContext | None:
        raise AssertionError("parsed")

    monkeypatch.setattr(propagation, "remote_span_context", no_parse)
    found = remote_parent(message.header)
    assert found is not None
    remote, parent = found
    monkeypatch.undo()
    expected = _sdk_extract(message.header)
    assert remote == expected
    assert (remote.is_remote, remote.trace_state, type(remote.trace_flags)) == (
        True,
        expected.trace_state,
        TraceFlags,
    )
    assert trace.get_current_span(parent).get_span_context() is remote


def test_a_traceparent_with_a_trace_state_is_read_from_the_header() -> None:
    state = TraceState([("vendor", "abc")])
    context = SpanContext(2**90, 2**50, is_remote=False, trace_flags=TraceFlags(1), trace_state=state)
    message = inject(
        CommandMessage(AggregateId(NamedAggregate("t", "a"), "a-1"), {"n": 1}, "add"), span_context=context
    )
    found = remote_parent(message.header)
    assert found is not None
    assert found[0] == _sdk_extract(message.header)
    assert found[0].trace_state == state


def test_a_full_batch_wakes_the_batch_processors_worker() -> None:
    """A lean span's end queues on the batch processor directly; the batch's last span
    wakes the worker, as the processor's own emit does (no flush, no schedule delay)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=4, schedule_delay_millis=60_000)
    )
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    assert tracer.batch is not None
    try:
        for n in range(3):
            tracer.start_span(f"s{n}").end()
        time.sleep(0.2)
        assert exporter.get_finished_spans() == ()
        tracer.start_span("s3").end()
        deadline = time.monotonic() + 5
        while len(exporter.get_finished_spans()) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [span.name for span in exporter.get_finished_spans()] == ["s0", "s1", "s2", "s3"]
    finally:
        provider.shutdown()


def test_a_full_queue_drops_the_oldest_span_and_warns_once_with_the_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processor's own emit makes a log record per span dropped (one kept per 20 s,
    without a count). A lean span's end drops as it does (the oldest goes) and warns once
    per interval, with the count."""
    release = threading.Event()
    exporting = threading.Event()

    class Stuck(InMemorySpanExporter):
        def export(self, spans: Any) -> Any:
            exporting.set()
            release.wait(10)
            return super().export(spans)

    exporter = Stuck()
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=4, max_export_batch_size=4, schedule_delay_millis=60_000)
    )
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    assert tracer.batch is not None
    clock = [100.0]
    monkeypatch.setattr(lean, "monotonic", lambda: clock[0])
    try:
        for n in range(4):  # a full batch: the worker takes it and is stuck exporting it
            tracer.start_span(f"first{n}").end()
        assert exporting.wait(5)
        deadline = time.monotonic() + 5
        while tracer.batch._queue and time.monotonic() < deadline:
            time.sleep(0.01)
        with caplog.at_level(logging.WARNING):
            for n in range(14):
                tracer.start_span(f"s{n}").end()
            warnings = [r.getMessage() for r in caplog.records if "queue full" in r.getMessage().lower()]
            assert warnings == [
                "span queue full (4 spans): 1 dropped so far, 1 in all; the exporter does not keep up "
                "(OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_EXPORT_BATCH_SIZE, "
                "or sample fewer traces)"
            ]
            assert tracer.dropped == 10
            clock[0] += lean.DROP_WARNING_SECONDS
            tracer.start_span("later").end()
            warnings = [r.getMessage() for r in caplog.records if "queue full" in r.getMessage().lower()]
            assert len(warnings) == 2
            assert "10 dropped since the last warning, 11 in all" in warnings[1]
        assert [span.name for span in tracer.batch._queue][::-1] == ["s11", "s12", "s13", "later"]
    finally:
        release.set()
        provider.shutdown()
    assert [span.name for span in exporter.get_finished_spans()] == [
        "first0",
        "first1",
        "first2",
        "first3",
        "s11",
        "s12",
        "s13",
        "later",
    ]


def test_inject_copies_a_read_only_header_it_changes_and_keeps_one_it_would_not() -> None:
    context = SpanContext(2**100 + 3, 2**40 + 9, is_remote=False, trace_flags=TraceFlags(0x01))
    message = CommandMessage(AggregateId(NamedAggregate("t", "a"), "a-1"), {"n": 1}, "add")
    message.header[TRACEPARENT] = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    message.header[TRACESTATE] = "vendor=abc"
    message.header.with_read_only()
    copied = inject(message, span_context=context)
    assert copied is not message
    assert not copied.header.read_only
    assert copied.header.get_pair(TRACEPARENT, TRACESTATE) == (traceparent(context), None)
    assert message.header.get(TRACEPARENT) == "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "what was emitted"
    copied.header.with_read_only()
    assert inject(copied, span_context=context) is copied  # already so: not copied again


def test_a_shut_down_processor_or_a_fork_goes_through_the_processors_emit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    batch = tracer.batch
    emitted: list[ReadableSpan] = []
    real = batch.emit

    def emit(span: ReadableSpan) -> None:
        emitted.append(span)
        real(span)

    monkeypatch.setattr(batch, "emit", emit)
    tracer.start_span("queued").end()
    assert emitted == []
    monkeypatch.setattr(lean, "_pid", -1)  # as in a child process before the processor's reinit
    forked = tracer.start_span("after a fork")
    forked.end()
    assert emitted == [forked]
    monkeypatch.undo()
    provider.force_flush()
    assert [span.name for span in exporter.get_finished_spans()] == ["queued", "after a fork"]
    provider.shutdown()
    tracer.start_span("after the shutdown").end()  # the processor's emit: dropped, no error
    assert [span.name for span in exporter.get_finished_spans()] == ["queued", "after a fork"]


def test_a_disabled_tracer_or_another_configuration_reader_takes_the_general_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, exporter = _pipeline()
    sdk = provider.get_tracer("wow")
    tracer = lean_tracer(sdk)
    assert isinstance(tracer, LeanTracer)
    sdk._set_tracer_config(_TracerConfig(is_enabled=False))
    assert not tracer.start_span("disabled").is_recording()
    sdk._set_tracer_config(_TracerConfig(is_enabled=True))
    monkeypatch.setattr(SdkTracer, "_is_enabled", lambda self: True)
    monkeypatch.delattr(sdk, "_tracer_config")
    other = lean_tracer(sdk)
    assert isinstance(other, LeanTracer)
    assert not other._direct
    span = other.start_span("through the general path")
    assert isinstance(span, LeanSpan)
    child = other.start_span("child", context=trace.set_span_in_context(span))
    child.end()
    span.end()
    assert [s.name for s in exporter.get_finished_spans()] == ["child", "through the general path"]
    assert exporter.get_finished_spans()[0].parent == span.get_span_context()


@pytest.mark.parametrize("ratio", [0.1, 0.5])
def test_a_lazy_root_under_a_ratio_sampler_builds_its_attributes_only_when_sampled(ratio: float) -> None:
    """``start_lazy`` decides a root from its trace id before its attributes exist: the
    sampler's decision for that id, one draw per root (the ratio kept), the attributes
    built once for a span that records and never for one that does not."""
    provider, exporter = _pipeline(sampler=ParentBased(TraceIdRatioBased(ratio)))
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    sampler = TraceIdRatioBased(ratio)
    builds: list[bool] = []

    def build() -> dict[str, Any]:
        builds.append(True)
        return {"wow.message": "Open", "n": 1, "listed": ["x"]}  # a list: cleaned

    sampled = 0
    for _ in range(2_000):
        before = len(builds)
        span = tracer.start_lazy("wait Open", None, SpanKind.INTERNAL, build)
        context = span.get_span_context()
        expected = sampler.should_sample(None, context.trace_id, "wait Open").decision
        assert context.is_valid
        assert context.trace_flags.sampled == (expected is Decision.RECORD_AND_SAMPLE) == span.is_recording()
        assert len(builds) - before == (1 if span.is_recording() else 0)
        sampled += context.trace_flags.sampled
        span.end()
    assert 0.5 * ratio * 2_000 < sampled < 1.5 * ratio * 2_000
    finished = exporter.get_finished_spans()
    assert len(finished) == sampled
    assert all(
        dict(s.attributes or {}) == {"wow.message": "Open", "n": 1, "listed": ("x",)} for s in finished
    )


@pytest.mark.parametrize("sampler", ["always_off", "parentbased_always_off"])
def test_a_lazy_root_that_is_always_dropped_builds_nothing_and_still_propagates(
    sampler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root that ``always_off`` drops, with or without ``parentbased``: a non-recording
    span of a new valid trace, not sampled, without a call to the sampler or to ``build``;
    a child started in it carries its trace id."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    chosen: Sampler = ALWAYS_OFF if sampler == "always_off" else ParentBased(ALWAYS_OFF)
    provider, exporter = _pipeline(sampler=chosen)
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    assert tracer.drops_roots
    assert tracer.drops_unsampled

    def no_call(*args: object, **kwargs: object) -> SamplingResult:
        raise AssertionError("the sampler was called")

    monkeypatch.setattr(chosen, "should_sample", no_call)

    def no_build() -> dict[str, Any]:
        raise AssertionError("attributes built for a span that does not record")

    root = tracer.start_lazy("wait Open", None, SpanKind.INTERNAL, no_build)
    assert isinstance(root, NonRecordingSpan)
    context = root.get_span_context()
    assert context.is_valid
    assert not context.trace_flags.sampled
    child = tracer.start_lazy("send t", trace.set_span_in_context(root), SpanKind.PRODUCER, no_build)
    assert isinstance(child, NonRecordingSpan)
    assert child.get_span_context().trace_id == context.trace_id
    assert child.get_span_context().span_id != context.span_id
    assert not child.get_span_context().trace_flags.sampled
    grandchild = tracer.start_owning("process t", trace.set_span_in_context(child), SpanKind.CONSUMER, {})
    assert grandchild.get_span_context().trace_id == context.trace_id
    assert exporter.get_finished_spans() == ()


def test_a_lazy_span_under_always_on_or_a_sampled_parent_is_the_owning_start() -> None:
    """Where the span records anyway (always on, a sampled parent), ``start_lazy`` builds the
    attributes once and starts the span as ``start_owning`` does."""
    provider, exporter = _pipeline()
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    builds: list[str] = []

    def build(name: str) -> Any:
        return lambda: builds.append(name) or {"name": name}

    root = tracer.start_lazy("root", None, SpanKind.INTERNAL, build("root"))
    child = tracer.start_lazy("child", trace.set_span_in_context(root), SpanKind.INTERNAL, build("child"))
    child.end()
    root.end()
    assert builds == ["root", "child"]
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["child"].parent == root.get_span_context()
    assert dict(spans["root"].attributes or {}) == {"name": "root"}


def test_a_context_written_again_is_not_formatted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``traceparent`` of a span context written or read here is kept with it: a trace
    not sampled (every message of a command carries its root's context) and an event
    stream's sends write the kept value; it is the value the SDK's propagator writes."""
    context = SpanContext(2**120 + 77, 2**60 + 5, is_remote=False, trace_flags=TraceFlags(0x00))
    first = inject(_command(), span_context=context)
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(NonRecordingSpan(context)))
    assert first.header[TRACEPARENT] == carrier[TRACEPARENT]
    found = remote_parent(first.header)
    assert found is not None

    class Unformattable(int):
        def to_bytes(self, *args: object, **kwargs: object) -> bytes:  # type: ignore[override]
            raise AssertionError("formatted again")

    # the kept values are found by the context's identity: a formatting would show
    monkeypatch.setattr(propagation, "ids_flags_of", lambda c: (Unformattable(1), Unformattable(2), 0))
    assert inject(_command(), span_context=context).header[TRACEPARENT] == carrier[TRACEPARENT]
    remote = found[0]
    assert inject(_command(), span_context=remote).header[TRACEPARENT] == carrier[TRACEPARENT]
    monkeypatch.undo()
    equal = SpanContext(2**120 + 77, 2**60 + 5, is_remote=False, trace_flags=TraceFlags(0x01))
    assert inject(_command(), span_context=equal).header[TRACEPARENT] == carrier[TRACEPARENT][:-2] + "01"


def test_an_id_out_of_range_is_written_as_before() -> None:
    """An id generator whose ids do not fit (128 and 64 bits) is written as the format
    string writes it, not an error of the send."""
    context = lean.new_span_context(2**130 + 1, 2**70 + 2, 1)
    value = inject(_command(), span_context=context).header[TRACEPARENT]
    assert value == "00-%032x-%016x-01" % (2**130 + 1, 2**70 + 2)  # noqa: UP031
    assert traceparent(context) == value


@pytest.mark.parametrize("in_place", [True, False], ids=["built in place", "the SDK's constructor"])
def test_a_lean_spans_events_are_the_sdks_events(in_place: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """An event is built without the SDK's ``__init__`` frames only where the SDK's
    ``Event`` is its three fields: either way the exporter reads the same event."""
    assert lean._EVENT_IN_PLACE, "this SDK's Event is name, timestamp and attributes"
    monkeypatch.setattr(lean, "_EVENT_IN_PLACE", in_place)
    provider, exporter = _pipeline(False)
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    span = tracer.start_span("s")
    before = time.time_ns()
    span.add_event("SENT")
    span.add_event("PROCESSED", attributes={"wow.processor": "p"}, timestamp=1_000)
    span.end()
    sent, processed = exporter.get_finished_spans()[0].events
    expected = Event("PROCESSED", {"wow.processor": "p"}, 1_000)
    assert type(processed) is Event
    assert (processed.name, dict(processed.attributes or {}), processed.timestamp) == (
        expected.name,
        dict(expected.attributes or {}),
        expected.timestamp,
    )
    assert processed.dropped_attributes == 0
    assert sent.name == "SENT"
    assert dict(sent.attributes or {}) == {}
    assert before <= sent.timestamp <= time.time_ns()
    provider.shutdown()


def test_a_lean_tracer_and_its_provider_are_freed_when_nothing_uses_them() -> None:
    # A process that builds runtimes again and again (a test run, a tenant per runtime)
    # must not keep every provider, processor and exporter it ever made.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = lean_tracer(provider.get_tracer("wow"))
    assert isinstance(tracer, LeanTracer)
    span = tracer.start_span("s")
    with trace.use_span(span, end_on_exit=True):
        assert current_span_context() is span.get_span_context(), "read in place"
    provider.shutdown()
    gone = [weakref.ref(provider), weakref.ref(tracer), weakref.ref(type(span)), weakref.ref(exporter)]
    del provider, tracer, span, exporter
    gc.collect()
    assert [ref() for ref in gone] == [None] * 4
