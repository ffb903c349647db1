"""A redis-server of the test's own, on a free loopback port in a folder of its own,
never the shared one on 6379: it can be killed (SIGKILL) and started again mid-test.

It runs with ``--appendonly yes --appendfsync always --save ""``: a write Redis
acknowledged is in the append-only file before the reply, so it survives a kill -9 and a
start on the same port and folder. Skipped when ``redis-server`` is missing, except
under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.services import free_port, installed


class OwnServer:
    """``start``, ``kill`` (SIGKILL) and ``start`` again a redis-server on one port and folder."""

    def __init__(self, folder: Path) -> None:
        self.binary = installed("redis-server")
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> None:
        """Start it and return once it accepts connections (the AOF is loaded by then)."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder),
                "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                "--protected-mode", "no", "--logfile", str(self.folder / "server.log"),
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if self.process.poll() is not None:
                break
            if self._answers():
                return
            time.sleep(0.02)
        log = self.folder / "server.log"
        raise RuntimeError(f"redis-server did not start: {log.read_text()[-2000:] if log.exists() else ''}")

    def _answers(self) -> bool:
        """PING answered PONG (a server still loading its AOF answers -LOADING)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: nothing is flushed beyond what ``appendfsync always`` already wrote."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    async def restart_after(self, outage: float, *, wipe: bool = False) -> float:
        """Kill it, keep it down ``outage`` seconds, start it again; returns how long it was
        down (from the kill to accepting connections again). ``wipe``: its data is deleted
        first, so it comes back empty (a failover to a server without the data)."""
        started = time.monotonic()
        self.kill()
        if wipe:
            for path in self.folder.iterdir():
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.name != "server.log":
                    path.unlink()
        await asyncio.sleep(outage)
        await asyncio.to_thread(self.start)
        return time.monotonic() - started


@contextlib.contextmanager
def running_server(prefix: str = "wow-redis-") -> Iterator[OwnServer]:
    """A started :class:`OwnServer` in a new folder; killed and its folder removed after."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        made = OwnServer(folder)
        made.start()
        try:
            yield made
        finally:
            made.kill()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
