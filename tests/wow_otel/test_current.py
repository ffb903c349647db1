"""``wow_otel.current``: the direct context operations agree with the API's."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from wow_otel import current


def _span(n: int) -> NonRecordingSpan:
    return NonRecordingSpan(SpanContext(n, n, False, TraceFlags(1)))


def test_the_direct_operations_are_the_apis() -> None:
    assert current.DIRECT, "the API's default runtime context: the direct path is the one measured"
    outer = _span(1)
    token = current.attach(trace.set_span_in_context(outer))
    try:
        assert otel_context.get_current() is current.current()
        assert trace.get_current_span() is outer is current.span_of(None)
        assert current.current_span_context() == outer.get_span_context()
        inner = _span(2)
        built = current.with_span(inner)
        assert built == trace.set_span_in_context(inner)
        assert isinstance(built, otel_context.Context)
        assert trace.get_current_span(built) is inner is current.span_of(built)
        assert trace.get_current_span() is outer, "the current context is not changed"
        nested = otel_context.attach(built)
        assert current.current_span_context() == inner.get_span_context()
        otel_context.detach(nested)
    finally:
        current.detach(token)
    assert current.current_span_context() == trace.INVALID_SPAN_CONTEXT
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_a_detach_from_another_context_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    token = current.attach(current.with_span(_span(3)))

    # a token of this task's context, reset in another task's: the API logs it too
    async def elsewhere() -> None:
        current.detach(token)

    await asyncio.create_task(elsewhere())
    assert "Failed to detach context" in caplog.text
    assert current.current_span_context().trace_id == 3, "this task's context is unchanged"
    current.detach(token)
    assert current.current_span_context() == trace.INVALID_SPAN_CONTEXT


@pytest.mark.parametrize(
    "context",
    [
        SpanContext(2**100, 7, True, TraceFlags(1), trace.TraceState([("k", "v")])),
        SpanContext(3, 5, False),
        SpanContext(0, 5, False),
        trace.INVALID_SPAN_CONTEXT,
    ],
)
def test_the_field_readers_are_the_properties(context: SpanContext) -> None:
    assert current.INDEXED, "the API's SpanContext layout: the item readers are the ones measured"
    assert current.is_valid_of(context) is context.is_valid
    assert current.flags_of(context) == context.trace_flags
    assert current.state_of(context) is context.trace_state
    assert current.ids_flags_of(context) == (context.trace_id, context.span_id, context.trace_flags)
