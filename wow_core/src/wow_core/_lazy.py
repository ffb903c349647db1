"""Lazy re-exports for the public surfaces (``wow_core``, ``wow_core.spi``).

A surface lists ``name -> defining module``; a name is imported on first access and then
cached in the surface's namespace, so ``import wow_core`` pays for nothing until a name
is used, and ``from wow_core import aggregate`` pays only for the modelling modules.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing would cost ~10 ms here
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(
    surface: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the module ``surface`` exporting ``exports``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {surface!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
