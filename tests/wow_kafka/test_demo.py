"""``WOW_TRANSPORT=kafka wow demo`` runs the bank demo over Kafka, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_runs_over_kafka(kafka_bootstrap: str) -> None:
    env = {
        **os.environ,
        "WOW_TRANSPORT": "kafka",
        "WOW_KAFKA__BOOTSTRAP_SERVERS": kafka_bootstrap,
        "WOW_KAFKA__TOPIC_PREFIX": f"demo{uuid.uuid4().hex[:8]}.",
        "WOW_KAFKA__SESSION_TIMEOUT_MS": os.environ.get("WOW_TEST_KAFKA_SESSION_TIMEOUT_MS", "3000"),
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "20",
    }
    result = subprocess.run(
        [str(Path(sys.executable).parent / "wow"), "demo", "--accounts", "10", "--transfers", "60"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "transport kafka" in result.stdout
    assert "conserved" in result.stdout
    assert "Traceback" not in result.stderr
