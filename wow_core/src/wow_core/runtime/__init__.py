"""Runtime assembly: settings, the DI container, the WowRuntime lifecycle, the CLI."""

from wow_core.runtime.settings import SettingsError, WowSettings

__all__ = ["SettingsError", "WowSettings"]
