"""The public surfaces: ``wow_core`` for services, ``wow_core.spi`` for plugin authors."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
from dataclasses import dataclass, replace
from types import ModuleType

import pytest

import wow_core
import wow_core.spi
from wow_core import CommandStage, CommandWait, Emit, WowApp, aggregate, on_command, on_sourcing
from wow_core.executor import Executor, NowaitExecutor
from wow_core.runtime.keyed_executor import KeyedExecutor


def _modules() -> list[str]:
    return [info.name for info in pkgutil.walk_packages(wow_core.__path__, "wow_core.")]


def test_one_class_is_named_keyed_executor_and_it_is_the_dispatchers_executor() -> None:
    defined = set()
    for name in _modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if inspect.isclass(value) and value.__name__ == "KeyedExecutor":
                defined.add(f"{value.__module__}.{value.__qualname__}")
    assert defined == {"wow_core.runtime.keyed_executor.KeyedExecutor"}
    executor: Executor = KeyedExecutor(4)
    assert isinstance(executor, NowaitExecutor)


def _surface_names(module: ModuleType) -> tuple[set[str], set[str]]:
    """(names imported under TYPE_CHECKING, names of the lazy map) of a surface's source."""
    tree = ast.parse(inspect.getsource(module))
    typed: set[str] = set()
    mapped: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typed |= {
                alias.name for item in node.body if isinstance(item, ast.ImportFrom) for alias in item.names
            }
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "_EXPORTS" for target in node.targets
        ):
            assert isinstance(node.value, ast.Dict)
            mapped |= {key.value for key in node.value.keys if isinstance(key, ast.Constant)}
    return typed, mapped


@pytest.mark.parametrize("surface", [wow_core, wow_core.spi], ids=["wow_core", "wow_core.spi"])
def test_a_surface_exports_what_it_types_and_each_name_is_its_modules(surface: ModuleType) -> None:
    typed, mapped = _surface_names(surface)
    exported = set(surface.__all__) - {"__version__"}
    assert typed == mapped == exported
    for name in exported:
        value = getattr(surface, name)
        home = importlib.import_module(surface._EXPORTS[name])  # type: ignore[attr-defined]
        assert getattr(home, name) is value, name
    assert set(dir(surface)) >= exported
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        getattr(surface, "nothing_here")  # noqa: B009


def test_the_user_surface_is_small_and_holds_what_a_first_service_needs() -> None:
    assert 20 <= len(wow_core.__all__) <= 40
    assert {
        "aggregate",
        "on_command",
        "on_sourcing",
        "Emit",
        "DomainError",
        "WowApp",
        "CommandWait",
        "CommandStage",
        "event_processor",
        "projection",
        "stateless_saga",
        "on_event",
    } <= set(wow_core.__all__)


def test_the_plugin_surface_holds_the_spi_the_hooks_and_the_settings() -> None:
    assert {
        "Transport",
        "TransportReceiver",
        "TransportRecord",
        "TransportMessage",
        "TransportBase",
        "Readiness",
        "ReadAhead",
        "hookimpl",
        "ProcessSettings",
        "SettingsSection",
    } <= set(wow_core.spi.__all__)


@pytest.mark.parametrize("surface", ["wow_core", "wow_core.spi"])
def test_importing_a_surface_imports_nothing_of_what_it_exports(surface: str) -> None:
    probe = (
        f"import sys; import {surface}; "
        "print(sorted(m for m in sys.modules if m.startswith(('wow_core.', 'pydantic', 'typing'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() in ("['wow_core._lazy']", "['wow_core._lazy', 'wow_core.spi']")


@dataclass(frozen=True)
class Counter:
    value: int = 0


@dataclass(frozen=True)
class Add:
    amount: int


@dataclass(frozen=True)
class Added:
    amount: int


@aggregate("public_api", "counter", state=Counter)
class CounterAggregate:
    @on_command(create=True)
    def add(self, state: Counter, body: Add) -> Emit[Added]:
        return Emit(Added(body.amount), result={"value": state.value + body.amount})

    @on_sourcing
    def added(self, state: Counter, event: Added) -> Counter:
        return replace(state, value=state.value + event.amount)


async def test_a_first_service_is_written_with_the_names_of_wow_core() -> None:
    runtime = WowApp("public_api", aggregates=[CounterAggregate]).runtime()
    async with runtime:
        result = await runtime.gateway.send_and_wait(
            runtime.aggregates.command(Add(2)), CommandWait.processed(), timeout=10
        )
    assert result.stage is CommandStage.PROCESSED
    assert result.result == {"value": 2}
