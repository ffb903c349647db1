"""What a user meets when something is wrong: one message on stderr, a non-zero exit, no
traceback. Wrong settings exit 2; a broker or store that does not answer exits 1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.services import free_port
from wow_core.plugins import hookimpl, load_plugins
from wow_core.runtime.cli import main
from wow_core.runtime.runtime import Lifecycle, RuntimeState, StartError

WOW = Path(sys.executable).with_name("wow")
REPO = Path(__file__).parents[3]


def wow(*args: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess[str]:
    """The console script from the repository root, with only ``env`` as WOW_* settings."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    environment.update(env)
    return subprocess.run(
        [str(WOW), *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- wrong settings: exit 2, one message naming the variable ------------------------------

WRONG_VALUES = [
    ("WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED", "maybe", "accepted: true or false"),
    ("WOW_TRANSPORT", "nope", "no transport plugin has that name; accepted: in_memory"),
    ("WOW_RUNTIME__SHUTDOWN_TIMEOUT", "-1", "accepted: a value greater than 0"),
]


@pytest.mark.parametrize("command", [["settings"], ["demo"], ["run", "examples.bank.app:app"]])
@pytest.mark.parametrize(("variable", "value", "accepted"), WRONG_VALUES)
def test_a_wrong_value_is_one_message_and_exit_2_for_every_command(
    command: list[str],
    variable: str,
    value: str,
    accepted: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv(variable, value)
    assert main(command) == 2
    captured = capsys.readouterr()
    assert f"{variable}={value!r} is not accepted" in captured.err
    assert accepted in captured.err
    assert captured.err.startswith(f"wow {command[0]}: invalid settings:")
    assert "Traceback" not in captured.err
    assert captured.out == ""


# -- a broker or store that is down: exit 1, one message naming what did not start ---------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("settings", "part", "detail"),
    [
        (
            {"WOW_TRANSPORT": "redis", "WOW_REDIS__URL": "redis://127.0.0.1:{port}"},
            "transport 'redis'",
            "(WOW_REDIS__URL, WOW_REDIS__SOCKET_TIMEOUT)",
        ),
        (
            {
                "WOW_TRANSPORT": "nats",
                "WOW_NATS__SERVERS": '["nats://127.0.0.1:{port}"]',
                "WOW_NATS__CONNECT_TIMEOUT": "1",
            },
            "transport 'nats'",
            "WOW_NATS__SERVERS",
        ),
        (
            {"WOW_TRANSPORT": "kafka", "WOW_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:{port}"},
            "transport 'kafka'",
            "",
        ),
        (
            {"WOW_EVENTSOURCING__STORE": "redis", "WOW_REDIS__URL": "redis://127.0.0.1:{port}"},
            "event store",
            "Redis did not answer",
        ),
    ],
    ids=["redis", "nats", "kafka", "redis-event-store"],
)
@pytest.mark.parametrize("command", [["demo"], ["run", "examples.bank.app:app"]], ids=["demo", "run"])
def test_a_broker_that_is_down_is_one_message_and_exit_1(
    settings: dict[str, str], part: str, detail: str, command: list[str]
) -> None:
    port = free_port()
    result = wow(*command, **{k: v.format(port=port) for k, v in settings.items()})
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    message = f"wow {command[0]}: the {part} did not start: "
    lines = [line for line in result.stderr.splitlines() if line.startswith(message)]
    assert len(lines) == 1, result.stderr
    assert str(port) in lines[0]
    assert detail in lines[0]
    assert "`wow settings`" in lines[0]
    if command[0] == "demo" and part != "transport 'kafka'":
        # aiokafka logs its own "Unable connect" line; redis, NATS and the stores do not.
        assert result.stderr.splitlines() == lines


# -- the runtime: StartError names the part, chains the cause, stops what started ----------


class _Part:
    def __init__(self, log: list[str], name: str, fail: bool = False) -> None:
        self.log = log
        self.name = name
        self.fail = fail

    async def start(self) -> None:
        if self.fail:
            raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
        self.log.append(f"start {self.name}")

    async def close(self) -> None:
        self.log.append(f"close {self.name}")


async def test_a_transport_that_does_not_start_raises_start_error_after_closing_what_started() -> None:
    log: list[str] = []
    lifecycle = Lifecycle(shutdown_timeout=5)
    store = _Part(log, "store")
    lifecycle.add_store(store, "event store")
    lifecycle.add_closeable(store)
    transport = _Part(log, "redis", fail=True)
    lifecycle.add_transport(transport)
    lifecycle.add_closeable(transport)
    with pytest.raises(StartError) as raised:
        await lifecycle.start()
    assert raised.value.part == "transport 'redis'"
    assert str(raised.value) == (
        "the transport 'redis' did not start: [Errno 111] Connect call failed ('127.0.0.1', 1)"
    )
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)
    assert log == ["start store", "close redis", "close store"]
    assert lifecycle.state is RuntimeState.STOPPED


async def test_a_store_that_does_not_answer_stops_the_start_before_the_transports() -> None:
    log: list[str] = []
    lifecycle = Lifecycle(shutdown_timeout=5)
    lifecycle.add_store(_Part(log, "store", fail=True), "event store")
    lifecycle.add_transport(_Part(log, "transport"))
    with pytest.raises(StartError, match=r"^the event store did not start: "):
        await lifecycle.start()
    assert log == []


async def test_a_store_without_start_is_not_started() -> None:
    lifecycle = Lifecycle(shutdown_timeout=5)
    lifecycle.add_store(object(), "event store")
    await lifecycle.start()
    assert await lifecycle.stop()


# -- the demo and the pipe ----------------------------------------------------------------


def test_a_demo_that_cannot_open_accounts_says_so_in_one_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    assert main(["demo", "--accounts", "3", "--transfers", "0", "--timeout", "0.000001"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = captured.err.splitlines()
    assert line.startswith("wow demo: only 0 of 3 accounts could be opened (the demo needs 3)")
    assert "TIMEOUT" in line


class _RefusingMetricsPlugin:
    """A metrics backend whose factory refuses its configuration with a plain ValueError, as
    a plugin reading variables of its own does (wow-otel's ``OTEL_METRICS_EXPORTER``)."""

    @hookimpl
    def register_metrics(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        def refuse(*_: Any) -> Any:
            raise ValueError("PROBE_EXPORTER='statsd' is not accepted: otlp, none")

        register("refusing", refuse)


def test_a_plugin_that_refuses_its_configuration_stops_the_demo_in_one_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("WOW_METRICS", "refusing")
    plugins = load_plugins(extra=[("refusing", _RefusingMetricsPlugin())])
    assert main(["demo", "--accounts", "3", "--transfers", "0"], plugins=plugins) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = captured.err.splitlines()
    # the plugin's error, named as such (not the demo's or the app's)
    assert line.startswith("wow demo: plugin 'refusing' of (registered directly): the metrics factory"), line
    assert line.endswith("ValueError: PROBE_EXPORTER='statsd' is not accepted: otlp, none"), line


def test_the_demo_lists_stages_in_the_order_they_are_reached(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    assert main(["demo", "--accounts", "4", "--transfers", "5", "--concurrency", "4"]) == 0
    out = capsys.readouterr().out
    table = out.split("Per stage reached")[1].split("Per command")[0]
    stages = [line.split()[0] for line in table.splitlines()[3:] if line.strip()]
    order = ["SENT", "PROCESSED", "SNAPSHOT", "PROJECTED", "EVENT_HANDLED", "SAGA_HANDLED"]
    assert stages == [stage for stage in order if stage in stages]
    assert stages[:2] == ["SENT", "PROCESSED"]


def test_a_closed_pipe_on_stdout_ends_quietly(tmp_path: Path) -> None:
    """``wow settings | head -1``: the reader leaves; no BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        result = subprocess.run(
            [str(WOW), "settings"],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith("WOW_")},
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 0


def test_every_wrong_selection_is_reported_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WOW_METRICS", "statsd")
    monkeypatch.setenv("WOW_FAILURE_RECORDER", "bogus")
    assert main(["settings"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "wow settings: invalid settings:",
        "  WOW_FAILURE_RECORDER='bogus' is not accepted: no failure recorder plugin has that name; "
        "accepted: compensation, none",
        "  WOW_METRICS='statsd' is not accepted: no metrics plugin has that name; "
        "accepted: in_memory, noop, otel",
    ]


@pytest.mark.parametrize(
    ("target", "hint"),
    [
        ("examples/bank/app.py:app", "examples.bank.app:app"),
        ("./examples/bank/app:app", "examples.bank.app:app"),
        ("app.py:app", "app:app"),
    ],
)
def test_a_file_path_for_wow_run_names_the_dotted_module(
    target: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", target]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("wow run: ")
    assert "is a file path; name the module with dots: " + hint in line


async def test_the_demo_runs_twice_on_one_event_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """A durable store keeps request ids: a second run must not meet the first run's."""
    monkeypatch.syspath_prepend(str(REPO))
    from examples.bank.app import app
    from examples.bank.demo import run_demo

    from wow_core.runtime.settings import WowSettings

    runtime = app.runtime(WowSettings())
    async with runtime:
        for _ in range(2):
            report = await run_demo(runtime, accounts=4, transfers=3, concurrency=4)
            assert report.conserved, (report.expected_total, report.actual_total)
            assert "first -> version " in report.duplicate_line
            assert "second -> duplicate of version" in report.duplicate_line


def test_the_output_of_wow_settings_reads_back_as_a_dotenv_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``wow settings > .env`` is a valid start: unset optional values print as null."""
    monkeypatch.chdir(tmp_path)
    assert main(["settings"]) == 0
    first = capsys.readouterr().out
    assert "=null\n" in first  # optional values that are unset (the plugin sections have some)
    (tmp_path / ".env").write_text(first)
    assert main(["settings"]) == 0
    assert capsys.readouterr().out == first
