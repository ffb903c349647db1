"""The wow_nats plugin module, found through the entry point group ``wow``.

``pyproject.toml`` declares ``[project.entry-points.wow] nats = "wow_nats.plugin"``;
``wow_core.plugins.load_plugins()`` imports this module and calls its hooks. The hooks
stay cheap: the transport module (and nats-py) is imported only when the runtime builds
the transport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from wow_core.plugins import hookimpl
from wow_nats.settings import SECTION, NatsSettings

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings


def nats_transport(settings: ProcessSettings) -> Any:
    """Factory of the ``nats`` transport: ``WOW_TRANSPORT=nats`` selects it."""
    from wow_nats.transport import NatsTransport

    return NatsTransport.from_settings(settings)


def nats_wait_notifier(settings: ProcessSettings) -> Any:
    """Factory of the ``nats`` wait notifier (the default with ``WOW_TRANSPORT=nats``)."""
    from wow_nats.wait_notifier import NatsWaitNotifier

    return NatsWaitNotifier.from_settings(settings)


@hookimpl
def register_wait_notifiers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("nats", nats_wait_notifier)


@hookimpl
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("nats", nats_transport)


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    register(SECTION, NatsSettings)
