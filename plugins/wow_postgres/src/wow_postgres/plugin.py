"""The wow_postgres plugin module (entry point group ``wow``).

Registers the transport ``postgres``, the event store ``postgres``, the snapshot repository ``postgres``, the
wait notifier ``postgres`` (``LISTEN``/``NOTIFY``; the default with ``WOW_TRANSPORT=postgres``), the
command ``wow postgres`` and the settings section ``postgres`` (``WOW_POSTGRES__*``).
Factories import lazily so that discovering plugins stays cheap (asyncpg is imported
only when a store is built).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from wow_core.plugins import hookimpl
from wow_postgres.settings import SECTION, PostgresSettings

if TYPE_CHECKING:
    from wow_core.plugins.commands import Command
    from wow_core.transport.settings import ProcessSettings

Factory = Callable[..., Any]


def _transport(settings: ProcessSettings) -> Any:
    from wow_postgres.transport import PostgresTransport

    return PostgresTransport.from_settings(settings)


def _event_store(settings: ProcessSettings) -> Any:
    from wow_postgres.event_store import PostgresEventStore

    return PostgresEventStore.from_settings(settings)


def _snapshot_repository(settings: ProcessSettings) -> Any:
    from wow_postgres.event_store import PostgresSnapshotRepository

    return PostgresSnapshotRepository.from_settings(settings)


def _wait_notifier(settings: ProcessSettings) -> Any:
    from wow_postgres.wait_notifier import PostgresWaitNotifier

    return PostgresWaitNotifier.from_settings(settings)


@hookimpl
def register_wait_notifiers(register: Callable[[str, Factory], None]) -> None:
    register("postgres", _wait_notifier)


@hookimpl
def register_transports(register: Callable[[str, Factory], None]) -> None:
    register("postgres", _transport)


@hookimpl
def register_event_stores(register: Callable[[str, Factory], None]) -> None:
    register("postgres", _event_store)


@hookimpl
def register_snapshot_repositories(register: Callable[[str, Factory], None]) -> None:
    register("postgres", _snapshot_repository)


@hookimpl
def register_commands(register: Callable[[str, Command], None]) -> None:
    from wow_postgres.cli import COMMAND

    register("postgres", COMMAND)


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    register(SECTION, PostgresSettings)
