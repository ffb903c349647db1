"""Waits across processes over NATS: the caller, two journal instances and the reactor
are separate processes; signals travel on each caller's core NATS subject."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.wait_members import local_first, waits_across_processes
from tests.wow_nats.conftest import Names, delete_streams

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize(
    "local", [True, False], ids=["local-first-2-instances", "no-local-first-3-instances"]
)
async def test_every_stage_is_waited_for_from_another_process(
    local: bool, nats_url: str, names: Names, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "nats",
        "WOW_NATS__SERVERS": nats_url,
        "WOW_NATS__STREAM_PREFIX": names.stream_prefix,
        "WOW_NATS__FETCH_TIMEOUT": "0.5",
        "WOW_NATS__FETCH_BATCH": "1",  # spread the commands over every instance
        "WOW_MESSAGING__TOPIC_PREFIX": names.topic_prefix,
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
        **local_first(local),
    }
    try:
        await waits_across_processes(env, journal_dir, monkeypatch, instances=2 if local else 3)
    finally:
        await delete_streams(nats_url, names.stream_prefix)
