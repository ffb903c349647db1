"""The current OpenTelemetry context in a few operations: what the decorators do per span.

The API's ``context.attach`` / ``detach`` / ``get_current`` go through two functions and
the runtime context object each, ``trace.get_current_span`` through four, and
``trace.set_span_in_context`` copies the context dict twice. With the API's default
runtime context (``ContextVarsRuntimeContext``, one ``ContextVar``) and its span key
where this module looks for them, the functions here use that ``ContextVar`` and key
directly: the same contexts, the same values, a fifth of the calls. Anything else (a
runtime context chosen by ``OTEL_PYTHON_CONTEXT``, an API whose internals moved) gets the
API's own functions.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from operator import attrgetter, itemgetter
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import INVALID_SPAN, NonRecordingSpan, Span, SpanContext, TraceFlags, TraceState
from opentelemetry.trace import propagation as _propagation

log = logging.getLogger(__name__)

_runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
_var: ContextVar[Context] | None = (
    getattr(_runtime, "_current_context", None) if type(_runtime) is ContextVarsRuntimeContext else None
)
_key: Any = getattr(_propagation, "_SPAN_KEY", None)
DIRECT = (
    isinstance(_var, ContextVar)
    and isinstance(_key, str)
    and (trace.get_current_span(Context({_key: INVALID_SPAN})) is INVALID_SPAN)
)
"""Whether the functions below bypass the API (module docstring)."""
SPAN_KEY: str = _key if DIRECT else ""
"""The context key of the current span (when :data:`DIRECT`)."""


def _api_attach(context: Context) -> object:
    return otel_context.attach(context)


def _api_detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


def _api_current_span_context() -> SpanContext:
    return trace.get_current_span().get_span_context()


def _api_with_span(span: Span, context: Context | None = None) -> Context:
    return trace.set_span_in_context(span, context)


def _fields_indexed() -> bool:
    """Whether a ``SpanContext`` is the tuple ``(trace_id, span_id, is_remote,
    trace_flags, trace_state, is_valid)`` its properties read (the API's layout)."""
    state = TraceState([("k", "v")])
    probe = SpanContext(3, 5, True, TraceFlags(1), state)
    invalid = SpanContext(0, 5, False)
    try:
        return tuple(probe) == (3, 5, True, 1, state, True) and invalid[5] is False
    except Exception:  # pragma: no cover - another SpanContext
        return False


INDEXED = _fields_indexed()
"""Whether the field readers below are the tuple's items (no property frame each)."""

is_valid_of: Any = itemgetter(5) if INDEXED else attrgetter("is_valid")
"""``context.is_valid`` of a ``SpanContext``, an item read when :data:`INDEXED`."""
flags_of: Any = itemgetter(3) if INDEXED else attrgetter("trace_flags")
"""``context.trace_flags``."""
state_of: Any = itemgetter(4) if INDEXED else attrgetter("trace_state")
"""``context.trace_state``."""
ids_flags_of: Any = itemgetter(0, 1, 3) if INDEXED else attrgetter("trace_id", "span_id", "trace_flags")
"""``(trace_id, span_id, trace_flags)``: what a ``traceparent`` is written from."""


_KEEPS_CONTEXT: dict[int, weakref.ref[type]] = {}
"""The ids of the span types whose ``get_span_context()`` returns their ``_context``
attribute, as the API's ``NonRecordingSpan`` does (a lean tracer adds its span type, see
:func:`keeps_context`): read without the method's frame. Checked by the exact type, so
a subclass that overrides the method is asked. Held weakly: a span type goes with its
tracer (and the tracer's provider, processors and exporter with it)."""


def keeps_context(span_type: type) -> None:
    """Register ``span_type`` as keeping its context in ``_context`` (a no-op where the
    API's span does not: nothing is read in place then); forgotten when it is freed."""
    if not _READ_IN_PLACE:
        return
    key = id(span_type)

    def forget(_: object) -> None:
        _KEEPS_CONTEXT.pop(key, None)

    _KEEPS_CONTEXT[key] = weakref.ref(span_type, forget)


_READ_IN_PLACE = (
    INDEXED
    and type(getattr(NonRecordingSpan(INVALID_SPAN.get_span_context()), "_context", None)) is SpanContext
)
"""Whether span contexts are read in place at all (the API's span keeps it in
``_context`` and a span context is the indexed tuple)."""
keeps_context(NonRecordingSpan)

if DIRECT:
    assert _var is not None
    _get = _var.get
    _set = _var.set
    _reset = _var.reset
    _invalid = INVALID_SPAN

    current: Callable[[], Context] = _get
    """The current context (``context.get_current()``): the ContextVar's own ``get``."""

    def attach(context: Context) -> object:
        """Make ``context`` current; the token for :func:`detach` (``context.attach``)."""
        return _set(context)

    def detach(token: object) -> None:
        """Restore the context before ``token``'s attach (``context.detach``: an error is
        logged, not raised)."""
        try:
            _reset(token)  # type: ignore[arg-type]
        except Exception:
            log.exception("Failed to detach context")

    def current_span_context() -> SpanContext:
        """The span context of the current span (``get_current_span().get_span_context()``;
        read in place for the span types registered by :func:`keeps_context`)."""
        span: Any = _get().get(_key, _invalid)
        if id(type(span)) in _KEEPS_CONTEXT:
            return span._context  # type: ignore[no-any-return]
        return span.get_span_context()  # type: ignore[no-any-return]

    def span_of(context: Context | None) -> Span:
        """The span of ``context`` (default: the current one), ``trace.get_current_span``."""
        found: Any = (_get() if context is None else context).get(_key, _invalid)
        return found  # type: ignore[no-any-return]

    def with_span(span: Span, context: Context | None = None) -> Context:
        """``context`` (default: the current one) with ``span`` as its span
        (``trace.set_span_in_context``, one dict built)."""
        return Context({**(_get() if context is None else context), _key: span})

    def attach_span(span: Span, context: Context | None = None) -> object:
        """``attach(with_span(span, context))`` in one call: ``span`` current, in
        ``context`` (default: the current one); the token for :func:`detach`."""
        return _set(Context({**(_get() if context is None else context), _key: span}))

else:  # pragma: no cover - another runtime context, or API internals moved
    current = otel_context.get_current
    attach = _api_attach
    detach = _api_detach
    current_span_context = _api_current_span_context
    span_of = trace.get_current_span
    with_span = _api_with_span

    def attach_span(span: Span, context: Context | None = None) -> object:
        return _api_attach(_api_with_span(span, context))
