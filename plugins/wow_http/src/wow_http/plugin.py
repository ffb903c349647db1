"""The wow_http plugin module, found through the entry point group ``wow``.

``pyproject.toml`` declares ``[project.entry-points.wow] http = "wow_http.plugin"``. It
contributes the ``http`` settings section (``WOW_HTTP__*``), the runtime installer that
serves HTTP from ``wow run`` when ``WOW_HTTP__ENABLED=true``, and the ``wow openapi`` and
``wow send`` commands. The hooks stay cheap: FastAPI and uvicorn are imported only when
a runtime is built with HTTP enabled or a command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from wow_core.plugins import Command, hookimpl
from wow_http.settings import SECTION, HttpSettings


def install_http(runtime: Any) -> None:
    """Serve ``runtime`` over HTTP when its settings say so (``WOW_HTTP__ENABLED``)."""
    if not runtime.settings.section(SECTION, HttpSettings).enabled:
        return
    from wow_http.server import install

    install(runtime)


def http_wait_notifier(settings: Any) -> Any:
    """Factory of the ``http`` wait notifier: ``WOW_COMMAND__WAIT__NOTIFIER=http``."""
    from wow_http.wait_notifier import HttpWaitNotifier

    return HttpWaitNotifier.from_settings(settings)


@hookimpl
def register_wait_notifiers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("http", http_wait_notifier)


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    register(SECTION, HttpSettings)


@hookimpl
def register_runtime_installers(register: Callable[[str, Callable[[Any], object]], None]) -> None:
    register("http", install_http)


@hookimpl
def register_commands(register: Callable[[str, Command], None]) -> None:
    from wow_http.cli import COMMANDS

    for name, command in COMMANDS.items():
        register(name, command)
