"""A service in another process, over Kafka, whose event store (a Redis server of the
test's own) is down while commands arrive: their processing fails and the receiver
releases them. They must be processed within seconds of the store's return, by the same
member, not only after a rebalance or a restart (which is all Kafka would do alone)."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service_members import Member
from tests.wait_members import caller, record, serving
from tests.wow_kafka.conftest import test_settings
from tests.wow_redis.own_server import OwnServer, running_server
from wow_core.command import CommandWait
from wow_core.runtime.runtime import WowRuntime
from wow_core.testing import eventually

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

OUTAGE = 2.0
"""Seconds the store stays down once the commands failed."""


@pytest.fixture
def store_server() -> Iterator[OwnServer]:
    with running_server("wow-kafka-release-") as made:
        yield made


async def test_commands_that_failed_in_a_store_outage_in_another_process_are_processed_seconds_after_it(
    kafka_bootstrap: str, store_server: OwnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = test_settings(kafka_bootstrap)
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "kafka",
        "WOW_KAFKA__BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "WOW_KAFKA__TOPIC_PREFIX": settings.topic_prefix or "",
        "WOW_KAFKA__PARTITIONS": "3",
        "WOW_KAFKA__SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "50",
        "WOW_KAFKA__RELEASE_DELAY_MS": "500",
        "WOW_KAFKA__RELEASE_DELAY_MAX_MS": "2000",
        "WOW_EVENTSOURCING__STORE": "redis",
        "WOW_REDIS__URL": store_server.url,
        "WOW_REDIS__KEY_PREFIX": f"release:{uuid.uuid4().hex[:8]}:",
        "WOW_REDIS__SOCKET_TIMEOUT": "2",
        "WOW_REDIS__RECONNECT_BACKOFF_MAX": "0.5",
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": "false",
        "WOW_SERVICE_NAME": f"journal-{uuid.uuid4().hex[:8]}",
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
    }
    run = uuid.uuid4().hex[:6]
    member = Member("journal", env)
    runtime: WowRuntime | None = None
    try:
        await serving(member)
        runtime = await caller(env, monkeypatch)
        keys = [f"o-{run}-{n}" for n in range(10)]
        store_server.kill()
        for key in keys:
            sent = await runtime.gateway.send_and_wait(record(key), CommandWait.sent(), timeout=10)
            assert sent.error_code == "", sent
        failed = re.compile(r"command record \S+ to \S+@o-" + run + r"-\d+ failed")

        def processing_failed() -> bool:
            return len({m.group(0) for m in map(failed.search, list(member.lines)) if m}) >= 3

        await asyncio.to_thread(member.wait_for, processing_failed, 30)
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(store_server.start)
        back = asyncio.get_running_loop().time()
        store = runtime.event_store
        aggregate_ids = [record(key).aggregate_id for key in keys]

        async def all_appended() -> bool:
            versions = await asyncio.gather(*(store.last_version(a) for a in aggregate_ids))
            return all(version == 1 for version in versions)

        await eventually(all_appended, timeout=30, what="every command appended once after the outage")
        took = asyncio.get_running_loop().time() - back
        assert took < 20, f"{took:.1f}s: within seconds of the store's return"
        assert member.process.poll() is None, "the same member, no restart"
        assert not any("assigned" in line and "revoked" in line for line in member.lines)
        print(f"released during the outage, all {len(keys)} appended {took:.2f}s after the store came back")
        assert member.stop() == 0
    finally:
        if runtime is not None:
            await runtime.stop()
        member.stop()
