"""``wow worker``: what is refused before the worker connects to anything (exit status 2).
The running worker, its concurrency and its graceful SIGTERM across processes are in
``tests/wow_redis/test_application_worker.py`` and ``tests/wow_kafka/test_application_worker.py``."""

from __future__ import annotations

import pytest

from wow_core.runtime.cli import USAGE_ERROR, main


@pytest.fixture(autouse=True)
def payments_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"payments": "in_memory"}')


def test_a_transport_name_that_is_not_configured_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "tests.application_app:commands", "--transport", "mail"]) == USAGE_ERROR
    assert (
        "--transport 'mail' is not a named transport of WOW_APPLICATION__TRANSPORTS (configured: payments)"
        in (capsys.readouterr().err)
    )


def test_a_transport_plugin_that_is_not_installed_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"payments": "carrier-pigeon"}')
    assert main(["worker", "tests.application_app:commands", "--transport", "payments"]) == USAGE_ERROR
    assert "names the plugin 'carrier-pigeon', which no plugin registers" in capsys.readouterr().err


def test_an_asynchronous_command_naming_an_unconfigured_transport_is_refused_at_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = "tests.wow_core.application.cli_apps:misconfigured"
    assert main(["worker", target, "--transport", "payments"]) == USAGE_ERROR
    assert "no transport named 'mail' is configured" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "tests.wow_core.application.cli_apps:not_commands",
            "is a str, not a wow_core.application.ApplicationCommands",
        ),
        ("tests.wow_core.application.cli_apps:absent", "has no attribute 'absent'"),
        ("no_such_module:commands", "cannot import 'no_such_module'"),
        ("nocolon", "is not 'module:attribute'"),
    ],
)
def test_a_target_that_is_not_application_commands_is_refused(
    target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", target, "--transport", "payments"]) == USAGE_ERROR
    assert message in capsys.readouterr().err


def test_a_concurrency_out_of_bounds_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["worker", "tests.application_app:commands", "--transport", "payments", "--concurrency", "0"])
        == 2
    )
    assert "--concurrency is 1 to 1024" in capsys.readouterr().err
