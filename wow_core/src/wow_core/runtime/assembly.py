"""How the container builds the command side: buses, kernel, gateway, runtime.

These are the factories behind the providers of
:class:`~wow_core.runtime.container.WowContainer` (``command_bus``, ``kernel``,
``command_gateway``, ``runtime``...). :func:`build_runtime` is what ``wow run`` and
``WowApp.runtime()`` call.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.gateway import CommandGateway
from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.metrics import Metrics
from wow_core.modeling.kernel import CommandKernel
from wow_core.modeling.registry import AggregateRegistry
from wow_core.runtime.keyed_executor import KeyedExecutor
from wow_core.runtime.settings import WowSettings

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
    metrics: Metrics,
) -> CommandKernel:
    return CommandKernel(
        aggregates,
        event_store,
        snapshot_repository,
        domain_event_bus=domain_event_bus,
        state_event_bus=state_event_bus,
        metrics=metrics,
    )


def create_gateway(command_bus: Any, coordinator: WaitCoordinator, settings: WowSettings) -> CommandGateway:
    return CommandGateway(command_bus, coordinator, default_timeout=settings.command.wait_timeout)


def create_command_bus(container: WowContainer) -> Any:
    return InMemoryCommandBus()


def create_domain_event_bus(container: WowContainer) -> Any:
    return InMemoryDomainEventBus()


def create_state_event_bus(container: WowContainer) -> Any:
    return InMemoryStateEventBus()


def create_runtime(container: WowContainer) -> WowRuntime:
    from wow_core.runtime.runtime import WowRuntime

    return WowRuntime(
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
        transport=None,
    )


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
    aggregates: AggregateRegistry = container.aggregate_registry()
    for aggregate_type in app.aggregates:
        aggregates.register(aggregate_type)
    body_types = container.body_types()
    aggregates.register_body_types(body_types)
    for cls in app.body_types:
        if cls not in body_types:
            body_types.register(cls)
    runtime: WowRuntime = container.runtime()
    if app.name:
        runtime.name = app.name
        runtime.command_dispatcher.group = f"{app.name}.command"
    for install in app.installers:
        install(runtime)
    return runtime
