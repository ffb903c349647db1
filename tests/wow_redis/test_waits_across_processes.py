"""Waits across processes over Redis: the caller, two journal instances and the reactor
are separate processes; signals travel on each caller's pub/sub channel."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.wait_members import local_first, waits_across_processes
from wow_redis import RedisSettings

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.mark.parametrize(
    "local", [True, False], ids=["local-first-2-instances", "no-local-first-3-instances"]
)
async def test_every_stage_is_waited_for_from_another_process(
    local: bool,
    settings_for: Callable[..., RedisSettings],
    prefix: str,
    redis: Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``redis`` deletes everything under ``prefix`` afterwards."""
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "redis",
        "WOW_REDIS__URL": settings_for().url,
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_REDIS__BATCH_SIZE": "1",  # spread the commands over every instance
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
        **local_first(local),
    }
    await waits_across_processes(env, journal_dir, monkeypatch, instances=2 if local else 3)
