"""``wow postgres`` as a user runs it (the ``wow`` executable, a subprocess): a failure
is one line on stderr, never a traceback; the DSN is shown with the password masked and
the user name kept, by ``wow postgres`` and ``wow settings`` alike; a wrong combination of
settings stops it with exit status 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.runtime.settings import mask_userinfo

pytestmark = pytest.mark.postgres

WOW = Path(sys.executable).with_name("wow")
FAST_RETRIES = {"WOW_POSTGRES__RETRY_ATTEMPTS": "1", "WOW_POSTGRES__RETRY_BACKOFF": "0.01"}


def _wow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    environment.update(env)
    return subprocess.run(
        [str(WOW), *args], env=environment, capture_output=True, text=True, timeout=120, check=False
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _database(name: str) -> str:
    return POSTGRES_DSN.rpartition("/")[0] + "/" + name


@pytest.mark.parametrize("command", ["migrate", "status"])
def test_an_unreachable_server_is_one_line_and_exit_1(command: str) -> None:
    dsn = f"postgresql://app:hunter2@127.0.0.1:{_free_port()}/test"
    result = _wow("postgres", command, WOW_POSTGRES__DSN=dsn, **FAST_RETRIES)
    assert result.returncode == 1, result.stderr
    line = _one_line(result)
    assert line.startswith(f"wow postgres {command}: PostgreSQL at postgresql://app:***@127.0.0.1:"), line
    assert "connect failed after 2 attempt(s): ConnectionRefusedError" in line
    assert "hunter2" not in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["migrate", "status", "relay"])
def test_a_database_that_does_not_exist_is_one_line_and_exit_1(command: str, schema: str) -> None:
    dsn = _database(f"nodb_{schema}")
    result = _wow("postgres", command, WOW_POSTGRES__DSN=dsn, WOW_POSTGRES__SCHEMA_NAME=schema)
    assert result.returncode == 1, result.stderr
    line = _one_line(result)
    assert line.startswith(f"wow postgres {command}: schema {schema!r} at {dsn}: InvalidCatalogNameError:"), (
        line
    )
    assert f'database "nodb_{schema}" does not exist' in line


def test_debug_prints_the_traceback_too(schema: str) -> None:
    result = _wow("postgres", "migrate", "--debug", WOW_POSTGRES__DSN=_database(f"nodb_{schema}"))
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("wow postgres migrate: schema 'wow' at ")


def test_the_dsn_keeps_its_user_name_and_masks_its_password_everywhere(schema: str) -> None:
    assert mask_userinfo("postgresql://app@db:5432/x") == "postgresql://app@db:5432/x"
    assert mask_userinfo("postgres://app@db/x") == "postgres://app@db/x"
    assert mask_userinfo("postgresql://app:pw@db/x") == "postgresql://app:***@db/x"
    assert mask_userinfo("nats://token@h:4222") == "nats://***@h:4222", "a token stays masked"
    user = POSTGRES_DSN.partition("://")[2].partition("@")[0]
    if not user or ":" in user:
        pytest.skip("the test server's DSN must name a user and no password")
    shown = _wow("settings", WOW_POSTGRES__DSN=POSTGRES_DSN)
    assert f"WOW_POSTGRES__DSN={POSTGRES_DSN}\n" in shown.stdout
    migrated = _wow("postgres", "migrate", WOW_POSTGRES__DSN=POSTGRES_DSN, WOW_POSTGRES__SCHEMA_NAME=schema)
    assert migrated.returncode == 0, migrated.stderr
    assert f"to schema {schema!r} at {POSTGRES_DSN}\n" in migrated.stdout
    secret = _wow("settings", WOW_POSTGRES__DSN="postgresql://app:hunter2@db:5432/x")
    assert "WOW_POSTGRES__DSN=postgresql://app:***@db:5432/x\n" in secret.stdout
    assert "hunter2" not in secret.stdout + secret.stderr


@pytest.mark.parametrize("args", [["postgres", "migrate"], ["run", "wow_core.examples.bank.app:app"]])
def test_a_pool_minimum_above_its_maximum_is_refused_at_start_up(args: list[str]) -> None:
    result = _wow(*args, WOW_POSTGRES__POOL_MIN_SIZE="20", WOW_POSTGRES__POOL_MAX_SIZE="2")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "WOW_POSTGRES__POOL_MIN_SIZE (20) must not be greater than WOW_POSTGRES__POOL_MAX_SIZE (2)"
        in result.stderr
    )


def test_a_relay_whose_transport_does_not_start_is_one_line_and_exit_1() -> None:
    port = _free_port()
    result = _wow(
        "postgres",
        "relay",
        WOW_POSTGRES__DSN=POSTGRES_DSN,
        WOW_TRANSPORT="redis",
        WOW_REDIS__URL=f"redis://127.0.0.1:{port}/0",
    )
    assert result.returncode == 1, result.stderr
    line = _one_line(result)
    assert line.startswith("wow postgres relay: the transport 'redis' did not start: "), line
    assert str(port) in line
