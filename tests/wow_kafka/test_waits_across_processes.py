"""Waits across processes over Kafka: the caller, two journal instances and the reactor
are separate processes; signals travel on the caller service's signal topic, on the
caller's partition, keyed by its process id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.wait_members import local_first, waits_across_processes
from tests.wow_kafka.conftest import test_settings

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize(
    "local", [True, False], ids=["local-first-2-instances", "no-local-first-3-instances"]
)
async def test_every_stage_is_waited_for_from_another_process(
    local: bool, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = test_settings(kafka_bootstrap)
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "kafka",
        "WOW_KAFKA__BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "WOW_KAFKA__TOPIC_PREFIX": settings.topic_prefix or "",
        "WOW_KAFKA__PARTITIONS": "6",  # every journal instance gets partitions
        "WOW_KAFKA__SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "50",
        "WOW_KAFKA__AUTO_OFFSET_RESET": "earliest",
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
        **local_first(local),
    }
    await waits_across_processes(env, journal_dir, monkeypatch, instances=2 if local else 3)
