"""``LocalFirstContextCapture``: the trace context a queued local-first copy keeps.

A local-first distributed copy is sent later by a copy worker, in an empty
``contextvars`` context. This capture (a :class:`~wow_core.context.ContextCapture`,
registered as ``trace_context``) keeps the sender's OpenTelemetry context, and only that
(the span current at the send: the local-first producer span), and makes it current
around the copy's send: whatever the transport records there (its own spans, a log
record's trace id) belongs to the sender's trace. The copy's header already carries the
producer span's ``traceparent``, so its receivers in other processes join the trace.

Until a runtime with tracing on was assembled in this process, it captures nothing.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

from opentelemetry import context as otel_context

from wow_otel.current import attach, current, detach

_active = False
_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()


def activate() -> None:
    """Tracing is on in this process: captures keep the trace context from now on."""
    global _active
    _active = True


class LocalFirstContextCapture:
    """Keeps the OpenTelemetry context of the sender of a queued copy (module docstring)."""

    name = "trace_context"

    def capture(self) -> object:
        return current() if _active else None

    def restore(self, captured: object) -> AbstractContextManager[None]:
        if not isinstance(captured, otel_context.Context):
            return _NOTHING
        return _Attached(captured)


class _Attached:
    __slots__ = ("_context", "_token")

    def __init__(self, context: otel_context.Context) -> None:
        self._context = context
        self._token: object | None = None

    def __enter__(self) -> None:
        self._token = attach(self._context)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            detach(self._token)
            self._token = None
