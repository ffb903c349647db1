"""The ``ContextCapture`` SPI: what a queued message keeps of its sender's context.

A local-first distributed copy is sent later, by another task. It must not carry the
sender's whole ``contextvars`` context (which can hold a web request); each registered
:class:`ContextCapture` names one thing it needs (the metrics source here, the trace
context in ``wow-otel``) and restores only that around the deferred send.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import Protocol, runtime_checkable

from wow_core.metrics import metrics_source


@runtime_checkable
class ContextCapture(Protocol):
    """Captures one piece of the current context, and restores it later."""

    @property
    def name(self) -> str: ...

    def capture(self) -> object:
        """A snapshot of what this capture needs from the current context."""
        ...

    def restore(self, captured: object) -> AbstractContextManager[None]:
        """Make ``captured`` current for the duration of the ``with`` block."""
        ...


class MetricsSourceCapture:
    """Keeps the :data:`~wow_core.metrics.metrics_source` of the sender."""

    name = "metrics_source"

    def capture(self) -> object:
        return metrics_source.get()

    @contextlib.contextmanager
    def restore(self, captured: object) -> Iterator[None]:
        token = metrics_source.set(str(captured))
        try:
            yield
        finally:
            metrics_source.reset(token)


class CapturedContext:
    """The snapshots of several captures, restored together."""

    __slots__ = ("_items",)

    def __init__(self, captures: Sequence[ContextCapture]) -> None:
        self._items = [(capture, capture.capture()) for capture in captures]

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        with ExitStack() as stack:
            for capture, captured in self._items:
                stack.enter_context(capture.restore(captured))
            yield
