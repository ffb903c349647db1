"""Settings every compensation test runs with: no immediate retry (so a failure goes to
compensation at once) and a scheduler that runs every 50 ms with short backoffs."""

from __future__ import annotations

import pytest

FAST = {
    "WOW_EVENT__RETRY__MAX_RETRIES": "0",
    "WOW_FAILURE_RECORDER": "compensation",
    "WOW_COMPENSATION__SCHEDULER__INTERVAL": "0.05",
    "WOW_COMPENSATION__RETRY__MIN_BACKOFF": "0.05",
    "WOW_COMPENSATION__RETRY__MAX_BACKOFF": "0.2",
    "WOW_COMPENSATION__RETRY__EXECUTION_TIMEOUT": "5",
}


@pytest.fixture
def fast_compensation(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    return dict(FAST)
