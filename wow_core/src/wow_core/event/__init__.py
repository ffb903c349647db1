"""The event dispatch pipeline (spec 003): event functions, dispatchers, filters,
notifiers, retry, failure recording and acknowledgement.

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
    parse_component,
    projection,
    retry,
    stateless_saga,
)
from wow_core.event.dispatcher import (
    AbstractAggregateEventDispatcher,
    CompositeEventDispatcher,
    DomainEventDispatcher,
    EventStreamDispatcher,
    ProjectionDispatcher,
    StateEventDispatcher,
    StatelessSagaDispatcher,
)
from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import (
    NONE_RECORDER,
    FailureRecorder,
    FunctionRef,
    NoneFailureRecorder,
    ProcessingFailure,
    ProcessingOutcome,
    ProcessingSuccess,
    RecordResult,
)
from wow_core.event.filter import (
    ExchangeFilter,
    FilterChain,
    FilterChainBuilder,
    FilterCycleError,
    Next,
    Order,
    filter_type,
    order,
    sort_filters,
)
from wow_core.event.function import (
    ComponentKind,
    FunctionKind,
    FunctionRegistrationError,
    MessageFunction,
    MessageFunctionRegistrar,
)
from wow_core.event.function_filter import CommandSender, FunctionFilter, SagaCommandError
from wow_core.event.handler import (
    OUTCOMES_METRIC,
    ErrorHandler,
    FailureRecordingHandler,
    LogResumeErrorHandler,
    Settled,
    suppressed,
)
from wow_core.event.notifier import (
    NotifierFilter,
    ProcessingSignal,
    ProcessingStage,
    SnapshotNotifierFilter,
    WaitNotifier,
)
from wow_core.event.pipeline import EventDispatch, build_event_dispatch
from wow_core.event.retryable import (
    DEFAULT_CLASSIFIER,
    ErrorClassifier,
    Recoverability,
    RecoverableError,
    RetryableFilter,
)
from wow_core.event.runtime import EventDispatchOptions, install_event_dispatch
from wow_core.event.snapshot import SnapshotDispatcher, SnapshotFunctionFilter

__all__ = [
    "DEFAULT_CLASSIFIER",
    "NONE_RECORDER",
    "OUTCOMES_METRIC",
    "AbstractAggregateEventDispatcher",
    "CommandSender",
    "CompensationTarget",
    "ComponentKind",
    "CompositeEventDispatcher",
    "DomainEventDispatcher",
    "ErrorClassifier",
    "ErrorHandler",
    "EventDispatch",
    "EventDispatchOptions",
    "EventStreamDispatcher",
    "ExchangeFilter",
    "FailureRecorder",
    "FailureRecordingHandler",
    "FilterChain",
    "FilterChainBuilder",
    "FilterCycleError",
    "FunctionExchange",
    "FunctionFilter",
    "FunctionKind",
    "FunctionRef",
    "FunctionRegistrationError",
    "InvalidCompensationHeaderError",
    "LogResumeErrorHandler",
    "MessageFunction",
    "MessageFunctionRegistrar",
    "Next",
    "NoneFailureRecorder",
    "NotifierFilter",
    "Order",
    "ProcessingFailure",
    "ProcessingOutcome",
    "ProcessingSignal",
    "ProcessingStage",
    "ProcessingSuccess",
    "ProjectionDispatcher",
    "RecordResult",
    "Recoverability",
    "RecoverableError",
    "RetryableFilter",
    "SagaCommandError",
    "Settled",
    "SnapshotDispatcher",
    "SnapshotFunctionFilter",
    "SnapshotNotifierFilter",
    "StateEventDispatcher",
    "StatelessSagaDispatcher",
    "WaitNotifier",
    "build_event_dispatch",
    "event_processor",
    "filter_type",
    "install_event_dispatch",
    "on_event",
    "on_state_event",
    "order",
    "parse_component",
    "projection",
    "retry",
    "sort_filters",
    "stateless_saga",
    "suppressed",
]
