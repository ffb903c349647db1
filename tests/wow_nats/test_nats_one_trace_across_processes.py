"""One trace across processes over NATS JetStream: the caller (this process), the ledger
service and the reactor are separate processes; trace context travels in the messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.wait_members import local_first
from tests.wow_nats.conftest import Names, delete_streams
from tests.wow_otel.across import one_trace_across_processes

pytestmark = [pytest.mark.slow]


async def test_the_gateway_the_aggregate_and_the_reactor_write_one_trace(
    nats_url: str, names: Names, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        **os.environ,
        "WOW_TRANSPORT": "nats",
        "WOW_NATS__SERVERS": nats_url,
        "WOW_NATS__STREAM_PREFIX": names.stream_prefix,
        "WOW_NATS__FETCH_TIMEOUT": "0.5",
        "WOW_MESSAGING__TOPIC_PREFIX": names.topic_prefix,
        "WOW_TEST_JOURNAL_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
        **local_first(True),
    }
    try:
        await one_trace_across_processes(env, monkeypatch)
    finally:
        await delete_streams(nats_url, names.stream_prefix)
