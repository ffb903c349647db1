"""The ``ContextCapture`` SPI: what a queued message keeps of its sender's context.

A local-first distributed copy is sent later, by another task. It must not carry the
sender's whole ``contextvars`` context (which can hold a web request); each registered
:class:`ContextCapture` names one thing it needs (the metrics source here, the trace
context in ``wow-otel``) and restores only that around the deferred send.
"""

from __future__ import annotations

import contextlib
import contextvars
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
        """A snapshot of what this capture needs from the current context; ``None`` when
        there is nothing to restore (its ``restore`` is then not called)."""
        ...

    def restore(self, captured: object) -> AbstractContextManager[None]:
        """Make ``captured`` current for the duration of the ``with`` block."""
        ...


class MetricsSourceCapture:
    """Keeps the :data:`~wow_core.metrics.metrics_source` of the sender."""

    name = "metrics_source"

    def capture(self) -> object:
        # The default source ("") is what the workers' empty context has anyway: nothing
        # to keep, nothing to restore.
        return metrics_source.get() or None

    def restore(self, captured: object) -> AbstractContextManager[None]:
        return _MetricsSourceRestored(str(captured))


class _MetricsSourceRestored:
    """``metrics_source`` set for a ``with`` block (a class: cheaper than a generator)."""

    __slots__ = ("_token", "_value")

    def __init__(self, value: str) -> None:
        self._value = value
        self._token: contextvars.Token[str] | None = None

    def __enter__(self) -> None:
        self._token = metrics_source.set(self._value)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            metrics_source.reset(self._token)
            self._token = None


class CapturedContext:
    """The snapshots of several captures, restored together."""

    __slots__ = ("_items",)

    def __init__(self, captures: Sequence[ContextCapture]) -> None:
        # A capture with nothing to keep (``None``: a trace context capture while tracing
        # is off) is left out: restoring costs nothing for it.
        items = [(capture, capture.capture()) for capture in captures]
        self._items = tuple([item for item in items if item[1] is not None])

    @classmethod
    def take(cls, captures: Sequence[ContextCapture]) -> CapturedContext:
        """What ``captures`` keep of the current context; one shared empty instance when
        none of them has anything to keep (no allocation per queued copy)."""
        items: list[tuple[ContextCapture, object]] | None = None
        for capture in captures:
            captured = capture.capture()
            if captured is not None:
                if items is None:
                    items = []
                items.append((capture, captured))
        if items is None:
            return _EMPTY
        taken = cls.__new__(cls)
        taken._items = tuple(items)
        return taken

    @property
    def empty(self) -> bool:
        """True when nothing was kept (restoring is a no-op)."""
        return not self._items

    def restored(self) -> AbstractContextManager[None]:
        """A context manager restoring every snapshot for its ``with`` block."""
        items = self._items
        if not items:
            return _NOTHING
        if len(items) == 1:  # the common case (metrics source only): no ExitStack
            capture, captured = items[0]
            return capture.restore(captured)
        return self._restored_all()

    @contextlib.contextmanager
    def _restored_all(self) -> Iterator[None]:
        with ExitStack() as stack:
            for capture, captured in self._items:
                stack.enter_context(capture.restore(captured))
            yield


_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()
_EMPTY = CapturedContext(())
