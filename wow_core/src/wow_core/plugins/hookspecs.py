"""The plugin API of wow-py: one ``register_*(register)`` hook per SPI.

A distribution exposes a module under the entry-point group ``wow``; the module defines
functions marked with :data:`hookimpl`. Each hook receives a ``register`` callable; call
it once per thing you contribute. Names must be unique across every plugin.
The core registers its own built-ins through these same hooks
(:mod:`wow_core.runtime.builtin`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pydantic import BaseModel

    from wow_core.context import ContextCapture
    from wow_core.plugins.commands import Command

PROJECT = "wow"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Factory = Callable[..., Any]
"""``factory(settings: ProcessSettings) -> instance``, called when the runtime is assembled
(:class:`~wow_core.transport.settings.ProcessSettings`; the runtime passes its ``WowSettings``)."""


@hookspec
def register_transports(register: Callable[[str, Factory], None]) -> None:
    """Contribute transports: ``register(name, factory)`` where the factory returns a Transport."""


@hookspec
def register_failure_recorders(register: Callable[[str, Factory], None]) -> None:
    """Contribute failure recorders: ``register(name, factory)`` returning a FailureRecorder."""


@hookspec
def register_decode_failure_handlers(register: Callable[[str, Factory], None]) -> None:
    """Contribute decode-failure policies: ``register(name, factory)`` returning a handler."""


@hookspec
def register_context_captures(register: Callable[[str, ContextCapture], None]) -> None:
    """Contribute context captures for queued copies: ``register(name, capture)``."""


@hookspec
def register_event_stores(register: Callable[[str, Factory], None]) -> None:
    """Contribute event stores: ``register(name, factory)`` returning an EventStore."""


@hookspec
def register_snapshot_repositories(register: Callable[[str, Factory], None]) -> None:
    """Contribute snapshot repositories: ``register(name, factory)``."""


@hookspec
def register_metrics(register: Callable[[str, Factory], None]) -> None:
    """Contribute metrics backends: ``register(name, factory)`` returning a Metrics."""


@hookspec
def register_commands(register: Callable[[str, Command], None]) -> None:
    """Contribute ``wow`` subcommands: ``register("run", Command(...))``."""


@hookspec
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    """Contribute a settings section: ``register("kafka", KafkaSettings)`` reads ``WOW_KAFKA__*``."""
