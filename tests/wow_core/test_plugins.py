from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from wow_core.plugins import (
    KINDS,
    PluginConflictError,
    PluginError,
    UnknownPluginError,
    hookimpl,
    hookspecs,
    load_plugins,
)


class _Transports:
    def __init__(self, *names: str) -> None:
        self.names = names

    @hookimpl
    def register_transports(self, register: Callable[[str, Any], None]) -> None:
        for name in self.names:
            register(name, lambda settings: None)


def test_every_hookspec_is_a_kind() -> None:
    specs = {
        name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("register_")
    }
    assert specs == set(KINDS.values())


def test_the_workspace_members_are_discovered_through_the_wow_entry_point_group() -> None:
    registry = load_plugins()
    found = {origin.plugin: (origin.distribution, origin.version) for origin in registry.origins.values()}
    assert found["core"] == ("wow-core", "0.1.0")
    for plugin, distribution in [
        ("kafka", "wow-kafka"),
        ("redis", "wow-redis"),
        ("nats", "wow-nats"),
        ("otel", "wow-otel"),
        ("compensation", "wow-compensation"),
    ]:
        assert found[plugin][0] == distribution


def test_the_core_registers_its_built_ins_through_the_same_hooks() -> None:
    registry = load_plugins()
    for kind, name in [
        ("transport", "in_memory"),
        ("failure_recorder", "none"),
        ("decode_failure_handler", "default"),
        ("context_capture", "metrics_source"),
        ("event_store", "in_memory"),
        ("snapshot_repository", "in_memory"),
        ("metrics", "noop"),
        ("command", "plugins"),
    ]:
        registration = registry.get(kind, name)
        assert registration.origin.distribution == "wow-core"
        assert registration.origin.plugin == "core"
    core = registry.manager.get_plugin("core")
    assert core is not None
    assert {impl.plugin_name for impl in registry.manager.hook.register_transports.get_hookimpls()} >= {
        "core"
    }


def test_two_plugins_claiming_one_name_fail_naming_both() -> None:
    with pytest.raises(PluginConflictError) as raised:
        load_plugins(extra=[("alpha", _Transports("carrier")), ("beta", _Transports("carrier"))])
    message = str(raised.value)
    assert "'carrier'" in message
    assert "plugin 'alpha'" in message
    assert "plugin 'beta'" in message


def test_a_plugin_claiming_a_built_in_name_fails_naming_the_core() -> None:
    with pytest.raises(PluginConflictError, match=r"'in_memory'.*wow-core.*plugin 'mine'"):
        load_plugins(extra=[("mine", _Transports("in_memory"))])


def test_the_same_name_in_two_kinds_is_fine() -> None:
    class Store:
        @hookimpl
        def register_event_stores(self, register: Callable[[str, Any], None]) -> None:
            register("carrier", lambda settings: None)

    registry = load_plugins(extra=[("t", _Transports("carrier")), ("s", Store())], entry_points=False)
    assert registry.get("transport", "carrier").origin.plugin == "t"
    assert registry.get("event_store", "carrier").origin.plugin == "s"


def test_a_registration_needs_a_name() -> None:
    with pytest.raises(PluginError, match=r"plugin 'nameless'.*without a name"):
        load_plugins(extra=[("nameless", _Transports(""))], entry_points=False)


def test_an_unknown_name_lists_what_is_accepted() -> None:
    registry = load_plugins(extra=[("t", _Transports("b", "a"))], entry_points=False)
    with pytest.raises(UnknownPluginError, match="no transport named 'c' was found; accepted: a, b"):
        registry.get("transport", "c")
    assert registry.names("transport") == ["a", "b"]
    assert registry.names("event_store") == []


class _Misspelt:
    @hookimpl
    def register_transport(self, register: Callable[[str, Any], None]) -> None:  # singular: no such hook
        register("x", lambda settings: None)


class _Unmarked:
    def register_transports(self, register: Callable[[str, Any], None]) -> None:  # no @hookimpl
        register("x", lambda settings: None)


class _Async:
    @hookimpl
    async def register_transports(self, register: Callable[[str, Any], None]) -> None:
        register("x", lambda settings: None)


class _Returning:
    @hookimpl
    def register_transports(self, register: Callable[[str, Any], None]) -> Any:
        return {"x": lambda settings: None}


class _Raising:
    @hookimpl
    def register_transports(self, register: Callable[[str, Any], None]) -> None:
        raise RuntimeError("the hook itself blew up")


class _WrongParameters:
    @hookimpl
    def register_transports(self, reg: Callable[[str, Any], None], extra: int) -> None: ...


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (_Misspelt(), r"plugin 'broken'.*register_transport.*the hooks are: register_transports"),
        (_Unmarked(), r"plugin 'broken'.*register_transports is not marked @hookimpl"),
        (_Async(), r"plugin 'broken'.*register_transports hook is async"),
        (_Returning(), r"plugin 'broken'.*register_transports hook returned dict.*calling register"),
        (
            _Raising(),
            r"plugin 'broken'.*register_transports hook raised RuntimeError: the hook itself blew up",
        ),
        (_WrongParameters(), r"plugin 'broken'.*register_transports"),
    ],
)
def test_a_hook_mistake_fails_naming_the_plugin_instead_of_registering_nothing(
    plugin: object, message: str
) -> None:
    with pytest.raises(PluginError, match=message):
        load_plugins(extra=[("broken", plugin)], entry_points=False)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (42, "whose name is not a string: 42"),
        ("Broken Transport!", "named 'Broken Transport!': a name is letters"),
    ],
)
def test_a_name_that_no_setting_could_select_is_refused(name: Any, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        load_plugins(extra=[("odd", _Transports(name))], entry_points=False)


def test_one_plugin_registering_a_name_twice_is_told_so() -> None:
    with pytest.raises(PluginConflictError, match=r"plugin 'twice'.* registers the transport 'x' twice"):
        load_plugins(extra=[("twice", _Transports("x", "x"))], entry_points=False)
