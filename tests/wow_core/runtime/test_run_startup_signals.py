"""``wow run`` (the real ``wow`` executable) stopped by SIGTERM while it starts up.

An orchestrator sends SIGTERM whenever it likes: during the imports, or while the
runtime waits for a broker that does not answer. The process then stops after the step
it is in, closes what it opened and exits 0; it never dies by the signal (status -15).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WOW = Path(sys.executable).parent / "wow"

pytestmark = pytest.mark.slow


class Starting:
    """A ``wow run serve_app:app`` process; its output lines are collected on a thread."""

    def __init__(self, **env: str) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
        environment.update(env, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [str(WOW), "run", "serve_app:app"],
            cwd=HERE,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def catches_sigterm(self) -> bool:
        """Whether the process has a handler for SIGTERM (Linux: ``SigCgt`` in its status)."""
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return False
        caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
        return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))

    def finish(self, timeout: float = 60) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError("wow run did not stop after SIGTERM:\n" + self.log()) from None
        self._reader.join(10)
        return code

    def log(self) -> str:
        return "\n".join(self.lines)


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)  # polling another process's state


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status (Linux)")
def test_sigterm_as_soon_as_the_process_handles_it_stops_it_cleanly_before_serving() -> None:
    """The signal lands while the command line, the plugins and the app are imported:
    the process stops after that step, having started nothing."""
    starting = Starting()
    try:
        wait_until(starting.catches_sigterm, 30, "the process to handle SIGTERM")
        starting.process.send_signal(signal.SIGTERM)
        assert starting.finish() == 0, starting.log()
    finally:
        if starting.process.poll() is None:
            starting.process.kill()
    assert "stopped during start-up" in starting.log(), starting.log()
    assert "serving" not in starting.log()


def test_sigterm_while_the_broker_does_not_answer_aborts_the_start_and_closes_the_connection() -> None:
    """The transport's start waits for a Redis that accepted the connection but never
    answers; SIGTERM cancels the start, the runtime closes its transport (the broker
    sees the connection closed) and the process exits 0."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        silent.settimeout(60)
        starting = Starting(
            WOW_TRANSPORT="redis",
            WOW_REDIS__URL=f"redis://127.0.0.1:{port}/0",
            WOW_REDIS__SOCKET_TIMEOUT="120",
        )
        try:
            connection, _ = silent.accept()  # the runtime is starting: its PING waits
            with connection:
                connection.settimeout(60)
                assert connection.recv(1024)  # the client's first command, never answered
                starting.process.send_signal(signal.SIGTERM)
                assert starting.finish() == 0, starting.log()
                while connection.recv(4096):  # what else it wrote, then the close (or a timeout)
                    pass
        finally:
            if starting.process.poll() is None:
                starting.process.kill()
    log = starting.log()
    assert "start-up interrupted" in log, log
    assert "stopped during start-up cleanly" in log, log
    assert "serving" not in log
