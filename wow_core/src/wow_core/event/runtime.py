"""Installing the event dispatch pipeline into a :class:`~wow_core.runtime.WowRuntime`.

:func:`install_event_dispatch` builds the dispatchers of a service's event components
(and the snapshot dispatcher of the aggregates it hosts) over the runtime's buses,
``KeyedExecutor``, ``WaitCoordinator``, ``CommandGateway``, failure recorder and the
event-processing observers its middleware contributes, and adds each to the runtime,
which prepares (receivers ready), starts and stops them in its order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wow_core.event.declare import owner_lookup
from wow_core.event.failure import NONE_RECORDER, FailureRecorder
from wow_core.event.filter import ExchangeFilter
from wow_core.event.function import ComponentKind
from wow_core.event.handler import ErrorHandler, EventFunctionHandler
from wow_core.event.observer import combine_event_observers
from wow_core.event.pipeline import EventDispatch, build_event_dispatch
from wow_core.event.retryable import ErrorClassifier
from wow_core.event.snapshot import repository_saver
from wow_core.event.wait import CoordinatorNotifier

if TYPE_CHECKING:
    from wow_core.runtime.runtime import WowRuntime


@dataclass(frozen=True)
class EventDispatchOptions:
    """What a service adds to the event pipeline: ``WowApp(..., events=EventDispatchOptions(...))``."""

    filters: Sequence[ExchangeFilter] = ()
    """Custom filters (ordered with the built-in ones by ``@order``, selected by ``@filter_type``)."""
    error_handlers: Mapping[ComponentKind, ErrorHandler] = field(default_factory=dict)
    """Per component kind; the default logs and resumes."""
    classifier: ErrorClassifier | None = None
    """Which errors ``RetryableFilter`` retries; default: timeouts and connection errors."""
    snapshots: bool = True
    """Run the snapshot dispatcher for the hosted aggregates."""


def install_event_dispatch(
    runtime: WowRuntime,
    components: Iterable[object],
    *,
    recorder: FailureRecorder = NONE_RECORDER,
    filters: Sequence[ExchangeFilter] = (),
    error_handlers: Mapping[ComponentKind, ErrorHandler] | None = None,
    classifier: ErrorClassifier | None = None,
    snapshots: bool = True,
    options: EventDispatchOptions | None = None,
) -> EventDispatch:
    """Build the dispatchers and add them to ``runtime`` (before it starts).

    ``options`` (from the app) supply filters, error handlers, classifier and the snapshot
    switch; explicit arguments add to them.
    """
    if options is not None:
        filters = [*options.filters, *filters]
        error_handlers = {**options.error_handlers, **(error_handlers or {})}
        classifier = classifier or options.classifier
        snapshots = snapshots and options.snapshots
    aggregates = list(runtime.aggregates)
    dispatch = build_event_dispatch(
        components=components,
        settings=runtime.settings.event,
        service_name=runtime.name,
        domain_event_bus=runtime.domain_event_bus,
        state_event_bus=runtime.state_event_bus,
        executor=runtime.executor,
        notifier=CoordinatorNotifier(runtime.coordinator),
        command_sender=runtime.gateway,
        recorder=recorder,
        observer=combine_event_observers([item.observe_event_processing() for item in runtime.middleware]),
        decorate_handler=_handler_decorator(runtime) if runtime.middleware else None,
        filters=filters,
        error_handlers=error_handlers,
        classifier=classifier,
        snapshot_aggregates=runtime.aggregates.named_aggregates if snapshots else (),
        snapshot_saver=repository_saver(runtime.snapshot_repository),
        default_context=_default_context(runtime),
        owner=owner_lookup(aggregates),
    )
    for dispatcher in dispatch.dispatchers:
        runtime.add_dispatcher(dispatcher)
    return dispatch


def _handler_decorator(runtime: WowRuntime) -> Callable[[EventFunctionHandler], EventFunctionHandler]:
    """Each component's handler decorated by every middleware (the first outermost)."""
    middleware = tuple(runtime.middleware)

    def decorate(handler: EventFunctionHandler) -> EventFunctionHandler:
        for item in reversed(middleware):
            handler = item.decorate_event_handler(handler)
        return handler

    return decorate


def _default_context(runtime: WowRuntime) -> str:
    """The bounded context of the hosted aggregates when they share one, else the service."""
    contexts = {named.context_name for named in runtime.aggregates.named_aggregates}
    return contexts.pop() if len(contexts) == 1 else runtime.name
