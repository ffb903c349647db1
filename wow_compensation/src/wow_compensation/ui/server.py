"""``OperationsServer``: serves the operations page from a running service.

Added to the runtime by the compensation recorder when ``WOW_COMPENSATION__UI__ENABLED``
is true: it starts with the runtime's dispatchers (so ``wow run`` serves the page on
``WOW_COMPENSATION__UI__HOST``/``PORT``) and stops with them. The server is uvicorn's,
without its signal handlers: the process's own (``wow run``'s) stay in charge of
shutting down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn
from starlette.types import ASGIApp

log = logging.getLogger("wow.compensation.ui")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The runtime's process handles SIGINT/SIGTERM; uvicorn must not take them.
        yield


class OperationsServer:
    """Serves ``app`` on ``host:port`` between ``start`` and ``stop``."""

    name = "OperationsServer"

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.bound_port = port

    @property
    def url(self) -> str:
        """Where the page is served (the bound port, for port 0)."""
        return f"http://{self.host}:{self.bound_port}/"

    async def start(self) -> None:
        """Bind (an address in use raises ``OSError`` here) and serve."""
        if self._task is not None:
            return
        # Bound here rather than by uvicorn, which exits the process when it cannot bind.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError as error:
            sock.close()
            raise OSError(
                error.errno, f"the operations page cannot listen on {self.host}:{self.port}: {error}"
            ) from error
        # Listening before the URL is logged: a client that reads the log and connects at
        # once is queued until uvicorn accepts, never refused.
        sock.listen(2048)
        sock.setblocking(False)
        self.bound_port = int(sock.getsockname()[1])
        config = uvicorn.Config(self.app, lifespan="off", log_level="warning", access_log=False)
        server = _Server(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name=self.name)
        log.warning("operations page on %s", self.url)

    async def stop(self, timeout: float | None = None) -> bool:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return True
        server.should_exit = True
        try:
            await asyncio.wait_for(task, timeout)
        except TimeoutError:
            return False
        return True
