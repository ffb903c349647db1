"""W3C trace context in a message :class:`~wow_core.model.Header` (``traceparent``,
``tracestate``), and the wait span a command's send reports ``SENT`` to.

The header is written and read directly in the common form (version ``00``, the
55 characters ``00-<trace id>-<span id>-<flags>``, lower-case hex): a format string and
one match, where the SDK's generic propagator goes through its getter, setter and
context API per message. Any other value (another version, upper case, spaces, a
malformed one) goes to the SDK's ``TraceContextTextMapPropagator``, which decides as
the W3C specification says. A span context that is not sampled propagates like any
other, with the flags ``00``.
"""

from __future__ import annotations

import contextvars
import re
from typing import TypeVar

from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from wow_core.model import Header, Message, ReadOnlyHeaderError
from wow_otel.current import (
    DIRECT,
    SPAN_KEY,
    current_span_context,
    ids_flags_of,
    is_valid_of,
    span_of,
    state_of,
    with_span,
)
from wow_otel.lean import FLAGS, new_span_context

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

M = TypeVar("M", bound=Message)

_SPAN_KEY = SPAN_KEY if DIRECT else None
"""The context key of the span, to build a context with one span directly (else the API)."""
_PROPAGATOR = TraceContextTextMapPropagator()
ROOT = Context()
"""The empty context: a span started in it is a root."""
_COMMON = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
"""A version ``00`` ``traceparent`` exactly (anything else: the SDK's propagator)."""


_FLAGS_TEXT = tuple(f"-{flags:02x}" for flags in range(256))


def _formatted(trace_id: int, span_id: int, flags: int) -> str:
    # the ids' bytes in hex: half the time of a format string of the ints
    try:
        trace_hex, span_hex = trace_id.to_bytes(16, "big").hex(), span_id.to_bytes(8, "big").hex()
        return f"00-{trace_hex}-{span_hex}{_FLAGS_TEXT[flags]}"
    except OverflowError:  # an id out of range (another id generator): written as it is
        return "00-%032x-%016x-%02x" % (trace_id, span_id, flags)  # noqa: UP031


def traceparent(context: SpanContext) -> str:
    """The ``traceparent`` value of ``context`` (version ``00``)."""
    return _formatted(*ids_flags_of(context))


_MAX_PARENTS = 256
_parents: dict[str, tuple[SpanContext, Context]] = {}
"""The remote span contexts (and contexts holding them) of the latest ``traceparent``
values without a ``tracestate``: a command's ``process`` context, passed on to its event
stream as it came when the trace is not sampled, is read again by each event function."""


_values: dict[int, tuple[SpanContext, str]] = {}
"""The ``traceparent`` values of the latest span contexts written or read here (without a
``tracestate``), by the context's identity (the context kept with it, so the identity is
not reused while it is here): a context written again (a trace not sampled, whose root
context every message of a command carries; an event stream's sends) is not formatted
again."""

_written: dict[str, tuple[int, int, int]] = {}
"""The ids and flags of the latest ``traceparent`` values this process wrote (without a
``tracestate``), until read: a receiver in this process (a local-first copy) takes its
parent from them instead of parsing the value back. A value is a function of its ids, so
the same value from anywhere reads the same."""


def remote_parent(header: Header) -> tuple[SpanContext, Context] | None:
    """The valid remote span context in ``header`` and a context with it as its span
    (:func:`extract`), or ``None``; the same objects for a ``traceparent`` read recently
    (no ``tracestate``): no parse, no span made."""
    value, state = header.get_pair(TRACEPARENT, TRACESTATE)
    if value is None:
        return None
    plain = state is None and type(value) is str
    found = _parents.get(value) if plain else None
    if found is not None:
        return found
    written = _written.pop(value, None) if plain else None
    # written by this process's inject: the ids it was formatted from, no parse
    context = remote_span_context(header) if written is None else new_span_context(*written, remote=True)
    if context is None:
        return None
    span = NonRecordingSpan(context)
    found = (context, with_span(span, ROOT) if _SPAN_KEY is None else Context({_SPAN_KEY: span}))
    if plain:
        if len(_parents) >= _MAX_PARENTS:
            _parents.clear()
        _parents[value] = found
        if len(_values) >= _MAX_PARENTS:
            _values.clear()
        _values[id(context)] = (context, value)
    return found


def remote_span_context(header: Header) -> SpanContext | None:
    """The valid remote span context in ``header``, or ``None`` (no ``traceparent``, or
    one that the W3C specification makes invalid)."""
    value = header.get(TRACEPARENT)
    if value is None:
        return None
    found = _COMMON.fullmatch(value) if type(value) is str else None
    if found is None:
        context = span_of(_PROPAGATOR.extract(header, context=ROOT)).get_span_context()
        return context if context.is_valid else None
    trace_id, span_id, flags = found.groups()
    context = SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=FLAGS[int(flags, 16)],
        trace_state=_trace_state(header),
    )
    return context if context.is_valid else None  # an all-zero id: no parent


def extract(header: Header) -> Context:
    """The remote span context in ``header`` (a context with no span when it has none:
    the span started from it is a root, never a child of whatever is current)."""
    context = remote_span_context(header)
    if context is None:
        return ROOT
    return with_span(NonRecordingSpan(context), ROOT)


def _trace_state(header: Header) -> TraceState | None:
    state = header.get(TRACESTATE)
    if state is None:
        return None
    return TraceState.from_header([state] if isinstance(state, str) else list(state))


def inject(message: M, context: Context | None = None, *, span_context: SpanContext | None = None) -> M:
    """``message`` with ``span_context`` (default: the span context of ``context``, by
    default the current one) in its header, replacing what it carried (a header copied
    from the command that caused it).

    A read-only header (a message already emitted once) is copied first, so what an
    earlier receiver saw never changes. A header that carries this span context already
    (an event stream whose store append wrote it, a state event with its stream's
    header) is not written: ``message`` itself.
    """
    if span_context is None:
        span_context = current_span_context() if context is None else span_of(context).get_span_context()
    value: str | None = None
    state: str | None = None
    if is_valid_of(span_context):
        trace_state = state_of(span_context)
        if trace_state is not DEFAULT_TRACE_STATE and trace_state:
            value = traceparent(span_context)
            state = trace_state.to_header()
        else:
            key = id(span_context)
            known = _values.get(key)
            if known is not None and known[0] is span_context:
                value = known[1]
            else:
                ids = ids_flags_of(span_context)
                value = _formatted(*ids)
                if len(_written) >= _MAX_PARENTS:
                    _written.clear()
                _written[value] = ids
                if len(_values) >= _MAX_PARENTS:
                    _values.clear()
                _values[key] = (span_context, value)
    try:  # unchanged, or written: one call
        message.header.replace_pair(TRACEPARENT, value, TRACESTATE, state)
    except ReadOnlyHeaderError:  # a change to an emitted header: on a copy
        message = message.copy()
        message.header.replace_pair(TRACEPARENT, value, TRACESTATE, state)
    return message


class Waiting:
    """The wait span of one ``send_and_wait`` and its command (see :data:`waiting`)."""

    __slots__ = ("command_id", "span")

    def __init__(self, span: Span, command_id: str) -> None:
        self.span = span
        self.command_id = command_id


waiting: contextvars.ContextVar[Waiting | None] = contextvars.ContextVar("wow_otel_waiting", default=None)
"""Set by the gateway's decorator for its call: the command bus's decorator adds the
``SENT`` event to this span when the send of that command completes."""
