"""``HttpServer``: uvicorn serving an ASGI app inside a running wow-py process.

``wow run`` serves HTTP when ``WOW_HTTP__ENABLED=true``: the plugin's runtime installer
(:func:`install`) adds an ``HttpServer`` to the runtime as its last dispatcher, so it
binds once the command and event dispatchers started (the first request finds them
running), and stops with them: it stops accepting, lets requests in flight finish within
``WOW_HTTP__SHUTDOWN_TIMEOUT``, then the dispatchers finish and the transports close.

The socket is bound by the server itself before uvicorn starts: an address in use is a
start-up error of the runtime (``the HTTP server did not start: ...``), not an exit of
the process from inside uvicorn. uvicorn installs no signal handler: the process's owner
(``wow run``) handles SIGINT and SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import weakref
from collections.abc import Generator
from typing import Any

import uvicorn

from wow_core import WowRuntime
from wow_http.auth import use_auth
from wow_http.settings import HttpSettings

__all__ = ["HttpServer", "bind", "install", "server_of", "use_auth"]

log = logging.getLogger("wow.http")


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers (the process's owner has its own)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (``port`` 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Inherited by every accepted connection: without it a response waits for the
        # client's delayed ACK (~40 ms a request on Linux; measured 20 requests/s).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """Serves ``app`` on ``host``:``port`` from ``start()`` to ``stop()``.

    ``port`` is the bound port once started (the chosen one when asked for 0); ``url`` the
    base URL to call.
    """

    name = "http server"

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        root_path: str = "",
        shutdown_timeout: float = 10.0,
        log_level: str = "warning",
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.root_path = root_path
        self.shutdown_timeout = shutdown_timeout
        self.log_level = log_level
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.root_path}"

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the HTTP server is already started")
        try:
            self._socket = bind(self.host, self.port)
        except OSError as error:
            raise OSError(f"cannot listen on {self.host}:{self.port}: {error.strerror or error}") from error
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_level=self.log_level,
            access_log=False,
            root_path=self.root_path,
            timeout_graceful_shutdown=int(max(1, self.shutdown_timeout)),
            server_header=False,
        )
        server = self._server = _EmbeddedServer(config)
        # What uvicorn's serve() does, in two halves: started (bound, accepting) when
        # start() returns, then its main loop until stop() asks it to exit.
        config.load()
        server.lifespan = config.lifespan_class(config)
        sockets = [self._socket]
        await server.startup(sockets=sockets)

        async def run() -> None:
            await server.main_loop()
            await server.shutdown(sockets=sockets)

        self._task = asyncio.create_task(run(), name="wow-http-server")
        log.info("serving HTTP on %s", self.url)

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop accepting, let requests in flight finish; True when it stopped in time."""
        task, server = self._task, self._server
        if task is None or server is None:
            return True
        server.should_exit = True
        budget = self.shutdown_timeout if timeout is None else min(timeout, self.shutdown_timeout)
        try:
            await asyncio.wait_for(asyncio.shield(task), budget + 1.0)
        except TimeoutError:
            server.force_exit = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return False
        finally:
            if self._socket is not None:
                self._socket.close()
        return True


def install(runtime: WowRuntime) -> None:
    """The plugin's runtime installer: serve ``runtime`` when ``WOW_HTTP__ENABLED=true``."""
    from wow_http.app import create_app, settings_of

    settings: HttpSettings = settings_of(runtime)
    if not settings.enabled:
        return
    app = create_app(runtime, settings)
    if app.state.wow_auth is None and not settings.loopback:
        log.warning(
            "serving HTTP on %s:%s, beyond loopback, and no auth guards the routes: anyone who reaches "
            "it may send commands (set WOW_HTTP__AUTH__BEARER_TOKENS or an auth hook)",
            settings.host,
            settings.port,
        )
    server = HttpServer(
        app,
        host=settings.host,
        port=settings.port,
        root_path=settings.root_path,
        shutdown_timeout=settings.shutdown_timeout,
    )
    runtime.add_dispatcher(server)
    _servers[runtime] = server


_servers: weakref.WeakKeyDictionary[WowRuntime, HttpServer] = weakref.WeakKeyDictionary()


def server_of(runtime: WowRuntime) -> HttpServer | None:
    """The HTTP server ``wow run`` (the runtime installer) added to ``runtime``, if any."""
    return _servers.get(runtime)
