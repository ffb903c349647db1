"""One trace across processes over Redis: the caller (this process), the ledger service
and the reactor are separate processes; trace context travels in the stream records."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.wait_members import local_first
from tests.wow_otel.across import one_trace_across_processes
from wow_redis import RedisSettings

pytestmark = [pytest.mark.redis, pytest.mark.slow]


async def test_the_gateway_the_aggregate_and_the_reactor_write_one_trace(
    settings_for: Callable[..., RedisSettings],
    prefix: str,
    redis: Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``redis`` deletes everything under ``prefix`` afterwards."""
    env = {
        **os.environ,
        "WOW_TRANSPORT": "redis",
        "WOW_REDIS__URL": settings_for().url,
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_TEST_JOURNAL_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
        **local_first(True),
    }
    await one_trace_across_processes(env, monkeypatch)
