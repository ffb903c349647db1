"""The dependency-injector container that assembles a wow-py process from its settings.

``WowSettings`` -> plugins -> the selected implementations. Every SPI implementation is
chosen *by plugin name* from a setting (``WOW_TRANSPORT``, ``WOW_FAILURE_RECORDER``,
``WOW_MESSAGING__DECODE_FAILURE``, ``WOW_EVENTSOURCING__STORE``,
``WOW_EVENTSOURCING__SNAPSHOT``, ``WOW_METRICS``, ``WOW_COMMAND__WAIT__NOTIFIER``, which
defaults to the name of ``WOW_TRANSPORT``); a name no plugin registered is a
:class:`~wow_core.runtime.settings.SettingsError` naming the variable, the value and the
accepted names. :func:`create_container` checks every selection (and every plugin
settings section) up front, so a wrong value fails at start-up rather than at the first
message.

Providers are singletons and lazy: nothing is built before it is asked for. Tests replace
one provider instead of monkeypatching::

    container = create_container(WowSettings())
    container.transport.override(providers.Object(my_transport))

Extending: later pieces (buses, kernel, gateway, runtime) add providers to
:class:`WowContainer` that take the providers below as arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dependency_injector import containers, providers
from pydantic import BaseModel

from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.notifier import CommandWaitNotifier
from wow_core.context import ContextCapture
from wow_core.event.failure import FailureRecorder
from wow_core.eventsourcing.store import CodecAware
from wow_core.metrics import Metrics
from wow_core.middleware import Middleware
from wow_core.model import BodyTypeRegistry, MessageCodec
from wow_core.modeling.registry import AggregateRegistry
from wow_core.plugins import (
    PluginConflictError,
    PluginError,
    PluginRegistry,
    Registration,
    UnknownPluginError,
    load_plugins,
)
from wow_core.runtime import assembly
from wow_core.runtime._text import a_type_name
from wow_core.runtime.plugin_calls import call_factory
from wow_core.runtime.settings import SettingsError, WowSettings, env_name, unknown_variables
from wow_core.transport.decode_failure import TransportDecodeFailureHandler
from wow_core.transport.spi import Transport

log = logging.getLogger("wow.settings")

SELECTIONS: Mapping[str, tuple[str, ...]] = {
    "transport": ("transport",),
    "failure_recorder": ("failure_recorder",),
    "decode_failure_handler": ("messaging", "decode_failure"),
    "event_store": ("eventsourcing", "store"),
    "snapshot_repository": ("eventsourcing", "snapshot"),
    "metrics": ("metrics",),
    "wait_notifier": ("command", "wait", "notifier"),
}
"""Plugin kind -> the settings location holding the selected name."""

FALLBACKS: Mapping[str, tuple[str, str]] = {"wait_notifier": ("transport", "in_memory")}
"""Plugin kind -> (the kind whose selected name it takes when its own setting is unset,
the name used when no plugin registered that one)."""


def _setting(settings: WowSettings, kind: str) -> Any:
    value: Any = settings
    for part in SELECTIONS[kind]:
        value = getattr(value, part)
    return value


def selected_name(settings: WowSettings, kind: str) -> str:
    value = _setting(settings, kind)
    if value is None and kind in FALLBACKS:
        return selected_name(settings, FALLBACKS[kind][0])
    return str(value)


def select(plugins: PluginRegistry, settings: WowSettings, kind: str) -> Registration:
    """The registration the settings select for ``kind``.

    Raises :class:`SettingsError` (variable, value, accepted names) when no plugin
    registered that name.
    """
    name = selected_name(settings, kind)
    try:
        return plugins.get(kind, name)
    except UnknownPluginError:
        if kind in FALLBACKS and _setting(settings, kind) is None:
            # The transport has no notifier of its own name: waits past SENT then work in
            # this process only (said once, at assembly).
            return plugins.get(kind, FALLBACKS[kind][1])
        accepted = ", ".join(plugins.names(kind)) or "none (no plugin registers one)"
        raise SettingsError(
            f"invalid settings:\n  {env_name(SELECTIONS[kind])}={name!r} is not accepted: "
            f"no {kind.replace('_', ' ')} plugin has that name; accepted: {accepted}"
        ) from None


def _build(plugins: PluginRegistry, settings: WowSettings, kind: str, expected: type[Any] | None) -> Any:
    registration = select(plugins, settings, kind)
    instance = call_factory(registration, settings)
    if expected is not None and not isinstance(instance, expected):
        raise PluginError(
            f"{registration.origin}: the {kind.replace('_', ' ')} factory {registration.name!r} "
            f"returned {type(instance).__name__}, not a {expected.__name__}"
        )
    return instance


def create_transport(plugins: PluginRegistry, settings: WowSettings) -> Transport:
    transport: Transport = _build(plugins, settings, "transport", Transport)
    return transport


def create_failure_recorder(plugins: PluginRegistry, settings: WowSettings) -> FailureRecorder:
    recorder: FailureRecorder = _build(plugins, settings, "failure_recorder", FailureRecorder)
    return recorder


def create_decode_failure_handler(
    plugins: PluginRegistry, settings: WowSettings
) -> TransportDecodeFailureHandler:
    handler: TransportDecodeFailureHandler = _build(
        plugins, settings, "decode_failure_handler", TransportDecodeFailureHandler
    )
    return handler


def create_wait_notifier(plugins: PluginRegistry, settings: WowSettings) -> CommandWaitNotifier:
    notifier: CommandWaitNotifier = _build(plugins, settings, "wait_notifier", CommandWaitNotifier)
    return notifier


def create_metrics(plugins: PluginRegistry, settings: WowSettings) -> Metrics:
    metrics: Metrics = _build(plugins, settings, "metrics", Metrics)
    return metrics


def create_middleware(plugins: PluginRegistry, settings: WowSettings, metrics: Metrics) -> list[Middleware]:
    """Every active middleware, by registered name (the first is the outermost decorator).

    Each ``register_middleware`` factory is called with the settings and the metrics
    backend; one returning ``None`` is not active (the core's ``metrics`` middleware with
    the no-op backend), so the default runtime decorates nothing.
    """
    active: list[Middleware] = []
    for registration in plugins.all("middleware"):
        middleware = call_factory(registration, settings, metrics)
        if middleware is None:
            continue
        if not isinstance(middleware, Middleware):
            raise PluginError(
                f"{registration.origin}: the middleware factory {registration.name!r} "
                f"returned {type(middleware).__name__}, not a Middleware"
            )
        active.append(middleware)
    return active


def _with_codec(instance: Any, codec: MessageCodec | None) -> Any:
    if codec is not None and isinstance(instance, CodecAware):
        instance.use_codec(codec)
    return instance


def create_event_store(
    plugins: PluginRegistry, settings: WowSettings, codec: MessageCodec | None = None
) -> Any:
    """The selected event store; a :class:`CodecAware` one is handed ``codec``."""
    return _with_codec(_build(plugins, settings, "event_store", None), codec)


def create_snapshot_repository(
    plugins: PluginRegistry, settings: WowSettings, codec: MessageCodec | None = None
) -> Any:
    """The selected snapshot repository; a :class:`CodecAware` one is handed ``codec``."""
    return _with_codec(_build(plugins, settings, "snapshot_repository", None), codec)


def collect_context_captures(plugins: PluginRegistry) -> tuple[ContextCapture, ...]:
    """Every registered capture, in name order (a queued copy restores all of them)."""
    captures: list[ContextCapture] = []
    for registration in plugins.all("context_capture"):
        if not isinstance(registration.value, ContextCapture):
            raise PluginError(
                f"{registration.origin}: the context capture {registration.name!r} "
                f"is {a_type_name(registration.value)}, not a ContextCapture"
            )
        captures.append(registration.value)
    return tuple(captures)


CORE_SECTIONS = frozenset(WowSettings.model_fields)
"""The core's own settings names (``messaging``, ``command``...): no plugin section may take one."""


def load_plugin_sections(plugins: PluginRegistry, settings: WowSettings) -> dict[str, BaseModel]:
    """Every plugin settings section, read from ``WOW_<NAME>__*`` (validated)."""
    sections: dict[str, BaseModel] = {}
    for registration in plugins.all("settings"):
        model = registration.value
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise PluginError(
                f"{registration.origin}: the settings section {registration.name!r} is not a pydantic model"
            )
        if registration.name in CORE_SECTIONS:
            raise PluginConflictError(
                f"{registration.origin}: the settings section {registration.name!r} is the core's "
                f"(WOW_{registration.name.upper()}__*): a plugin's section needs a name of its own"
            )
        sections[registration.name] = settings.section(registration.name, model)
    return sections


class WowContainer(containers.DeclarativeContainer):
    """The providers of one wow-py process; see the module docstring."""

    __self__ = providers.Self()

    settings: providers.Provider[WowSettings] = providers.Singleton(WowSettings.load)
    plugins: providers.Provider[PluginRegistry] = providers.Singleton(load_plugins)
    plugin_sections = providers.Singleton(load_plugin_sections, plugins, settings)

    metrics = providers.Singleton(create_metrics, plugins, settings)
    middleware = providers.Singleton(create_middleware, plugins, settings, metrics)
    body_types = providers.Singleton(BodyTypeRegistry)
    codec = providers.Singleton(
        MessageCodec, body_types, strict_commands=settings.provided.command.strict_bodies
    )
    context_captures = providers.Singleton(collect_context_captures, plugins)

    transport = providers.Singleton(create_transport, plugins, settings)
    decode_failure_handler = providers.Singleton(create_decode_failure_handler, plugins, settings)
    failure_recorder = providers.Singleton(create_failure_recorder, plugins, settings)
    event_store = providers.Singleton(
        assembly.decorated_event_store,
        middleware,
        providers.Singleton(create_event_store, plugins, settings, codec),
    )
    snapshot_repository = providers.Singleton(create_snapshot_repository, plugins, settings, codec)

    # -- the command side (wow_core.runtime.assembly) --
    aggregate_registry = providers.Singleton(AggregateRegistry)
    wait_coordinator = providers.Singleton(WaitCoordinator)
    wait_notifier = providers.Singleton(create_wait_notifier, plugins, settings)
    executor = providers.Singleton(assembly.create_executor, settings)
    command_bus = providers.Singleton(assembly.create_command_bus, __self__)
    domain_event_bus = providers.Singleton(assembly.create_domain_event_bus, __self__)
    state_event_bus = providers.Singleton(assembly.create_state_event_bus, __self__)
    kernel = providers.Singleton(
        assembly.create_kernel,
        aggregate_registry,
        event_store,
        snapshot_repository,
        domain_event_bus,
        state_event_bus,
        middleware,
        strict_bodies=settings.provided.command.strict_bodies,
    )
    command_gateway = providers.Singleton(
        assembly.create_gateway, command_bus, wait_coordinator, settings, middleware
    )
    runtime = providers.Singleton(assembly.create_runtime, __self__)


def check(container: WowContainer) -> None:
    """Validate the selections and plugin sections without building any implementation.

    Every wrong selection is reported at once, one line each, in one ``SettingsError``.
    """
    settings = container.settings()
    plugins = container.plugins()
    problems: list[str] = []
    for kind in SELECTIONS:
        try:
            select(plugins, settings, kind)
        except SettingsError as error:
            problems.append(str(error).removeprefix("invalid settings:\n"))
    if problems:
        raise SettingsError("invalid settings:\n" + "\n".join(problems))
    container.plugin_sections()
    models = {registration.name: registration.value for registration in plugins.all("settings")}
    for problem in unknown_variables(models):
        log.warning("%s", problem)


def create_container(
    settings: WowSettings | None = None,
    *,
    plugins: PluginRegistry | None = None,
    validate: bool = True,
) -> WowContainer:
    """A container over ``settings`` (default: read from the environment) and ``plugins``
    (default: discovered through the entry-point group ``wow``).

    With ``validate`` (the default) every plugin selection and plugin section is checked
    now: :class:`SettingsError` for a wrong value, :class:`PluginError` for a broken plugin.
    """
    container = WowContainer()
    if settings is not None:
        container.settings.override(providers.Object(settings))
    if plugins is not None:
        container.plugins.override(providers.Object(plugins))
    if validate:
        check(container)
    return container
