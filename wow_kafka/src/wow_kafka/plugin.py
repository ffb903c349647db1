"""The wow_kafka plugin module (entry point ``kafka`` of group ``wow``).

Registers the transport ``kafka`` (``WOW_TRANSPORT=kafka``), the wait notifier ``kafka``
(a per-service signal topic) and the settings section ``kafka`` (``WOW_KAFKA__*``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wow_core.plugins.hookspecs import Factory, hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from wow_core.transport.settings import ProcessSettings


def kafka_transport(settings: ProcessSettings) -> Any:
    """The factory of ``WOW_TRANSPORT=kafka``."""
    from wow_kafka.transport import KafkaTransport

    return KafkaTransport.from_settings(settings)


def kafka_wait_notifier(settings: ProcessSettings) -> Any:
    """The factory of the ``kafka`` wait notifier (the default with ``WOW_TRANSPORT=kafka``)."""
    from wow_kafka.wait_notifier import KafkaWaitNotifier

    return KafkaWaitNotifier.from_settings(settings)


@hookimpl
def register_wait_notifiers(register: Callable[[str, Factory], None]) -> None:
    register("kafka", kafka_wait_notifier)


@hookimpl
def register_transports(register: Callable[[str, Factory], None]) -> None:
    register("kafka", kafka_transport)


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    from wow_kafka.settings import KafkaSettings

    register("kafka", KafkaSettings)
