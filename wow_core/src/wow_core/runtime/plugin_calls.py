"""Calling what plugins registered, so that a failure names the plugin."""

from __future__ import annotations

from typing import Any

from wow_core.plugins import PluginError, Registration
from wow_core.runtime._text import a_type_name
from wow_core.runtime.settings import SettingsError


def call_factory(registration: Registration, *args: Any) -> Any:
    """``registration.value(*args)``: a plugin's factory (or installer) called, its failure
    a :class:`PluginError` naming the plugin, its distribution and the factory (a
    ``SettingsError`` or ``PluginError`` it raises goes on as it is: it names what to
    change)."""
    kind = registration.kind.replace("_", " ")
    what = (
        f"{kind} {registration.name!r}"
        if kind.endswith("installer")
        else f"{kind} factory {registration.name!r}"
    )
    factory = registration.value
    if not callable(factory):
        raise PluginError(
            f"{registration.origin}: the {what} is {a_type_name(factory)}, not a callable "
            "(register the class or a function that builds it)"
        )
    try:
        return factory(*args)
    except (SettingsError, PluginError):
        raise
    except Exception as error:
        raise PluginError(
            f"{registration.origin}: the {what} raised {type(error).__name__}: {error}"
        ) from error
