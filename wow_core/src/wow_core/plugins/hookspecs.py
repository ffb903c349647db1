"""The plugin API of wow-py: one ``register_*(register)`` hook per SPI.

A distribution exposes a module under the entry-point group ``wow``; the module defines
functions marked with :data:`hookimpl`. Each hook receives a ``register`` callable; call
it once per thing you contribute. Names must be unique across every plugin.
The core registers its own built-ins through these same hooks
(:mod:`wow_core.runtime.builtin`).

Each hookspec is declared with :func:`kind`, which names the plugin kind it contributes
(``transport``, ``event_store``...): the list of kinds
(:data:`wow_core.plugins.KINDS`) is read from this module, so a new hook is one function
here and nothing else. The annotations say what each ``register`` takes: for the SPIs
built at assembly time, a factory ``(ProcessSettings) -> instance`` (the runtime passes
its ``WowSettings``); the runtime calls it once
and checks the instance against the SPI's protocol where it is runtime-checkable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import pluggy

if TYPE_CHECKING:
    from pydantic import BaseModel

    from wow_core.command.notifier import CommandWaitNotifier
    from wow_core.context import ContextCapture
    from wow_core.event.failure import FailureRecorder
    from wow_core.eventsourcing.store import EventStore, SnapshotRepository
    from wow_core.metrics import Metrics
    from wow_core.middleware import Middleware
    from wow_core.plugins.commands import Command
    from wow_core.transport.decode_failure import TransportDecodeFailureHandler
    from wow_core.transport.settings import ProcessSettings
    from wow_core.transport.spi import Transport

PROJECT = "wow"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

KIND_ATTRIBUTE = "wow_kind"
"""The attribute :func:`kind` sets on a hookspec function: the plugin kind it contributes."""

F = TypeVar("F", bound=Callable[..., None])

Factory: TypeAlias = "Callable[[ProcessSettings], object]"
"""Any factory: ``factory(settings) -> instance``, called when the runtime is assembled."""
TransportFactory: TypeAlias = "Callable[[ProcessSettings], Transport]"
FailureRecorderFactory: TypeAlias = "Callable[[ProcessSettings], FailureRecorder]"
DecodeFailureHandlerFactory: TypeAlias = "Callable[[ProcessSettings], TransportDecodeFailureHandler]"
EventStoreFactory: TypeAlias = "Callable[[ProcessSettings], EventStore]"
SnapshotRepositoryFactory: TypeAlias = "Callable[[ProcessSettings], SnapshotRepository]"
MetricsFactory: TypeAlias = "Callable[[ProcessSettings], Metrics]"
MiddlewareFactory: TypeAlias = "Callable[[ProcessSettings, Metrics], Middleware | None]"
WaitNotifierFactory: TypeAlias = "Callable[[ProcessSettings], CommandWaitNotifier]"
RuntimeInstaller: TypeAlias = "Callable[[Any], object]"
"""``installer(runtime)``: called with every ``WowRuntime`` that is built (typed ``Any``
here so that the plugin layer does not name the runtime)."""


def kind(name: str) -> Callable[[F], F]:
    """Declare a hookspec contributing the plugin kind ``name`` (pluggy's hookspec too)."""

    def declare(function: F) -> F:
        setattr(function, KIND_ATTRIBUTE, name)
        marked: F = hookspec(function)
        return marked

    return declare


@kind("transport")
def register_transports(register: Callable[[str, TransportFactory], None]) -> None:
    """Contribute transports: ``register(name, factory)`` where the factory returns a Transport."""


@kind("failure_recorder")
def register_failure_recorders(register: Callable[[str, FailureRecorderFactory], None]) -> None:
    """Contribute failure recorders: ``register(name, factory)`` returning a FailureRecorder."""


@kind("decode_failure_handler")
def register_decode_failure_handlers(register: Callable[[str, DecodeFailureHandlerFactory], None]) -> None:
    """Contribute decode-failure policies: ``register(name, factory)`` returning a handler."""


@kind("context_capture")
def register_context_captures(register: Callable[[str, ContextCapture], None]) -> None:
    """Contribute context captures for queued copies: ``register(name, capture)``."""


@kind("event_store")
def register_event_stores(register: Callable[[str, EventStoreFactory], None]) -> None:
    """Contribute event stores: ``register(name, factory)`` returning an EventStore."""


@kind("snapshot_repository")
def register_snapshot_repositories(register: Callable[[str, SnapshotRepositoryFactory], None]) -> None:
    """Contribute snapshot repositories: ``register(name, factory)``."""


@kind("metrics")
def register_metrics(register: Callable[[str, MetricsFactory], None]) -> None:
    """Contribute metrics backends: ``register(name, factory)`` returning a Metrics."""


@kind("middleware")
def register_middleware(register: Callable[[str, MiddlewareFactory], None]) -> None:
    """Contribute middleware: ``register(name, factory)``, ``factory(settings, metrics)``
    returning a :class:`~wow_core.middleware.Middleware` (or ``None``: not active)."""


@kind("wait_notifier")
def register_wait_notifiers(register: Callable[[str, WaitNotifierFactory], None]) -> None:
    """Contribute wait notifiers: ``register(name, factory)`` returning a CommandWaitNotifier."""


@kind("runtime_installer")
def register_runtime_installers(register: Callable[[str, RuntimeInstaller], None]) -> None:
    """Contribute installers run on every runtime built, after the app's own and its event
    dispatch: ``register(name, installer)``; ``installer(runtime)`` may add services,
    dispatchers and closeables (an HTTP server) or do nothing (its feature is off)."""


@kind("command")
def register_commands(register: Callable[[str, Command], None]) -> None:
    """Contribute ``wow`` subcommands: ``register("run", Command(...))``."""


@kind("settings")
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    """Contribute a settings section: ``register("kafka", KafkaSettings)`` reads ``WOW_KAFKA__*``."""


HOOK_NAMES: tuple[str, ...] = tuple(
    name for name, value in list(globals().items()) if callable(value) and hasattr(value, f"{PROJECT}_spec")
)
"""The names of every hook a plugin may implement (``register_transports``...)."""
