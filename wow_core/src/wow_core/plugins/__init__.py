"""Plugin discovery: pluggy hooks found through the entry-point group ``wow``."""

from wow_core.plugins.commands import Command
from wow_core.plugins.hookspecs import PROJECT, hookimpl, hookspec
from wow_core.plugins.manager import (
    KINDS,
    PluginConflictError,
    PluginError,
    PluginImportError,
    PluginRegistry,
    Registration,
    UnknownPluginError,
    load_plugins,
)

__all__ = [
    "KINDS",
    "Command",
    "PROJECT",
    "PluginConflictError",
    "PluginError",
    "PluginImportError",
    "PluginRegistry",
    "Registration",
    "UnknownPluginError",
    "hookimpl",
    "hookspec",
    "load_plugins",
]
