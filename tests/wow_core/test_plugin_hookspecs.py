"""The hookspecs are the one list of plugin kinds, and each says what its factory returns."""

from __future__ import annotations

import collections.abc
import types
import typing

from pydantic import BaseModel

from wow_core.command.notifier import CommandWaitNotifier
from wow_core.context import ContextCapture
from wow_core.event.failure import FailureRecorder
from wow_core.eventsourcing.store import EventStore, SnapshotRepository
from wow_core.metrics import Metrics
from wow_core.plugins import KINDS, hookspecs
from wow_core.plugins.commands import Command
from wow_core.plugins.manager import kinds_of
from wow_core.transport.decode_failure import TransportDecodeFailureHandler
from wow_core.transport.settings import ProcessSettings
from wow_core.transport.spi import Transport

# The hookspecs name these under TYPE_CHECKING only (importing a plugin stays cheap).
_NAMES = {
    "BaseModel": BaseModel,
    "CommandWaitNotifier": CommandWaitNotifier,
    "Command": Command,
    "ContextCapture": ContextCapture,
    "EventStore": EventStore,
    "FailureRecorder": FailureRecorder,
    "Metrics": Metrics,
    "SnapshotRepository": SnapshotRepository,
    "Transport": Transport,
    "TransportDecodeFailureHandler": TransportDecodeFailureHandler,
    "ProcessSettings": ProcessSettings,
}


def _registered(spec: str) -> object:
    """What ``register(name, value)`` of the hookspec ``spec`` takes as its value."""
    hints = typing.get_type_hints(getattr(hookspecs, spec), vars(hookspecs), _NAMES)
    register = hints["register"]
    assert typing.get_origin(register) is collections.abc.Callable
    (name, value), returns = typing.get_args(register)
    assert name is str
    assert returns in (None, type(None))
    return value


def test_every_factory_hook_says_what_its_factory_builds_from_the_settings() -> None:
    built = {
        "register_transports": Transport,
        "register_failure_recorders": FailureRecorder,
        "register_decode_failure_handlers": TransportDecodeFailureHandler,
        "register_event_stores": EventStore,
        "register_snapshot_repositories": SnapshotRepository,
        "register_metrics": Metrics,
        "register_wait_notifiers": CommandWaitNotifier,
    }
    for spec, product in built.items():
        factory = _registered(spec)
        assert typing.get_origin(factory) is collections.abc.Callable, spec
        arguments, returns = typing.get_args(factory)
        assert arguments == [ProcessSettings], spec
        assert returns is product, spec


def test_the_value_hooks_say_what_they_register() -> None:
    assert _registered("register_context_captures") is ContextCapture
    settings_section = _registered("register_settings")
    assert typing.get_origin(settings_section) is type


def test_the_kinds_are_the_hookspecs() -> None:
    specs = {name for name in vars(hookspecs) if name.startswith("register_")}
    assert set(KINDS.values()) == specs
    assert KINDS["transport"] == "register_transports"
    assert KINDS["metrics"] == "register_metrics"
    assert KINDS["settings"] == "register_settings"


def test_a_new_hookspec_is_a_new_kind_without_another_list_to_edit() -> None:
    module = types.ModuleType("more_hookspecs")
    vars(module).update(vars(hookspecs))

    @hookspecs.kind("query_handler")
    def register_query_handlers(register: object) -> None:
        """Contribute query handlers."""

    module.register_query_handlers = register_query_handlers  # type: ignore[attr-defined]
    kinds = kinds_of(module)
    assert kinds["query_handler"] == "register_query_handlers"
    assert {kind: hook for kind, hook in kinds.items() if kind != "query_handler"} == KINDS
