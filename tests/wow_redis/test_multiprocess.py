"""Two ``wow run`` processes of one new service start together on Redis Streams.

Commands are SENT (the XADD completed) while the members are still starting, before
either created the service's consumer group. Every one of them is processed: a group
that does not exist yet starts at the stream's first retained entry, and the member
that finds the group already created (``BUSYGROUP``) reuses it unchanged.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.service_members import members_started_while_sending
from tests.wow_kafka.journal_app import Record
from wow_core.model import BodyTypeRegistry, MessageCodec
from wow_core.transport.bus import TransportCommandBus
from wow_redis import RedisSettings, RedisStreamTransport

pytestmark = [pytest.mark.redis, pytest.mark.slow]

START = re.compile(r"Redis receiver \S+ of group '[^']+': stream (\S+) starts .*\(([a-z ]+)\)$")


async def test_members_creating_a_new_group_together_skip_nothing_sent_while_they_start(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis, tmp_path: Path
) -> None:
    """``redis`` deletes everything under ``prefix`` afterwards."""
    settings = settings_for()
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "redis",
        "WOW_SERVICE_NAME": f"journal-{uuid.uuid4().hex[:8]}",  # a new service: a new group
        "WOW_REDIS__URL": settings.url,
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
    }
    client = RedisStreamTransport(settings)
    bus = TransportCommandBus(client, MessageCodec(BodyTypeRegistry([Record])))
    try:
        reasons = await members_started_while_sending(bus, env, journal_dir, START)
    finally:
        await bus.close()
        await client.close()
    # exactly one member created the group, the other found it (BUSYGROUP); both said so
    assert sorted(why for logged in reasons for why in logged) == [
        "existing group",
        "new group at the beginning",
    ]
