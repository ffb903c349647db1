"""Services ``wow run`` tests start in a subprocess."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

# ``wow run`` starts in tests/wow_core/runtime: put the repository root on the path for ``tests``
sys.path.insert(0, str(Path(__file__).parents[3]))

from tests.accounts import Account
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime

log = logging.getLogger("serve_app")


class LoggingDispatcher:
    name = "LoggingDispatcher"

    def __init__(self, hang: bool) -> None:
        self.hang = hang

    async def start(self) -> None:
        log.info("dispatcher started")

    async def stop(self, timeout: float | None = None) -> bool:
        log.info("dispatcher stopping")
        if self.hang:
            await asyncio.Event().wait()
        return True


def _install(hang: bool):  # type: ignore[no-untyped-def]
    def install(runtime: WowRuntime) -> None:
        runtime.add_dispatcher(LoggingDispatcher(hang))

        async def flush(timeout: float) -> None:
            log.info("flushing copies")

        runtime.register_flush(flush, "copies")

    return install


app = WowApp("served", aggregates=[Account], installers=[_install(False)])
hanging = WowApp("hanging", aggregates=[Account], installers=[_install(True)])
not_an_app = 42
