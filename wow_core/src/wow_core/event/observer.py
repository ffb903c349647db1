"""What the event dispatch pipeline settles, as named hooks: :class:`EventProcessingObserver`.

The outcome of one function on one message (spec 003, "Failure Recording") is settled
inside :class:`~wow_core.event.handler.FailureRecordingHandler`, and a source message
with a malformed compensation header is rejected inside its dispatcher: no decorator of
a bus sees either. The pipeline reports both to one observer, given when it is built
(:func:`~wow_core.event.pipeline.build_event_dispatch`). The core's metrics
(:class:`~wow_core.middleware.MetricsMiddleware`: ``wow.processing.outcomes``,
``wow.processing.rejected``) are such an observer; a plugin contributes one through the
``observe_event_processing`` hook of its :class:`~wow_core.middleware.Middleware`.

Without an observer (the default) the pipeline calls nothing and reads no clock.

The hooks run synchronously on the event loop, in the task that handled the message,
after the outcome was settled and before the dispatcher acknowledges (or releases) the
source. They must be cheap and must not raise: an exception of :meth:`on_outcome`
propagates into the dispatcher, which then releases the source unacknowledged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import ProcessingOutcome
from wow_core.messaging.contract import MessageExchange


class EventProcessingObserver:
    """The hooks of the dispatch pipeline (module docstring); every hook does nothing here."""

    def on_outcome(
        self,
        component: str,
        exchange: FunctionExchange,
        outcome: ProcessingOutcome,
        error: BaseException | None,
        duration: float,
    ) -> None:
        """One function (``exchange.function``) on one message (``exchange.message``) settled.

        ``component`` is the :class:`~wow_core.event.function.ComponentKind` value of the
        handler (``event_processor``, ``stateless_saga``, ``projection``, ``snapshot``);
        ``error`` the processing error of a failure (the last attempt's), ``None`` for
        ``HANDLED``; ``duration`` the seconds from the start of the filter chain until the
        outcome was settled (retries, failure recording and the error handler included).
        """

    def on_rejected(self, component: str, exchange: MessageExchange[Any], reason: str) -> None:
        """The dispatcher rejected the source ``exchange`` without running any function
        (``reason``: ``header``, a compensation header naming only part of its target); it
        is acknowledged, not delivered again."""


class EventProcessingObservers(EventProcessingObserver):
    """Several observers, called in order (the first middleware first)."""

    def __init__(self, observers: Sequence[EventProcessingObserver]) -> None:
        self.observers = tuple(observers)

    def on_outcome(
        self,
        component: str,
        exchange: FunctionExchange,
        outcome: ProcessingOutcome,
        error: BaseException | None,
        duration: float,
    ) -> None:
        for observer in self.observers:
            observer.on_outcome(component, exchange, outcome, error, duration)

    def on_rejected(self, component: str, exchange: MessageExchange[Any], reason: str) -> None:
        for observer in self.observers:
            observer.on_rejected(component, exchange, reason)


def combine_event_observers(
    observers: Sequence[EventProcessingObserver | None],
) -> EventProcessingObserver | None:
    """``None`` for no observer, the one observer itself, or one calling each in order."""
    found = [observer for observer in observers if observer is not None]
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    return EventProcessingObservers(found)
