"""``wow run`` in a subprocess (signals, ordered stop, exit status) and ``wow demo``."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wow_core.runtime.cli import main

HERE = Path(__file__).parent
REPO = Path(__file__).parents[3]


class Served:
    """A ``wow run`` subprocess whose stderr lines are read on a thread."""

    def __init__(self, target: str, **env: str) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
        environment.update(env)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from wow_core.runtime.cli import main; sys.exit(main())",
                "run",
                target,
            ],
            cwd=HERE,
            env=environment,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._queue.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 90) -> str:
        """Until a line contains ``text``. 90 s: ``wow run``'s start-up (about 1.6 s of CPU)
        took up to 45 s of wall time at a load of 20 on 2 cores (a parallel suite)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} not seen; got:\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 30) -> int:
        code = self.process.wait(timeout)
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        return code

    def index(self, text: str) -> int:
        return next(i for i, line in enumerate(self.lines) if text in line)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_run_serves_until_a_signal_then_stops_in_order_and_exits_zero(signum: signal.Signals) -> None:
    served = Served("serve_app:app", WOW_NATS__PASSWORD="hunter2-secret")
    try:
        served.wait_for("serving served")
        served.process.send_signal(signum)
        assert served.finish() == 0, "\n".join(served.lines)
    finally:
        served.process.kill()
    text = "\n".join(served.lines)
    assert "transport:" in text
    assert "event store: InMemoryEventStore" in text
    assert "plugins: " in text
    assert "setting WOW_RUNTIME__SHUTDOWN_TIMEOUT=30.0" in text
    assert "setting WOW_SERVICE_NAME=wow-service (unused: the app is named 'served')" in text
    assert "setting WOW_NATS__PASSWORD=" in text  # a plugin section, logged...
    assert "hunter2-secret" not in text  # ...with its secret masked
    assert (
        served.index("dispatcher started")
        < served.index("serving served")
        < served.index(f"{signum.name} received")
        < served.index("dispatcher stopping")
        < served.index("flushing copies")
        < served.index("stopped cleanly")
    )


@pytest.mark.slow
def test_a_second_sigint_forces_the_stop() -> None:
    served = Served("serve_app:hanging", WOW_RUNTIME__SHUTDOWN_TIMEOUT="120")
    try:
        served.wait_for("serving hanging")
        served.process.send_signal(signal.SIGINT)
        served.wait_for("dispatcher stopping")
        served.process.send_signal(signal.SIGINT)
        assert served.finish(timeout=20) == 130
    finally:
        served.process.kill()
    assert any("forcing the stop" in line for line in served.lines)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon", "is not 'module:app'"),
        ("no_such_module_xyz:app", "cannot import"),
        ("serve_app:missing", "has no attribute 'missing'"),
        ("serve_app:not_an_app", "is an int, not a wow_core.runtime.app.WowApp"),
    ],
)
def test_run_reports_a_bad_target(
    target: str, message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(HERE)
    assert main(["run", target]) == 2
    assert message in capsys.readouterr().err


def test_the_example_of_a_target_without_a_colon_runs_outside_a_checkout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The example the message gives is the bank app of the installed ``wow-core``, which a
    user can run from any folder, not the checkout's ``examples.bank.app``."""
    assert main(["run", "no_colon"]) == 2
    example = capsys.readouterr().err.rsplit("for example ", 1)[1].split(")", 1)[0]
    completed = subprocess.run(
        [sys.executable, "-I", "-c", f"from wow_core.runtime.serve import load_app; load_app({example!r})"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr


def test_demo_runs_the_bank_and_prints_stages_and_summary(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    for key in [k for k in os.environ if k.startswith("WOW_")]:
        monkeypatch.delenv(key)
    assert main(["demo", "--accounts", "6", "--transfers", "30", "--concurrency", "8"]) == 0
    out = capsys.readouterr().out
    for expected in (
        "Per stage reached",
        "PROCESSED",
        "SENT",
        "INSUFFICIENT_FUNDS",
        "COMMAND_INVALID",
        "COMMAND_UNHANDLED",
        "AGGREGATE_NOT_FOUND",
        "duplicate of version",
        "conserved",
        "latency p50 / p90 / p99 / max",
        "throughput",
    ):
        assert expected in out, expected


def test_demo_refuses_nonsense_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--accounts", "1"]) == 2
    assert "--accounts >= 3" in capsys.readouterr().err


def test_demo_without_the_bank_example_says_so_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installation without wow_core.examples.bank: one message, one ``wow demo:`` prefix."""
    from wow_core.runtime import serve

    monkeypatch.setattr(serve, "BANK", "wow_core.examples.no_such_bank")
    assert main(["demo"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("wow demo: ")
    assert line.count("wow demo") == 1, line
    assert "wow_core.examples.no_such_bank" in line


def test_the_bank_example_of_a_checkout_is_wow_core_examples_bank() -> None:
    """The editable install sees examples/bank as wow_core.examples.bank (one source, one name)."""
    import wow_core.examples.bank.domain as domain

    assert Path(domain.__file__).resolve() == (REPO / "examples/bank/domain.py").resolve()


def test_a_log_format_naming_the_trace_fields_formats_every_line_without_tracing() -> None:
    # `wow run --log-format '... %(trace_id)s ...'`: empty fields where no trace is current
    # (tracing off, or a record outside a span), never a logging error
    script = (
        "import logging\n"
        "from wow_core.runtime.serve import _configure_logging\n"
        "_configure_logging('INFO', '[%(trace_id)s/%(span_id)s] %(name)s: %(message)s')\n"
        "logging.getLogger('redis.client').info('hello')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "[/] redis.client: hello\n"
