"""The public surfaces: ``wow_core`` for services, ``wow_core.spi`` for plugin authors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import wow_core
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
