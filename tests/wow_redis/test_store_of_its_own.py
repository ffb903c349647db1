"""``wow run`` on a shared transport with the in-memory event store warns, naming the fix.

Two members of one service over Redis, each with its own in-memory store, share the
command group but not the aggregates: a command taken by the member that did not create
its aggregate is refused with ``AGGREGATE_NOT_FOUND``. Nothing connects here: the warning
is part of the start-up log of ``wow run`` (:func:`log_startup`), before it starts.
"""

from __future__ import annotations

import logging

import pytest

from tests.accounts import Account, Open
from wow_core.plugins import load_plugins
from wow_core.runtime.app import WowApp
from wow_core.runtime.serve import log_startup
from wow_core.runtime.settings import WowSettings

WARNING = "with the in-memory event store"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and WARNING in r.getMessage()
    ]


def _build(monkeypatch: pytest.MonkeyPatch, app: WowApp, **env: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    log_startup(app.runtime(WowSettings.load()), load_plugins())


def test_a_service_over_redis_with_the_in_memory_store_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _build(monkeypatch, WowApp("bank", aggregates=[Account]), WOW_TRANSPORT="redis")
    [warning] = _warnings(caplog)
    assert "transport redis with the in-memory event store" in warning
    assert "command group bank.command do not share aggregates" in warning
    assert "AGGREGATE_NOT_FOUND" in warning
    assert "set WOW_EVENTSOURCING__STORE and WOW_EVENTSOURCING__SNAPSHOT" in warning
    assert "redis" in warning.rsplit("installed:", 1)[1]


@pytest.mark.parametrize(
    ("app", "env"),
    [
        (
            WowApp("bank", aggregates=[Account]),
            {"WOW_TRANSPORT": "redis", "WOW_EVENTSOURCING__STORE": "redis"},
        ),
        (WowApp("bank", aggregates=[Account]), {"WOW_TRANSPORT": "in_memory"}),
        (WowApp("", body_types=[Open]), {"WOW_TRANSPORT": "redis"}),  # a caller hosts no aggregate
    ],
    ids=["shared-store", "in-memory-transport", "caller"],
)
def test_no_warning_when_the_members_share_the_store_or_there_is_no_group(
    app: WowApp, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _build(monkeypatch, app, **env)
    assert _warnings(caplog) == []
