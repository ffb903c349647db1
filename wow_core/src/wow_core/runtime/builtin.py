"""The core's own built-ins, registered through the same hooks as any plugin (the
entry point ``core``).

It lives in the runtime because it is the one plugin that registers the runtime's own
pieces (the ``wow`` commands) besides the in-memory transport and stores.

Factories import lazily so that discovering plugins stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wow_core.context import MetricsSourceCapture
from wow_core.metrics import InMemoryMetrics, NoopMetrics
from wow_core.plugins.hookspecs import (
    DecodeFailureHandlerFactory,
    EventStoreFactory,
    FailureRecorderFactory,
    MetricsFactory,
    MiddlewareFactory,
    SnapshotRepositoryFactory,
    TransportFactory,
    WaitNotifierFactory,
    hookimpl,
)

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


def _in_memory_transport(settings: ProcessSettings) -> Transport:
    from wow_core.transport.in_memory import InMemoryTransport

    return InMemoryTransport.from_settings(settings)


def _none_recorder(settings: ProcessSettings) -> FailureRecorder:
    from wow_core.event.failure import NONE_RECORDER

    return NONE_RECORDER


def _default_decode_failure_handler(settings: ProcessSettings) -> TransportDecodeFailureHandler:
    from wow_core.transport.decode_failure import DefaultDecodeFailureHandler

    return DefaultDecodeFailureHandler()


def _dead_letter_handler(settings: ProcessSettings) -> TransportDecodeFailureHandler:
    from wow_core.transport.decode_failure import DefaultDecodeFailureHandler
    from wow_core.transport.defaults import DecodeFailureDefault

    return DefaultDecodeFailureHandler(DecodeFailureDefault.DEAD_LETTER)


def _leave_pending_handler(settings: ProcessSettings) -> TransportDecodeFailureHandler:
    from wow_core.transport.decode_failure import DefaultDecodeFailureHandler
    from wow_core.transport.defaults import DecodeFailureDefault

    return DefaultDecodeFailureHandler(DecodeFailureDefault.LEAVE_PENDING)


def _in_memory_event_store(settings: ProcessSettings) -> EventStore:
    from wow_core.eventsourcing.in_memory import InMemoryEventStore

    return InMemoryEventStore()


def _in_memory_snapshot_repository(settings: ProcessSettings) -> SnapshotRepository:
    from wow_core.eventsourcing.in_memory import InMemorySnapshotRepository

    return InMemorySnapshotRepository()


def _local_wait_notifier(settings: ProcessSettings) -> CommandWaitNotifier:
    from wow_core.command.notifier import LocalWaitNotifier

    return LocalWaitNotifier()


def _noop_metrics(settings: ProcessSettings) -> Metrics:
    return NoopMetrics()


def _in_memory_metrics(settings: ProcessSettings) -> Metrics:
    return InMemoryMetrics()


@hookimpl
def register_transports(register: Callable[[str, TransportFactory], None]) -> None:
    register("in_memory", _in_memory_transport)


@hookimpl
def register_failure_recorders(register: Callable[[str, FailureRecorderFactory], None]) -> None:
    register("none", _none_recorder)


@hookimpl
def register_decode_failure_handlers(register: Callable[[str, DecodeFailureHandlerFactory], None]) -> None:
    register("default", _default_decode_failure_handler)  # by the transport's default
    register("dead_letter", _dead_letter_handler)
    register("leave_pending", _leave_pending_handler)


@hookimpl
def register_context_captures(register: Callable[[str, ContextCapture], None]) -> None:
    register("metrics_source", MetricsSourceCapture())


@hookimpl
def register_event_stores(register: Callable[[str, EventStoreFactory], None]) -> None:
    register("in_memory", _in_memory_event_store)


@hookimpl
def register_snapshot_repositories(register: Callable[[str, SnapshotRepositoryFactory], None]) -> None:
    register("in_memory", _in_memory_snapshot_repository)


@hookimpl
def register_metrics(register: Callable[[str, MetricsFactory], None]) -> None:
    register("noop", _noop_metrics)
    register("in_memory", _in_memory_metrics)


def _metrics_middleware(settings: ProcessSettings, metrics: Metrics) -> Middleware | None:
    """The core's metrics (:mod:`wow_core.middleware.metrics`); not installed for no-op metrics."""
    if isinstance(metrics, NoopMetrics):
        return None
    from wow_core.metrics import RECORDS_COMMAND_OUTCOMES, RECORDS_MESSAGING
    from wow_core.middleware import MetricsMiddleware

    return MetricsMiddleware(
        metrics,
        buses=not getattr(metrics, RECORDS_MESSAGING, False),
        command_handler=not getattr(metrics, RECORDS_COMMAND_OUTCOMES, False),
    )


@hookimpl
def register_middleware(register: Callable[[str, MiddlewareFactory], None]) -> None:
    register("metrics", _metrics_middleware)


@hookimpl
def register_wait_notifiers(register: Callable[[str, WaitNotifierFactory], None]) -> None:
    register("in_memory", _local_wait_notifier)  # the transport's own: the local coordinator


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    from wow_core.application.settings import ApplicationSettings

    register("application", ApplicationSettings)  # WOW_APPLICATION__*: named transports, the worker


@hookimpl
def register_commands(register: Callable[[str, Command], None]) -> None:
    from wow_core.runtime.cli import CORE_COMMANDS

    for name, command in CORE_COMMANDS.items():
        register(name, command)
