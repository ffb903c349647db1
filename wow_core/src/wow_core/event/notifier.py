"""Notifier filters: the wait signals of event functions (spec 003, "Notifiers").

The notifier is the outermost filter of a chain. When the inner chain completes or fails
it emits the stage of its dispatcher (EVENT_HANDLED, SAGA_HANDLED, PROJECTED, SNAPSHOT)
to the :class:`WaitNotifier` (which routes it to the wait endpoint in the stream's
header: the local ``WaitCoordinator`` or, through a ``CommandWaitNotifier``, the
waiting caller's process), fire-and-forget: a
notification that fails is logged and changes nothing (the processing result, the error
going outward, the acknowledgement stay what they were).

A signal proves only that *this* function's boundary was reached; not another
dispatcher, not a follow-up command, not an external system.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import FunctionRef
from wow_core.event.filter import Next, filter_type, order
from wow_core.event.function import ComponentKind
from wow_core.model import AggregateId

logger = logging.getLogger("wow.event.notifier")


class ProcessingStage(StrEnum):
    """The wait stages signalled by event dispatch (the gateway names the same stages)."""

    EVENT_HANDLED = "EVENT_HANDLED"
    SAGA_HANDLED = "SAGA_HANDLED"
    PROJECTED = "PROJECTED"
    SNAPSHOT = "SNAPSHOT"


STAGE_OF: dict[ComponentKind, ProcessingStage] = {
    ComponentKind.EVENT_PROCESSOR: ProcessingStage.EVENT_HANDLED,
    ComponentKind.STATELESS_SAGA: ProcessingStage.SAGA_HANDLED,
    ComponentKind.PROJECTION: ProcessingStage.PROJECTED,
    ComponentKind.SNAPSHOT: ProcessingStage.SNAPSHOT,
}


@dataclass(frozen=True, slots=True)
class ProcessingSignal:
    """One function's boundary on one message of the command ``command_id``.

    ``is_last`` is true for the last event of the stream (a waiter for the whole stream
    completes on it); ``error`` is set when the function failed after its retries.
    ``header`` is the stream's header, which carries the wait context (where the signal
    must go, see :mod:`wow_core.command.endpoint`).
    """

    stage: ProcessingStage
    command_id: str
    request_id: str
    aggregate_id: AggregateId
    aggregate_version: int
    event_id: str
    event_name: str
    function: FunctionRef
    is_last: bool
    error: BaseException | None = None
    result: Any = None
    header: Mapping[str, str] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.error is None


@runtime_checkable
class WaitNotifier(Protocol):
    """Where processing signals go (the gateway's ``WaitCoordinator``).

    A notifier may also offer ``interested(command_id, header) -> bool`` (``header``: the
    stream's header); when it says False the signal is not even built (nobody waits for
    that command).
    """

    def notify(self, signal: ProcessingSignal) -> Awaitable[None] | None: ...


class NoWaitNotifier:
    """Nobody waits: signals are dropped."""

    def notify(self, signal: ProcessingSignal) -> None:
        return None


def signal_of(
    stage: ProcessingStage, exchange: FunctionExchange, error: BaseException | None
) -> ProcessingSignal:
    stream = exchange.stream
    return ProcessingSignal(
        stage=stage,
        command_id=stream.command_id,
        request_id=stream.request_id,
        aggregate_id=stream.aggregate_id,
        aggregate_version=stream.version,
        event_id=exchange.message.id,
        event_name=exchange.event_name,
        function=exchange.function.ref,
        is_last=exchange.is_last,
        error=error,
        result=exchange.result if error is None else None,
        header=stream.header,
    )


class NotifierFilter:
    """Emits ``stage`` after the inner chain, success or failure, without waiting for delivery."""

    __slots__ = ("_interested", "_pending", "name", "notifier", "stage")

    def __init__(self, stage: ProcessingStage, notifier: WaitNotifier, name: str | None = None) -> None:
        self.stage = stage
        self.notifier = notifier
        self.name = name or f"{stage.value.title().replace('_', '')}NotifierFilter"
        self._pending: set[asyncio.Future[Any]] = set()
        interested = getattr(notifier, "interested", None)
        self._interested: Callable[[str, Mapping[str, str]], bool] | None = (
            interested if callable(interested) else None
        )

    async def filter(self, exchange: FunctionExchange, next: Next) -> None:
        try:
            await next(exchange)
        except Exception as error:
            self._emit(exchange, error)
            raise
        self._emit(exchange, None)

    def _emit(self, exchange: FunctionExchange, error: BaseException | None) -> None:
        try:
            interested = self._interested
            stream = exchange.stream
            if interested is not None and not interested(stream.command_id, stream.header):
                return
            outcome = self.notifier.notify(signal_of(self.stage, exchange, error))
            if outcome is not None and inspect.isawaitable(outcome):
                future = asyncio.ensure_future(outcome)
                self._pending.add(future)
                future.add_done_callback(self._delivered)
        except Exception:
            logger.warning("%s: notification of %r failed", self.name, exchange, exc_info=True)

    def _delivered(self, future: asyncio.Future[Any]) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.warning("%s: notification failed", self.name, exc_info=future.exception())


@order(-1_000_000)
@filter_type(ComponentKind.EVENT_PROCESSOR)
class EventHandledNotifierFilter(NotifierFilter):
    """EVENT_HANDLED, for the DomainEventDispatcher."""

    __slots__ = ()

    def __init__(self, notifier: WaitNotifier) -> None:
        super().__init__(ProcessingStage.EVENT_HANDLED, notifier, "EventHandledNotifierFilter")


@order(-1_000_000)
@filter_type(ComponentKind.STATELESS_SAGA)
class SagaHandledNotifierFilter(NotifierFilter):
    """SAGA_HANDLED, for the StatelessSagaDispatcher."""

    __slots__ = ()

    def __init__(self, notifier: WaitNotifier) -> None:
        super().__init__(ProcessingStage.SAGA_HANDLED, notifier, "SagaHandledNotifierFilter")


@order(-1_000_000)
@filter_type(ComponentKind.PROJECTION)
class ProjectedNotifierFilter(NotifierFilter):
    """PROJECTED, for the ProjectionDispatcher."""

    __slots__ = ()

    def __init__(self, notifier: WaitNotifier) -> None:
        super().__init__(ProcessingStage.PROJECTED, notifier, "ProjectedNotifierFilter")


@order(-1_000_000)
@filter_type(ComponentKind.SNAPSHOT)
class SnapshotNotifierFilter(NotifierFilter):
    """SNAPSHOT, for the SnapshotDispatcher."""

    __slots__ = ()

    def __init__(self, notifier: WaitNotifier) -> None:
        super().__init__(ProcessingStage.SNAPSHOT, notifier, "SnapshotNotifierFilter")


def notifier_filters(notifier: WaitNotifier) -> list[NotifierFilter]:
    """One notifier filter per dispatcher kind; each applies to its own kind only."""
    return [
        EventHandledNotifierFilter(notifier),
        SagaHandledNotifierFilter(notifier),
        ProjectedNotifierFilter(notifier),
        SnapshotNotifierFilter(notifier),
    ]
