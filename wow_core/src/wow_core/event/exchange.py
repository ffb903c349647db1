"""The per-function exchange that travels through a filter chain.

A dispatcher receives a *source* exchange (one event stream, or one state event) from a
bus. For every event and every function selected for it, it makes a
:class:`FunctionExchange`, stores the function on it and runs the chain; the
``FunctionFilter`` at the end retrieves the function and invokes it. The source exchange
is acknowledged by the dispatcher (or, for the snapshot function, by its own filter), never
by the function exchange.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wow_core.event.compensation import CompensationTarget
from wow_core.event.function import ComponentKind, MessageFunction
from wow_core.event.stopping import StopSignal
from wow_core.messaging.contract import MessageExchange
from wow_core.model import DomainEvent, DomainEventStream, StateEvent


@dataclass(slots=True, eq=False)
class FunctionExchange:
    """One function invocation on one message.

    ``message`` is the :class:`DomainEvent` for an EVENT function and the
    :class:`StateEvent` for a STATE_EVENT function. ``result`` holds what the function
    returned once it completed; ``attempts`` counts invocations (retries included).
    ``stop`` is the signal of the dispatcher that runs it: the pipeline's waits (a retry
    backoff, a saga's command waits) end when it is set (:mod:`wow_core.event.stopping`).
    """

    component: ComponentKind
    source: MessageExchange[Any]
    message: DomainEvent[Any] | StateEvent[Any]
    function: MessageFunction
    compensation: CompensationTarget | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    attempts: int = 0
    last: bool = True
    """False while this function has a later event of the same stream still to handle."""
    stop: StopSignal | None = None

    @property
    def stream(self) -> DomainEventStream:
        """The event stream this message belongs to (the state event's own stream)."""
        source_message = self.source.message
        if isinstance(source_message, StateEvent):
            return source_message.stream
        assert isinstance(source_message, DomainEventStream)
        return source_message

    @property
    def event_name(self) -> str:
        message = self.message
        return message.name

    @property
    def is_last(self) -> bool:
        """True when this is the last event of its stream this function handles."""
        return self.last

    def __repr__(self) -> str:
        message = self.message
        return f"FunctionExchange({self.function.qualified_name} <- {message.name} {message.aggregate_id})"
