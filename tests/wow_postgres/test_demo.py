"""``wow demo`` runs unchanged over PostgreSQL: the transport, the event store and the
snapshot repository all ``postgres``, in one schema of this test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.runtime.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).parents[2]


def test_the_demo_runs_over_the_postgres_transport_and_stores(
    schema: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    for key in [k for k in os.environ if k.startswith("WOW_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("WOW_TRANSPORT", "postgres")
    monkeypatch.setenv("WOW_EVENTSOURCING__STORE", "postgres")
    monkeypatch.setenv("WOW_EVENTSOURCING__SNAPSHOT", "postgres")
    monkeypatch.setenv("WOW_POSTGRES__DSN", POSTGRES_DSN)
    monkeypatch.setenv("WOW_POSTGRES__SCHEMA_NAME", schema)
    monkeypatch.setenv("WOW_POSTGRES__POLL_INTERVAL", "0.5")
    assert main(["demo", "--accounts", "4", "--transfers", "8", "--concurrency", "4"]) == 0
    out = capsys.readouterr().out
    assert "transport postgres" in out
    assert "conserved" in out
