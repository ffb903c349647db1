from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.wow_core.runtime import probe_plugin
from wow_core.plugins import PluginRegistry, hookimpl, load_plugins
from wow_core.runtime.cli import Command, Invocation, main

WOW = Path(sys.executable).with_name("wow")


@pytest.fixture
def plugins() -> PluginRegistry:
    return load_plugins(extra=[("probe", probe_plugin)])


def test_help_lists_the_commands_and_where_settings_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("plugins", "settings", "demo"):
        assert command in out
    assert "WOW_" in out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: wow" in capsys.readouterr().err


def test_plugins_lists_kind_name_plugin_distribution_and_version(
    capsys: pytest.CaptureFixture[str], plugins: PluginRegistry
) -> None:
    assert main(["plugins"], plugins=plugins) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["transport", "in_memory", "core", "wow-core", "0.1.0"] for line in lines)
    assert any(line.split()[:3] == ["transport", "probe", "probe"] for line in lines)
    assert any(line.split() == ["command", "settings", "core", "wow-core", "0.1.0"] for line in lines)


def test_plugins_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    distributions = {p["plugin"]: p["distribution"] for p in document["plugins"]}
    assert distributions["core"] == "wow-core"
    assert distributions["kafka"] == "wow-kafka"
    assert {
        "kind": "metrics",
        "name": "in_memory",
        "plugin": "core",
        "distribution": "wow-core",
        "version": "0.1.0",
    } in document["registrations"]


def test_settings_prints_the_effective_values_and_masks_secrets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], plugins: PluginRegistry
) -> None:
    monkeypatch.setenv("WOW_EVENT__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK", "77")
    monkeypatch.setenv("WOW_PROBE__TOKEN", "hunter2")
    monkeypatch.setenv("WOW_PROBE__PORT", "7443")
    assert main(["settings"], plugins=plugins) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "WOW_EVENT__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK=77" in lines
    assert "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED=true" in lines
    assert "WOW_TRANSPORT=in_memory" in lines
    assert "WOW_PROBE__PORT=7443" in lines
    assert "WOW_PROBE__TOKEN=**********" in lines
    assert 'WOW_PROBE__HOSTS=["a"]' in lines
    assert "hunter2" not in out


def test_settings_as_json_masks_secrets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], plugins: PluginRegistry
) -> None:
    monkeypatch.setenv("WOW_PROBE__TOKEN", "hunter2")
    assert main(["settings", "--json"], plugins=plugins) == 0
    out = capsys.readouterr().out
    document = json.loads(out)
    assert document["event"]["ack_on_unrecorded_failure"] is True
    assert document["plugin_sections"]["probe"]["token"] == "**********"
    assert "hunter2" not in out


@pytest.mark.parametrize("command", ["settings", "demo"])
def test_a_settings_error_is_one_message_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    monkeypatch.setenv("WOW_TRANSPORT", "carrier-pigeon")
    assert main([command]) == 2
    captured = capsys.readouterr()
    assert "WOW_TRANSPORT='carrier-pigeon' is not accepted" in captured.err
    assert "accepted: in_memory" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_the_console_script_exits_2_without_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(WOW), "settings"],
        env={"WOW_RUNTIME__SHUTDOWN_TIMEOUT": "never", "PATH": ""},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "WOW_RUNTIME__SHUTDOWN_TIMEOUT='never' is not accepted" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_console_script_lists_the_plugins(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(WOW), "plugins"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False, env={}
    )
    assert result.returncode == 0, result.stderr
    assert "wow-core" in result.stdout


class _Greeting:
    @hookimpl
    def register_commands(self, register: Callable[[str, Command], None]) -> None:
        def configure(parser: argparse.ArgumentParser) -> None:
            parser.add_argument("who")

        def run(invocation: Invocation) -> int:
            invocation.out.write(f"hello {invocation.args.who}\n")
            return 3

        register("greet", Command(help="say hello", run=run, configure=configure))


def test_a_plugin_adds_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    plugins = load_plugins(extra=[("greeting", _Greeting())])
    assert main(["greet", "world"], plugins=plugins) == 3
    assert capsys.readouterr().out == "hello world\n"


class _BrokenCommand:
    @hookimpl
    def register_commands(self, register: Callable[[str, object], None]) -> None:
        register("broken", "not a command")


def test_a_command_that_is_not_a_command_names_its_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"], plugins=load_plugins(extra=[("bad", _BrokenCommand())])) == 2
    err = capsys.readouterr().err
    assert "plugin 'bad'" in err
    assert "'broken'" in err
