"""How the container builds the command side: buses, kernel, gateway, runtime.

These are the factories behind the providers of
:class:`~wow_core.runtime.container.WowContainer` (``command_bus``, ``kernel``,
``command_gateway``, ``runtime``...). :func:`build_runtime` is what ``wow run`` and
``WowApp.runtime()`` call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dependency_injector import providers

from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.gateway import CommandGateway
from wow_core.command.origin import SagaCommandRecorder
from wow_core.command.validation import body_validator
from wow_core.event.failure import ContributingRecorder, RecorderParts
from wow_core.eventsourcing.in_memory import InMemoryEventStore
from wow_core.eventsourcing.store import EventStore
from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.messaging.local_first import (
    LocalFirstCommandBus,
    LocalFirstDomainEventBus,
    LocalFirstMessageBus,
    LocalFirstStateEventBus,
)
from wow_core.messaging.local_first.settings import LocalFirstSettings
from wow_core.middleware import (
    BusLayer,
    Middleware,
    decorate_bus,
    decorate_command_handler,
    decorate_decode_failure_handler,
    decorate_event_store,
    decorate_gateway,
    decorate_local_bus,
    local_first_observer,
    undecorated,
)
from wow_core.model import NamedAggregate, TopicKind
from wow_core.modeling.kernel import CommandKernel
from wow_core.modeling.outbox import OutboxPublisher
from wow_core.modeling.registry import AggregateRegistry
from wow_core.runtime.keyed_executor import KeyedExecutor
from wow_core.runtime.plugin_calls import call_factory
from wow_core.runtime.settings import WowSettings
from wow_core.transport.bus import TransportCommandBus, TransportDomainEventBus, TransportStateEventBus
from wow_core.transport.defaults import DefaultTopicNaming, naming_of

if TYPE_CHECKING:
    from wow_core.plugins import PluginRegistry
    from wow_core.runtime.app import WowApp
    from wow_core.runtime.container import WowContainer
    from wow_core.runtime.runtime import WowRuntime

log = logging.getLogger("wow.runtime")


def create_executor(settings: WowSettings) -> KeyedExecutor:
    return KeyedExecutor(settings.runtime.max_in_flight, name="runtime")


def create_kernel(
    aggregates: AggregateRegistry,
    event_store: Any,
    snapshot_repository: Any,
    domain_event_bus: Any,
    state_event_bus: Any,
    middleware: Sequence[Middleware] = (),
    *,
    strict_bodies: bool = True,
) -> CommandKernel:
    """The command handler: the kernel, decorated by every middleware.

    An event store whose ``transactional_outbox()`` returns an outbox (the PostgreSQL
    store with ``WOW_POSTGRES__OUTBOX_ENABLED=true``) has the kernel append through it:
    the distributed copies of each stream are written in the append's transaction and
    its relay publishes them (:mod:`wow_core.modeling.outbox`). ``strict_bodies``
    (``WOW_COMMAND__STRICT_BODIES``): the kernel validates bodies as the gateway does.
    """
    outbox: OutboxPublisher | None = None
    provider = getattr(undecorated(event_store), "transactional_outbox", None)
    found = provider() if callable(provider) else None
    if found is not None:
        outbox = OutboxPublisher(found, domain_event_bus, state_event_bus, unwrap=undecorated)
        log.info("the kernel appends through the transactional outbox %s", type(found).__name__)
    kernel = CommandKernel(
        aggregates,
        event_store,
        snapshot_repository,
        domain_event_bus=domain_event_bus,
        state_event_bus=state_event_bus,
        outbox=outbox,
        validators=(body_validator(strict_bodies),),
    )
    return decorate_command_handler(middleware, kernel)


def create_gateway(
    command_bus: Any,
    coordinator: WaitCoordinator,
    settings: WowSettings,
    middleware: Sequence[Middleware] = (),
) -> CommandGateway:
    gateway = CommandGateway(
        command_bus,
        coordinator,
        default_timeout=settings.command.wait_timeout,
        validators=(body_validator(settings.command.strict_bodies),),
    )
    return decorate_gateway(middleware, gateway)


def decorated_event_store(middleware: Sequence[Middleware], store: EventStore) -> EventStore:
    """The selected event store, decorated by every middleware."""
    return decorate_event_store(middleware, store)


_BUSES: dict[TopicKind, tuple[type[Any], type[Any], type[LocalFirstMessageBus[Any, Any]]]] = {
    TopicKind.COMMAND: (InMemoryCommandBus, TransportCommandBus, LocalFirstCommandBus),
    TopicKind.EVENT: (InMemoryDomainEventBus, TransportDomainEventBus, LocalFirstDomainEventBus),
    TopicKind.STATE: (InMemoryStateEventBus, TransportStateEventBus, LocalFirstStateEventBus),
}


def local_first_settings(settings: WowSettings, kind: TopicKind) -> LocalFirstSettings:
    """``WOW_COMMAND__BUS__LOCAL_FIRST__*``, ``WOW_EVENT__...``, ``WOW_EVENTSOURCING__STATE__...``."""
    if kind is TopicKind.COMMAND:
        return settings.command.bus.local_first
    if kind is TopicKind.EVENT:
        return settings.event.bus.local_first
    return settings.eventsourcing.state.bus.local_first


def create_bus(container: WowContainer, kind: TopicKind) -> Any:
    """The runtime's bus of ``kind``: the transport bus over the selected transport, and
    in front of it, unless ``local_first.enabled`` is false for that bus, a local-first bus
    whose local side is the in-memory bus. Only aggregates of the aggregate registry are
    local (handed off, their marked copies filtered).

    Every layer is decorated by the middleware (:mod:`wow_core.middleware`): the
    transport bus (and its decode-failure policy), the local bus, then the local-first
    bus built from those two, which reports to the observers the middleware contributes.
    """
    local_type, transport_type, local_first_type = _BUSES[kind]
    middleware: list[Middleware] = container.middleware()
    section = local_first_settings(container.settings(), kind)
    transport = container.transport()
    messaging = container.settings().messaging
    distributed = decorate_bus(
        middleware,
        transport_type(
            transport,
            container.codec(),
            decode_failure_handler=decorate_decode_failure_handler(
                middleware, container.decode_failure_handler()
            ),
            naming=naming_of(
                transport, DefaultTopicNaming(messaging.topic_prefix, messaging.context_aliases)
            ),
            # Only a local-first bus in front may send local_first=true (its admission result).
            keeps_local_first_marker=section.enabled,
        ),
        BusLayer.TRANSPORT,
    )
    if not section.enabled:
        return distributed
    registry: AggregateRegistry = container.aggregate_registry()

    def is_local(named_aggregate: NamedAggregate) -> bool:
        return registry.owns(named_aggregate)

    local_first = local_first_type(
        decorate_local_bus(middleware, local_type()),
        distributed,
        settings=section,
        observer=local_first_observer(middleware, kind),
        captures=container.context_captures(),
        is_local=is_local,
    )
    return decorate_bus(middleware, local_first, BusLayer.LOCAL_FIRST)


def create_command_bus(container: WowContainer) -> Any:
    return create_bus(container, TopicKind.COMMAND)


def create_domain_event_bus(container: WowContainer) -> Any:
    return create_bus(container, TopicKind.EVENT)


def create_state_event_bus(container: WowContainer) -> Any:
    return create_bus(container, TopicKind.STATE)


def in_process_buses(container: WowContainer) -> None:
    """Replace the buses by the in-memory buses: one process, no transport at all.

    The fastest configuration (no encoding, no distributed copies); the kernel benchmark
    uses it to measure the kernel rather than a transport. The middleware decorates them
    as local buses (layer ``LOCAL``), as it does the local side of a local-first bus.
    """

    def local(bus_type: type[Any]) -> Any:
        return decorate_local_bus(container.middleware(), bus_type())

    container.command_bus.override(providers.Singleton(local, InMemoryCommandBus))
    container.domain_event_bus.override(providers.Singleton(local, InMemoryDomainEventBus))
    container.state_event_bus.override(providers.Singleton(local, InMemoryStateEventBus))
    container.transport.override(providers.Object(None))


def create_runtime(container: WowContainer) -> WowRuntime:
    from wow_core.runtime.runtime import WowRuntime

    runtime = WowRuntime(
        settings=container.settings(),
        aggregates=container.aggregate_registry(),
        command_bus=container.command_bus(),
        domain_event_bus=container.domain_event_bus(),
        state_event_bus=container.state_event_bus(),
        event_store=container.event_store(),
        snapshot_repository=container.snapshot_repository(),
        kernel=container.kernel(),
        coordinator=container.wait_coordinator(),
        gateway=container.command_gateway(),
        executor=container.executor(),
        metrics=container.metrics(),
        transport=container.transport(),
        middleware=container.middleware(),
    )
    install_wait_notifier(container, runtime)
    # The local-first copy queues are flushed after the dispatchers stop and before the
    # transport closes; only these registered queues are awaited on stop.
    for decorated in (runtime.command_bus, runtime.domain_event_bus, runtime.state_event_bus):
        bus = undecorated(decorated)
        if isinstance(bus, LocalFirstMessageBus):
            runtime.register_flush(bus.copies.flush, f"local-first {bus.bus_name} copies")
    return runtime


def install_wait_notifier(container: WowContainer, runtime: WowRuntime) -> None:
    """Start the selected ``CommandWaitNotifier`` with the runtime (after the transports,
    before the dispatchers; closed once the dispatchers stopped, before the buses and
    transports): the coordinator gets this process's endpoint and the sending half."""
    from wow_core.command.notifier import WaitNotifierService

    settings = container.settings()
    notifier = container.wait_notifier()
    if runtime.transport is not None and notifier.kind != runtime.transport.name:
        log.warning(
            "transport %s with the %s wait notifier: a wait past SENT completes only when the stage "
            "is reached in a process the %s notifier reaches (WOW_COMMAND__WAIT__NOTIFIER)",
            runtime.transport.name,
            notifier.kind,
            notifier.kind,
        )
    service = WaitNotifierService(
        notifier,
        runtime.coordinator,
        metrics=runtime.metrics,
        max_pending=settings.command.wait.max_pending,
    )
    runtime.wait_notifier = service
    runtime.add_service(service, service.name)
    runtime.add_closeable(service, service.name)


def build_runtime(
    app: WowApp,
    settings: WowSettings | None = None,
    *,
    plugins: PluginRegistry | None = None,
    container: WowContainer | None = None,
) -> WowRuntime:
    """The runtime of ``app`` over ``settings`` (default: the environment)."""
    from wow_core.runtime.container import create_container

    if container is None:
        container = create_container(settings, plugins=plugins)
    recorder = container.failure_recorder()
    # A recorder may bring parts of its own (the compensation module's ExecutionFailed
    # aggregate and the components that read it): hosted and dispatched like the app's.
    parts = recorder.parts() if isinstance(recorder, ContributingRecorder) else RecorderParts()
    aggregates: AggregateRegistry = container.aggregate_registry()
    for aggregate_type in app.aggregates:
        aggregates.register(aggregate_type)
    for aggregate_type in parts.aggregates:
        # Every service that uses the recorder hosts its records: none owns them, so a
        # record's events reach the other services too (local-first would drop them there).
        aggregates.register(aggregate_type, shared=True)
    body_types = container.body_types()
    aggregates.register_body_types(body_types)
    for cls in app.body_types:
        if cls not in body_types:
            body_types.register(cls)
    runtime: WowRuntime = container.runtime()
    if app.name:
        runtime.name = app.name
        runtime.command_dispatcher.group = f"{app.name}.command"
    if isinstance(recorder, SagaCommandRecorder):
        runtime.command_dispatcher.saga_recorder = recorder
    for install in (*app.installers, *parts.installers):
        install(runtime)
    # -- event dispatch (spec 003): processors, sagas, projections and snapshots ----------
    from wow_core.event.runtime import install_event_dispatch

    components = [item() if isinstance(item, type) else item for item in (*app.components, *parts.components)]
    runtime.event_dispatch = install_event_dispatch(
        runtime, components, recorder=recorder, options=app.events
    )
    if container.settings().cluster.intake.enabled:
        install_intakes(container, runtime)
    # -- plugins' installers (an HTTP server...), last: they see the whole runtime --------
    for registration in container.plugins().all("runtime_installer"):
        call_factory(registration, runtime)
    return runtime


def warn_of_a_store_of_its_own(runtime: WowRuntime, stores: Sequence[str] = ()) -> None:
    """Warn when the runtime takes commands from a transport other processes share while
    its event store is the in-memory one (``stores``: the event stores installed).

    The processes of one service then share the command group but not the events: each
    keeps its own aggregates, and a command delivered to another member than the one that
    created its aggregate finds none (``AGGREGATE_NOT_FOUND``), or an older history. A
    warning, not a refusal: one process over a shared transport (a demo, a service run
    once) is consistent. ``wow run`` calls it (``wow demo``, one process by design, does not).
    """
    transport = runtime.transport
    hosted = runtime.command_dispatcher.named_aggregates
    if transport is None or transport.name == "in_memory" or not hosted:
        return
    if not isinstance(undecorated(runtime.event_store), InMemoryEventStore):
        return
    shared = [name for name in stores if name != "in_memory"]
    choice = f" (installed: {', '.join(shared)})" if shared else ""
    log.warning(
        "transport %s with the in-memory event store: each process of service %r keeps its own "
        "events, so the members of its command group %s do not share aggregates (a command taken "
        "by another member than the one that created its aggregate finds none: AGGREGATE_NOT_FOUND). "
        "Run one process only, or set WOW_EVENTSOURCING__STORE and WOW_EVENTSOURCING__SNAPSHOT to a "
        "store every member reaches%s",
        transport.name,
        runtime.name,
        runtime.command_dispatcher.group,
        choice,
    )


def install_intakes(container: WowContainer, runtime: WowRuntime) -> None:
    """One cluster intake per bounded context the runtime hosts (``WOW_CLUSTER__INTAKE__*``),
    sharing the node's :class:`~wow_core.cluster.InFlightLimit` and failure ledger, run as
    dispatchers (prepared with the others, stopped with them)."""
    from wow_core.cluster import CommandIntake, FailureLedger, InFlightLimit, IntakeOptions
    from wow_core.cluster.journal import LedgerJournal
    from wow_core.transport.defaults import naming_of

    settings = container.settings()
    section = settings.cluster.intake
    transport = runtime.transport
    if transport is None:
        raise RuntimeError(
            "WOW_CLUSTER__INTAKE__ENABLED needs a transport; this runtime runs in-process buses"
        )
    limit = InFlightLimit(settings.runtime.max_in_flight, section.in_flight)
    ledger = FailureLedger()
    options = IntakeOptions(
        retries=section.retries,
        retry_backoff=section.retry_backoff,
        max_retry_backoff=section.max_retry_backoff,
        busy_backoff=section.busy_backoff,
        max_buffered=section.max_buffered,
    )
    prefix = getattr(naming_of(transport), "prefix", settings.messaging.topic_prefix)
    contexts = sorted({named.context_name for named in runtime.aggregates.named_aggregates})
    durable = section.durable_ledger
    if durable is None:
        durable = getattr(transport, "name", "") != "in_memory"
    for context in contexts:
        journal = (
            LedgerJournal(
                transport,
                context,
                FailureLedger(),
                prefix=prefix,
                retry_backoff=section.retry_backoff,
                max_retry_backoff=section.max_retry_backoff,
            )
            if durable
            else None
        )
        intake = CommandIntake(
            context,
            transport,
            runtime.kernel,
            runtime.coordinator,
            container.body_types(),
            limit=limit,
            ledger=ledger,
            options=options,
            name=f"{context}.{section.name or 'intake'}",
            prefix=prefix,
            strict_bodies=settings.command.strict_bodies,
            metrics=runtime.metrics,
            journal=journal,
        )
        runtime.intakes.append(intake)
        runtime.add_dispatcher(intake)
