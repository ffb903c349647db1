"""``wow send``: its messages start with ``wow send:``, its exit status is the documented
one (0 reached, 1 refused, 2 usage error, 3 timed out, 4 unreachable), and a body is
checked by the service's own rules before anything is sent over a transport."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.accounts import Account
from wow_core import WowApp
from wow_core.runtime.cli import main
from wow_http import bearer_token, every_route

BANK = "tests.wow_http.bank_app:app"


def wow(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["send", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_wrong_aggregate_is_a_usage_error_said_by_wow_send(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = wow(capsys, "account", "Withdraw", "{}", "--transport", BANK)
    assert status == 2
    assert err.startswith("wow send: 'account' is not context.aggregate")


def test_an_app_that_cannot_be_imported_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = wow(capsys, "bank.account", "Withdraw", "{}", "--transport", "nomod:app")
    assert status == 2
    assert err.startswith("wow send: ")
    assert "nomod" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bank.account", "Loan", "{}"], f"wow send: {BANK} has no command 'Loan'"),
        (["bank.vault", "Withdraw", "{}"], f"wow send: {BANK} hosts no aggregate bank.vault"),
        (
            ["bank.account", "Withdraw", '{"amount": "30"}', "--id", "acc-1"],
            "wow send: the Withdraw body is invalid: amount: Input should be a valid integer",
        ),
        (
            ["bank.account", "Open", '{"owner": "bob", "intial": 100}'],
            "wow send: the Open body is invalid: intial: Unexpected keyword argument",
        ),
        (
            ["bank.account", "Withdraw", '{"amount": 1}'],
            "wow send: Withdraw is not a creation command: name its aggregate with --id",
        ),
    ],
    ids=["unknown-command", "unknown-aggregate", "wrong-type", "unknown-field", "no-id"],
)
def test_over_a_transport_what_the_service_would_refuse_exits_1_before_sending(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, out, err = wow(capsys, *args, "--transport", BANK)
    assert status == 1
    assert err.startswith(message)
    assert out == ""


def test_a_body_that_is_not_json_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = wow(capsys, "bank.account", "Deposit", "{amount: 1", "--id", "a", "--transport", BANK)
    assert status == 2
    assert err.startswith("wow send: the body is not well-formed JSON")


def test_the_lax_mode_lets_what_pydantic_converts_through(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOW_COMMAND__STRICT_BODIES", "false")
    status, out, err = wow(
        capsys,
        "bank.account",
        "Deposit",
        '{"amount": "30"}',
        "--id",
        "a",
        "--wait",
        "SENT",
        "--transport",
        BANK,
    )
    assert status == 0, err
    assert '"stage": "SENT"' in out


def test_a_transport_that_cannot_be_reached_exits_4(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOW_TRANSPORT", "redis")
    monkeypatch.setenv("WOW_REDIS__URL", "redis://127.0.0.1:9/0")
    status, _, err = wow(capsys, "bank.account", "Deposit", '{"amount": 1}', "--id", "a", "--transport", BANK)
    assert status == 4
    assert err.startswith("wow send: the transport cannot be reached")


@pytest.mark.asyncio
async def test_over_http_a_refused_token_an_invalid_body_and_a_missing_id_exit_1(
    serve: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    app = WowApp("bank", aggregates=[Account])
    async with serve(app=app, auth=every_route(bearer_token(["t-ops"]))) as served:
        url = served.server.url

        def send(*args: str) -> tuple[int, str, str]:
            return wow(capsys, "bank.account", *args, "--url", url)

        status, out, _ = await asyncio.to_thread(send, "Open", '{"owner": "ada"}', "--token", "t-eve")
        assert (status, '"UNAUTHORIZED"' in out) == (1, True)
        status, out, _ = await asyncio.to_thread(
            send, "Deposit", '{"amount": "30"}', "--id", "a", "--token", "t-ops"
        )
        assert (status, '"COMMAND_INVALID"' in out) == (1, True)
        status, out, err = await asyncio.to_thread(send, "Deposit", '{"amount": 1}', "--token", "t-ops")
        assert (status, '"COMMAND_UNHANDLED"' in out) == (1, True)
        assert "wow send: no --id given" in err
        status, out, _ = await asyncio.to_thread(send, "Fly", "{}", "--id", "a", "--token", "t-ops")
        assert (status, '"COMMAND_UNHANDLED"' in out) == (1, True)
