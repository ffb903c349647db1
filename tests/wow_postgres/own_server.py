"""A PostgreSQL server of the test's own (``initdb`` + ``pg_ctl``), on a free port, never
the shared one: it can be restarted or crashed mid-test.

Binaries are found under ``/usr/lib/postgresql/*/bin`` (or on ``PATH``). As root, the
server runs as the ``postgres`` user (``initdb`` refuses root).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from tests.services import free_port


def _binary(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def available() -> bool:
    return _binary("initdb") is not None and _binary("pg_ctl") is not None


class OwnServer:
    """``start``, ``restart(mode)`` and ``stop`` a throwaway cluster in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(folder, "postgres")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        result = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(command)} failed: {result.stdout}{result.stderr}{tail}")

    def init(self) -> None:
        initdb = _binary("initdb")
        assert initdb is not None
        self._run(initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")

    def _pg_ctl(self, *args: str) -> None:
        pg_ctl = _binary("pg_ctl")
        assert pg_ctl is not None
        self._run(pg_ctl, "-D", str(self.data), "-w", "-t", "60", *args)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=on"
        self._pg_ctl("-o", options, "-l", str(self.folder / "server.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    def restart(self, mode: str = "immediate") -> None:
        """Stop (``immediate``: a crash, recovered from the WAL on start) and start again."""
        self.stop(mode)
        self.start()
