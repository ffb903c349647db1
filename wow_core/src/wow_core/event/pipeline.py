"""Assembling the dispatch pipeline of one process from its components and settings.

:func:`build_event_dispatch` parses the decorated components into one
:class:`~wow_core.event.function.MessageFunctionRegistrar` per component kind, builds the
filter chain of each kind (logging ``Build ... FilterChain``; a cycle in the filter
order fails here, at start-up), and makes the dispatchers: a
:class:`DomainEventDispatcher`, :class:`StatelessSagaDispatcher` and
:class:`ProjectionDispatcher` when there are functions of their kind, and a
:class:`SnapshotDispatcher` when there are aggregates to snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wow_core.concurrency import together
from wow_core.event.declare import OwnerLookup, component_spec, parse_component
from wow_core.event.dispatcher import (
    AbstractAggregateEventDispatcher,
    CompositeEventDispatcher,
    DomainEventDispatcher,
    ProjectionDispatcher,
    StatelessSagaDispatcher,
)
from wow_core.event.failure import NONE_RECORDER, FailureRecorder
from wow_core.event.filter import ExchangeFilter, FilterChainBuilder
from wow_core.event.function import ComponentKind, MessageFunctionRegistrar
from wow_core.event.function_filter import CommandSender, FunctionFilter, SagaCommandSender
from wow_core.event.handler import (
    ErrorHandler,
    EventFunctionHandler,
    FailureRecordingHandler,
    HandlerDecorator,
)
from wow_core.event.notifier import NoWaitNotifier, WaitNotifier, notifier_filters
from wow_core.event.observer import EventProcessingObserver
from wow_core.event.retryable import ErrorClassifier, RetryableFilter
from wow_core.event.settings import EventSettings
from wow_core.event.snapshot import (
    SnapshotDispatcher,
    SnapshotFunctionFilter,
    SnapshotSaver,
    snapshot_functions,
)
from wow_core.executor import Executor
from wow_core.messaging.contract import DomainEventBus, StateEventBus
from wow_core.model import NamedAggregate

logger = logging.getLogger("wow.event.pipeline")

COMPOSITES: dict[ComponentKind, type[CompositeEventDispatcher]] = {
    ComponentKind.EVENT_PROCESSOR: DomainEventDispatcher,
    ComponentKind.STATELESS_SAGA: StatelessSagaDispatcher,
    ComponentKind.PROJECTION: ProjectionDispatcher,
}


@dataclass(slots=True)
class EventDispatch:
    """The dispatchers of one process; started and stopped together by the runtime."""

    composites: list[CompositeEventDispatcher] = field(default_factory=list)
    snapshot: SnapshotDispatcher | None = None
    registrars: dict[ComponentKind, MessageFunctionRegistrar] = field(default_factory=dict)

    @property
    def dispatchers(self) -> list[AbstractAggregateEventDispatcher[Any]]:
        found: list[AbstractAggregateEventDispatcher[Any]] = [c for d in self.composites for c in d.children]
        if self.snapshot is not None:
            found.append(self.snapshot)
        return found

    async def prepare(self) -> None:
        await together(dispatcher.prepare() for dispatcher in self.dispatchers)

    async def start(self) -> None:
        await self.prepare()
        for dispatcher in self.dispatchers:
            await dispatcher.start()

    async def stop(self, timeout: float | None = None) -> bool:
        results = [await dispatcher.stop(timeout) for dispatcher in self.dispatchers]
        return all(results)


def register_components(
    components: Iterable[object], *, default_context: str, owner: OwnerLookup | None = None
) -> dict[ComponentKind, MessageFunctionRegistrar]:
    registrars: dict[ComponentKind, MessageFunctionRegistrar] = {}
    for component in components:
        spec = component_spec(component)
        if spec is None:
            raise TypeError(f"{type(component).__name__} is not a decorated event component")
        registrar = registrars.setdefault(spec.kind, MessageFunctionRegistrar(spec.kind))
        for function in parse_component(component, default_context=default_context, owner=owner):
            registrar.register(function)
            logger.debug("registered %r on %s", function, sorted(map(str, function.named_aggregates)))
    return registrars


def build_event_dispatch(
    *,
    components: Iterable[object],
    settings: EventSettings,
    service_name: str,
    domain_event_bus: DomainEventBus,
    state_event_bus: StateEventBus,
    executor: Executor,
    notifier: WaitNotifier | None = None,
    command_sender: CommandSender | None = None,
    recorder: FailureRecorder = NONE_RECORDER,
    observer: EventProcessingObserver | None = None,
    decorate_handler: HandlerDecorator | None = None,
    filters: Sequence[ExchangeFilter] = (),
    error_handlers: Mapping[ComponentKind, ErrorHandler] | None = None,
    classifier: ErrorClassifier | None = None,
    snapshot_aggregates: Iterable[NamedAggregate] = (),
    snapshot_saver: SnapshotSaver | None = None,
    default_context: str | None = None,
    owner: OwnerLookup | None = None,
) -> EventDispatch:
    """Build the dispatchers of one process. See the module doc.

    ``observer`` hears every settled outcome and every rejected message of every
    dispatcher (:mod:`wow_core.event.observer`); ``None`` calls nothing.
    ``decorate_handler`` wraps each component's handler (the middleware's
    ``decorate_event_handler``); ``None`` leaves them as they are.
    """
    error_handlers = error_handlers or {}
    registrars = register_components(components, default_context=default_context or service_name, owner=owner)
    if registrars.get(ComponentKind.STATELESS_SAGA) and command_sender is None:
        raise ValueError("stateless sagas need a command_sender (the CommandGateway) to send their commands")
    builder = FilterChainBuilder(notifier_filters(notifier or NoWaitNotifier()))
    builder.add(
        RetryableFilter(settings.retry.max_retries, settings.retry.min_backoff, classifier=classifier)
    )
    builder.add(FunctionFilter(SagaCommandSender(command_sender) if command_sender is not None else None))
    builder.add(SnapshotFunctionFilter())
    for item in filters:
        builder.add(item)

    def handler(kind: ComponentKind, name: str) -> EventFunctionHandler:
        built = FailureRecordingHandler(
            builder.build(kind, name),
            component=kind.value,
            recorder=recorder,
            error_handler=error_handlers.get(kind),
            ack_on_unrecorded_failure=settings.ack_on_unrecorded_failure,
            observer=observer,
            classifier=classifier,
        )
        return built if decorate_handler is None else decorate_handler(built)

    dispatch = EventDispatch(registrars=registrars)
    for kind, composite_type in COMPOSITES.items():
        registrar = registrars.get(kind)
        if not registrar:
            continue
        name = f"{service_name}.{composite_type.__name__}"
        dispatch.composites.append(
            composite_type(
                name,
                registrar,
                domain_event_bus=domain_event_bus,
                state_event_bus=state_event_bus,
                handler=handler(kind, name),
                executor=executor,
                observer=observer,
            )
        )
    aggregates = list(snapshot_aggregates)
    if aggregates:
        if snapshot_saver is None:
            raise ValueError("snapshot_aggregates need a snapshot_saver")
        name = f"{service_name}.SnapshotDispatcher"
        functions = snapshot_functions(default_context or service_name, aggregates, snapshot_saver)
        dispatch.snapshot = SnapshotDispatcher(
            name,
            functions,
            state_event_bus,
            handler(ComponentKind.SNAPSHOT, name),
            executor,
            observer=observer,
        )
    return dispatch
