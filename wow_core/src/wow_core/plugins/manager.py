"""Loading plugins and collecting what they register.

One pluggy ``PluginManager`` named ``wow``. Entry points of group ``wow`` are loaded one
by one so that a plugin failing to import is reported with its name and distribution;
then every ``register_*`` hook implementation is called with a ``register`` bound to
its plugin, so each registration knows where it came from and two plugins claiming the
same name fail with both distributions named.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
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
        version = f" {self.version}" if self.version else ""
        return f"plugin {self.plugin!r} of {self.distribution}{version}"


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
            if inspect.iscoroutinefunction(impl.function):
                raise PluginError(
                    f"{origin}: its {hook_name} hook is async: a hook is a plain function that "
                    "calls register(name, value)"
                )
            try:
                returned = impl.function(register=self._register_for(kind, origin))
            except PluginError:
                raise
            except Exception as error:
                raise PluginError(
                    f"{origin}: its {hook_name} hook raised {type(error).__name__}: {error}"
                ) from error
            if returned is not None:
                if inspect.iscoroutine(returned):
                    returned.close()
                raise PluginError(
                    f"{origin}: its {hook_name} hook returned {type(returned).__name__}: a hook "
                    "registers by calling register(name, value) and returns nothing"
                )

    def _register_for(self, kind: str, origin: Origin) -> Callable[[str, Any], None]:
        registered: set[str] = set()

        def register(name: str, value: Any) -> None:
            if not isinstance(name, str):
                raise PluginError(f"{origin} registered a {kind} whose name is not a string: {name!r}")
            if not name:
                raise PluginError(f"{origin} registered a {kind} without a name")
            if not _NAME.fullmatch(name):
                raise PluginError(
                    f"{origin} registered a {kind} named {name!r}: a name is letters, digits, "
                    "'_', '-', '.' or ':' (it is the value of a setting such as WOW_TRANSPORT)"
                )
            known = self._by_kind[kind].get(name)
            if known is not None:
                if name in registered:
                    raise PluginConflictError(f"{origin} registers the {kind} {name!r} twice")
                raise PluginConflictError(
                    f"two plugins register the {kind} {name!r}: {known.origin} and {origin}"
                )
            registered.add(name)
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


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
"""What a registered name may be."""


def _register(manager: pluggy.PluginManager, plugin: object, origin: Origin) -> None:
    """Register ``plugin``; a hook implementation pluggy refuses (parameters the hook does
    not have) is a :class:`PluginError` naming the plugin; a module function named like a
    hook but not marked ``@hookimpl`` (pluggy would never call it) too."""
    try:
        manager.register(plugin, name=origin.plugin)
    except pluggy.PluginValidationError as error:
        raise PluginError(f"{origin}: {error}") from error
    for hook_name in hookspecs.HOOK_NAMES:
        function = getattr(plugin, hook_name, None)
        if callable(function) and manager.parse_hookimpl_opts(plugin, hook_name) is None:
            raise PluginError(
                f"{origin}: {hook_name} is not marked @hookimpl (from wow_core.plugins import "
                "hookimpl): it would never be called"
            )


def _check_pending(manager: pluggy.PluginManager, origins: dict[str, Origin]) -> None:
    """A ``@hookimpl`` of a hook that does not exist (a misspelt name) is a
    :class:`PluginError` naming the plugin and the hooks there are."""
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as error:
        name = manager.get_name(error.plugin) or repr(error.plugin)
        origin = origins.get(name) or Origin(name, "(registered directly)", "")
        raise PluginError(f"{origin}: {error}; the hooks are: {', '.join(hookspecs.HOOK_NAMES)}") from error


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
            _register(manager, plugin, origin)
            origins[entry_point.name] = origin
    for name, plugin in extra:
        origins[name] = Origin(name, "(registered directly)", "")
        _register(manager, plugin, origins[name])
    _check_pending(manager, origins)
    return PluginRegistry(manager, origins)
