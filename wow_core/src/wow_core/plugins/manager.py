"""Loading plugins and collecting what they register.

One pluggy ``PluginManager`` named ``wow``. Entry points of group ``wow`` are loaded one
by one so that a plugin failing to import is reported with its name and distribution;
then every ``register_*`` hook implementation is called with a ``register`` bound to
its plugin, so each registration knows where it came from and two plugins claiming the
same name fail with both distributions named.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pluggy

from wow_core.plugins import hookspecs
from wow_core.plugins.hookspecs import PROJECT


def kinds_of(module: ModuleType) -> dict[str, str]:
    """Plugin kind -> hook name, for every hookspec of ``module`` declared with
    :func:`~wow_core.plugins.hookspecs.kind`, in the order the module defines them."""
    kinds: dict[str, str] = {}
    for name, value in vars(module).items():
        kind = getattr(value, hookspecs.KIND_ATTRIBUTE, None)
        if callable(value) and isinstance(kind, str):
            kinds[kind] = name
    return kinds


KINDS: dict[str, str] = kinds_of(hookspecs)
"""Plugin kind -> the hook that contributes it (``"transport"`` -> ``register_transports``),
read from :mod:`wow_core.plugins.hookspecs`."""


class PluginError(RuntimeError):
    """A problem with a plugin; the message names the plugin and its distribution."""


class PluginImportError(PluginError):
    pass


class PluginConflictError(PluginError):
    pass


class UnknownPluginError(PluginError, LookupError):
    pass


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a plugin came from."""

    plugin: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} of {self.distribution} {self.version}"


@dataclass(frozen=True, slots=True)
class Registration:
    kind: str
    name: str
    value: Any
    origin: Origin


class PluginRegistry:
    """Everything the loaded plugins registered, by kind and name."""

    def __init__(self, manager: pluggy.PluginManager, origins: dict[str, Origin]) -> None:
        self.manager = manager
        self.origins = origins
        self._by_kind: dict[str, dict[str, Registration]] = {kind: {} for kind in KINDS}
        for kind, hook_name in KINDS.items():
            self._collect(kind, hook_name)

    def _collect(self, kind: str, hook_name: str) -> None:
        hook = getattr(self.manager.hook, hook_name)
        for impl in hook.get_hookimpls():
            plugin_name = self.manager.get_name(impl.plugin) or repr(impl.plugin)
            origin = self.origins.get(plugin_name) or Origin(plugin_name, "(registered directly)", "")
            impl.function(register=self._register_for(kind, origin))

    def _register_for(self, kind: str, origin: Origin) -> Callable[[str, Any], None]:
        def register(name: str, value: Any) -> None:
            if not isinstance(name, str) or not name:
                raise PluginError(f"{origin} registered a {kind} without a name")
            known = self._by_kind[kind].get(name)
            if known is not None:
                raise PluginConflictError(
                    f"two plugins register the {kind} {name!r}: {known.origin} and {origin}"
                )
            self._by_kind[kind][name] = Registration(kind, name, value, origin)

        return register

    def names(self, kind: str) -> list[str]:
        return sorted(self._by_kind[kind])

    def get(self, kind: str, name: str) -> Registration:
        try:
            return self._by_kind[kind][name]
        except KeyError:
            accepted = ", ".join(self.names(kind)) or "none"
            raise UnknownPluginError(
                f"no {kind.replace('_', ' ')} named {name!r} was found; accepted: {accepted}"
            ) from None

    def all(self, kind: str) -> list[Registration]:
        return [self._by_kind[kind][name] for name in self.names(kind)]

    def registrations(self) -> list[Registration]:
        return [r for kind in KINDS for r in self.all(kind)]


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=PROJECT)


def load_plugins(
    extra: Iterable[tuple[str, ModuleType | object]] = (),
    *,
    entry_points: bool = True,
) -> PluginRegistry:
    """Create the ``wow`` plugin manager, load entry points and ``extra`` plugins."""
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(hookspecs)
    origins: dict[str, Origin] = {}
    if entry_points:
        for entry_point in _entry_points():
            dist = entry_point.dist
            origin = Origin(
                entry_point.name,
                dist.metadata["Name"] if dist is not None else "(unknown distribution)",
                dist.version if dist is not None else "",
            )
            if entry_point.name in origins:
                raise PluginConflictError(
                    f"two distributions declare the plugin {entry_point.name!r}: "
                    f"{origins[entry_point.name].distribution} and {origin.distribution}"
                )
            try:
                plugin = entry_point.load()
            except Exception as error:
                raise PluginImportError(
                    f"{origin} ({entry_point.value}) failed to import: {type(error).__name__}: {error}"
                ) from error
            manager.register(plugin, name=entry_point.name)
            origins[entry_point.name] = origin
    for name, plugin in extra:
        manager.register(plugin, name=name)
        origins[name] = Origin(name, "(registered directly)", "")
    return PluginRegistry(manager, origins)
