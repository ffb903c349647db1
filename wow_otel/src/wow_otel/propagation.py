"""W3C trace context in a message :class:`~wow_core.model.Header` (``traceparent``,
``tracestate``), and the wait span a command's send reports ``SENT`` to."""

from __future__ import annotations

import contextvars
from typing import TypeVar

from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from wow_core.model import Header, Message

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

M = TypeVar("M", bound=Message)

_PROPAGATOR = TraceContextTextMapPropagator()
_ROOT = Context()


def extract(header: Header) -> Context:
    """The remote span context in ``header`` (a context with no span when it has none:
    the span started from it is a root, never a child of whatever is current)."""
    if TRACEPARENT not in header:
        return _ROOT
    return _PROPAGATOR.extract(header, context=_ROOT)


def inject(message: M, context: Context | None = None) -> M:
    """``message`` with the span context of ``context`` (default: the current one) in its
    header, replacing what it carried (a header copied from the command that caused it).

    A read-only header (a message already emitted once) is copied first, so what an
    earlier receiver saw never changes.
    """
    header = message.header
    if header.read_only:
        message = message.copy()
        header = message.header
    if TRACESTATE in header:
        del header[TRACESTATE]
    _PROPAGATOR.inject(header, context=context)
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
