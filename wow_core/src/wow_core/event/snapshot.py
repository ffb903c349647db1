"""The snapshot component: ``SnapshotDispatcher``, ``SnapshotFunctionFilter``.

The snapshot function is a STATE_EVENT function of the framework: for every state event
of the aggregates this runtime serves, it writes the sourced state to the snapshot
repository (through a :data:`SnapshotSaver`). Its chain is
``SnapshotNotifierFilter -> SnapshotFunctionFilter``; there is no retry layer, so a
failing write goes straight to failure recording.

The :class:`SnapshotFunctionFilter` acknowledges its own state event when the function
terminates, on success and on error: a snapshot failure is recorded but never withholds
acknowledgement (a missing snapshot costs only a longer load, never correctness).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from wow_core.event.dispatcher import StateEventDispatcher
from wow_core.event.exchange import FunctionExchange
from wow_core.event.filter import Next, filter_type, order
from wow_core.event.function import ComponentKind, FunctionKind, MessageFunction
from wow_core.event.handler import EventFunctionHandler
from wow_core.event.observer import EventProcessingObserver
from wow_core.eventsourcing.store import Snapshot, SnapshotRepository
from wow_core.executor import Executor
from wow_core.messaging.contract import MessageBus, StateEventExchange
from wow_core.model import NamedAggregate, StateEvent

logger = logging.getLogger("wow.event.snapshot")

SnapshotSaver = Callable[[StateEvent[Any]], Awaitable[None]]
"""Writes the state of a state event to the snapshot repository."""


def repository_saver(repository: SnapshotRepository) -> SnapshotSaver:
    """Save each state event's state as a :class:`Snapshot` of its version.

    The repository keeps only a snapshot newer than the one it holds, so a redelivered
    or late state event never replaces a newer snapshot.
    """

    async def save(state_event: StateEvent[Any]) -> None:
        await repository.save(
            Snapshot(state_event.aggregate_id, state_event.version, state_event.state, state_event.deleted)
        )

    return save


SNAPSHOT_PROCESSOR = "SnapshotDispatcher"
SNAPSHOT_FUNCTION = "snapshot"


def snapshot_functions(
    context_name: str, named_aggregates: Iterable[NamedAggregate], saver: SnapshotSaver
) -> list[MessageFunction]:
    """The snapshot function over ``named_aggregates`` (one function, all their topics)."""
    topics = frozenset(named_aggregates)
    if not topics:
        return []
    return [
        MessageFunction(
            kind=FunctionKind.STATE_EVENT,
            component=ComponentKind.SNAPSHOT,
            context_name=context_name,
            processor_name=SNAPSHOT_PROCESSOR,
            function_name=SNAPSHOT_FUNCTION,
            body_types=(object,),
            named_aggregates=topics,
            invoker=saver,
            takes_body=False,
        )
    ]


@order(1_000_000, after=["SnapshotNotifierFilter"])
@filter_type(ComponentKind.SNAPSHOT)
class SnapshotFunctionFilter:
    """Invokes the snapshot function, then acknowledges the state event (finally)."""

    name = "SnapshotFunctionFilter"

    async def filter(self, exchange: FunctionExchange, next: Next) -> None:
        try:
            exchange.attempts += 1
            exchange.result = await exchange.function.invoke(exchange.message)
        finally:
            try:
                await exchange.source.ack()
            except Exception:
                logger.exception("acknowledging %r failed", exchange)
        await next(exchange)


class SnapshotDispatcher(StateEventDispatcher):
    """The state-event dispatcher of the snapshot function; signals SNAPSHOT."""

    def __init__(
        self,
        name: str,
        functions: list[MessageFunction],
        bus: MessageBus[StateEvent[Any], StateEventExchange],
        handler: EventFunctionHandler,
        executor: Executor,
        *,
        observer: EventProcessingObserver | None = None,
    ) -> None:
        super().__init__(name, ComponentKind.SNAPSHOT, functions, bus, handler, executor, observer=observer)
