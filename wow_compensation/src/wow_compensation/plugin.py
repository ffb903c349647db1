"""The wow_compensation plugin module (entry point group ``wow``).

- the failure recorder ``compensation`` (``WOW_FAILURE_RECORDER=compensation``);
- the settings section ``compensation`` (``WOW_COMPENSATION__*``);
- the command ``wow compensation ...``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wow_core.plugins.hookspecs import FailureRecorderFactory, hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from wow_core.event.failure import FailureRecorder
    from wow_core.plugins.commands import Command
    from wow_core.transport.settings import ProcessSettings


def create_store(settings: ProcessSettings) -> object:
    """The store the settings select (``auto``: redis when the event store is redis)."""
    from wow_compensation.settings import SECTION, CompensationSettings, StoreKind
    from wow_compensation.store import InMemoryCompensationStore

    kind = settings.section(SECTION, CompensationSettings).store
    if kind is StoreKind.AUTO:
        eventsourcing = getattr(settings, "eventsourcing", None)
        kind = StoreKind.REDIS if getattr(eventsourcing, "store", "") == "redis" else StoreKind.IN_MEMORY
    if kind is StoreKind.REDIS:
        from wow_compensation.redis_store import RedisCompensationStore

        return RedisCompensationStore.from_settings(settings)
    return InMemoryCompensationStore()


def _recorder(settings: ProcessSettings) -> FailureRecorder:
    from wow_compensation.recorder import CompensationFailureRecorder
    from wow_compensation.settings import SECTION, CompensationSettings
    from wow_compensation.store import CompensationStore

    store = create_store(settings)
    assert isinstance(store, CompensationStore)
    return CompensationFailureRecorder(settings.section(SECTION, CompensationSettings), store)


@hookimpl
def register_failure_recorders(register: Callable[[str, FailureRecorderFactory], None]) -> None:
    register("compensation", _recorder)


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    from wow_compensation.settings import SECTION, CompensationSettings

    register(SECTION, CompensationSettings)


@hookimpl
def register_commands(register: Callable[[str, Command], None]) -> None:
    from wow_compensation.cli import COMMAND

    register("compensation", COMMAND)
