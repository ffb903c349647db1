"""Credentials inside URL-valued settings never reach the output (issue 11, item 10).

``wow settings`` (lines and JSON) and ``wow run`` (its INFO start-up log, its stop) run
as subprocesses, as a user runs them; their whole output is searched for the secrets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wow_core.runtime.settings import SettingsError, WowSettings, mask_userinfo

from .test_serve import Served

WOW = Path(sys.executable).with_name("wow")
SECRETS = ("s3cret-redis", "s3cret-nats", "tok3n-nats", "s3cret-kafka")
CREDENTIAL_URLS = {
    "WOW_REDIS__URL": "redis://:s3cret-redis@127.0.0.1:6379/0",
    "WOW_NATS__SERVERS": "nats://alice:s3cret-nats@127.0.0.1:4222,tls://tok3n-nats@127.0.0.1:4223",
    "WOW_KAFKA__BOOTSTRAP_SERVERS": "sasl-user:s3cret-kafka@127.0.0.1:9092",
}


def _wow(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    environment.update(CREDENTIAL_URLS)
    return subprocess.run(
        [str(WOW), *args], env=environment, capture_output=True, text=True, timeout=90, check=False
    )


def _leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.mark.parametrize("args", [["settings"], ["settings", "--json"]], ids=["lines", "json"])
def test_wow_settings_masks_url_credentials(args: list[str]) -> None:
    result = _wow(*args)
    assert result.returncode == 0, result.stderr
    assert _leaked(result.stdout + result.stderr) == []
    assert "redis://:***@127.0.0.1:6379/0" in result.stdout
    assert "nats://alice:***@127.0.0.1:4222" in result.stdout
    assert "tls://***@127.0.0.1:4223" in result.stdout
    assert "sasl-user:***@127.0.0.1:9092" in result.stdout


@pytest.mark.slow
def test_wow_run_logs_settings_with_url_credentials_masked() -> None:
    served = Served("serve_app:app", **CREDENTIAL_URLS)
    try:
        served.wait_for("serving served")
        served.process.send_signal(signal.SIGINT)
        assert served.finish() == 0, "\n".join(served.lines)
    finally:
        served.process.kill()
    text = "\n".join(served.lines)
    assert "setting WOW_REDIS__URL=redis://:***@127.0.0.1:6379/0" in text
    assert _leaked(text) == []


def test_a_refused_url_is_named_with_its_credentials_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    from wow_core.plugins import load_plugins

    monkeypatch.setenv("WOW_REDIS__URL", "http://bob:s3cret-redis@127.0.0.1")
    with pytest.raises(SettingsError) as raised:
        WowSettings.load().section("redis", load_plugins().get("settings", "redis").value)
    assert "WOW_REDIS__URL='http://bob:***@127.0.0.1' is not accepted" in str(raised.value)
    assert _leaked(str(raised.value)) == []


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:p@ss@h", "redis://user:***@h"),
        ("nats://token@h:4222", "nats://***@h:4222"),
        ("nats://a:b@h1,nats://c:d@h2", "nats://a:***@h1,nats://c:***@h2"),
        ("u:p@broker:9092, broker2:9092", "u:***@broker:9092, broker2:9092"),
        ("SASL_SSL://u:p@broker:9093", "SASL_SSL://u:***@broker:9093"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("ops@example.com", "ops@example.com"),
        ("setting WOW_REDIS__URL=redis://:pw@h/0", "setting WOW_REDIS__URL=redis://:***@h/0"),
        ('["nats://a:b@h1", "nats://h2"]', '["nats://a:***@h1", "nats://h2"]'),
    ],
)
def test_mask_userinfo(text: str, masked: str) -> None:
    assert mask_userinfo(text) == masked
    assert mask_userinfo(masked) == masked
    assert mask_userinfo([text, {"k": text}]) == [masked, {"k": masked}]
