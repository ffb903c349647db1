"""The event dispatch pipeline (spec 003): event functions, dispatchers, filters,
notifiers, retry, failure recording and acknowledgement.

What this package exports is what a service or an extension (filters, error handlers,
failure recorders) uses; the dispatchers, chains and the assembly behind them are
importable from their modules (``wow_core.event.dispatcher``...) and are not exported.
Services usually import the same names from :mod:`wow_core`.

A user writes decorated components (:func:`event_processor`, :func:`stateless_saga`,
:func:`projection` with :func:`on_event` / :func:`on_state_event` functions); the runtime
registers them and runs a :class:`DomainEventDispatcher`, :class:`StatelessSagaDispatcher`,
:class:`ProjectionDispatcher` and :class:`SnapshotDispatcher` over the event buses.
"""

from wow_core.event.compensation import CompensationTarget, InvalidCompensationHeaderError
from wow_core.event.declare import (
    event_processor,
    on_event,
    on_state_event,
    projection,
    retry,
    stateless_saga,
)
from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import (
    FailureRecorder,
    FunctionRef,
    NoneFailureRecorder,
    ProcessingFailure,
    ProcessingOutcome,
    ProcessingSuccess,
    RecordResult,
)
from wow_core.event.filter import ExchangeFilter, FilterCycleError, Next, Order, filter_type, order
from wow_core.event.function import ComponentKind
from wow_core.event.handler import ErrorHandler, LogResumeErrorHandler
from wow_core.event.notifier import ProcessingStage, WaitNotifier
from wow_core.event.retryable import ErrorClassifier, Recoverability, RecoverableError
from wow_core.event.runtime import EventDispatchOptions

__all__ = [
    "CompensationTarget",
    "ComponentKind",
    "ErrorClassifier",
    "ErrorHandler",
    "EventDispatchOptions",
    "ExchangeFilter",
    "FailureRecorder",
    "FilterCycleError",
    "FunctionExchange",
    "FunctionRef",
    "InvalidCompensationHeaderError",
    "LogResumeErrorHandler",
    "Next",
    "NoneFailureRecorder",
    "Order",
    "ProcessingFailure",
    "ProcessingOutcome",
    "ProcessingStage",
    "ProcessingSuccess",
    "RecordResult",
    "Recoverability",
    "RecoverableError",
    "WaitNotifier",
    "event_processor",
    "filter_type",
    "on_event",
    "on_state_event",
    "order",
    "projection",
    "retry",
    "stateless_saga",
]
