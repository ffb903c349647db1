"""One trace across processes over Kafka: the caller (this process), the ledger service
and the reactor are separate processes; trace context travels in the records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.wait_members import local_first
from tests.wow_kafka.conftest import test_settings
from tests.wow_otel.across import one_trace_across_processes

pytestmark = [pytest.mark.slow]


async def test_the_gateway_the_aggregate_and_the_reactor_write_one_trace(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = test_settings(kafka_bootstrap)
    env = {
        **os.environ,
        "WOW_TRANSPORT": "kafka",
        "WOW_KAFKA__BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "WOW_KAFKA__TOPIC_PREFIX": settings.topic_prefix or "",
        "WOW_KAFKA__SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "50",
        "WOW_KAFKA__AUTO_OFFSET_RESET": "earliest",
        "WOW_TEST_JOURNAL_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
        **local_first(True),
    }
    await one_trace_across_processes(env, monkeypatch)
