"""The wow_redis plugin module (entry point group ``wow``).

Registers the transport ``redis``, the event store ``redis``, the snapshot repository
``redis``, the wait notifier ``redis`` (pub/sub) and the settings section ``redis``
(``WOW_REDIS__*``). Factories import
lazily so that discovering plugins stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from wow_core.plugins import hookimpl
from wow_redis.settings import SECTION, RedisSettings

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings

Factory = Callable[..., Any]


def _transport(settings: ProcessSettings) -> Any:
    from wow_redis.transport import RedisStreamTransport

    return RedisStreamTransport.from_settings(settings)


def _event_store(settings: ProcessSettings) -> Any:
    from wow_redis.event_store import RedisEventStore

    return RedisEventStore.from_settings(settings)


def _snapshot_repository(settings: ProcessSettings) -> Any:
    from wow_redis.event_store import RedisSnapshotRepository

    return RedisSnapshotRepository.from_settings(settings)


def _wait_notifier(settings: ProcessSettings) -> Any:
    from wow_redis.wait_notifier import RedisWaitNotifier

    return RedisWaitNotifier.from_settings(settings)


@hookimpl
def register_wait_notifiers(register: Callable[[str, Factory], None]) -> None:
    register("redis", _wait_notifier)


@hookimpl
def register_transports(register: Callable[[str, Factory], None]) -> None:
    register("redis", _transport)


@hookimpl
def register_event_stores(register: Callable[[str, Factory], None]) -> None:
    register("redis", _event_store)


@hookimpl
def register_snapshot_repositories(register: Callable[[str, Factory], None]) -> None:
    register("redis", _snapshot_repository)


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    register(SECTION, RedisSettings)
