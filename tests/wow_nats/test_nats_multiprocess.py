"""Two ``wow run`` processes of one new service start together on NATS JetStream.

Commands are SENT (the publish acknowledged) while the members are still starting,
before either created the group's durable consumer. Every one of them is processed: a
new group's consumer starts at the first retained record of its topic, and two members
creating it at once end up sharing one consumer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.service_members import members_started_while_sending
from tests.wow_kafka.journal_app import Record
from tests.wow_nats.conftest import MakeTransport, Names
from wow_core.model import BodyTypeRegistry, MessageCodec
from wow_core.transport import DefaultTopicNaming
from wow_core.transport.bus import TransportCommandBus
from wow_nats import NatsSettings, NatsTransport

pytestmark = [pytest.mark.nats, pytest.mark.slow]

START = re.compile(r"NATS receiver of group '[^']+': (\S+) starts .*\(([a-z ]+)\)$")


async def test_members_creating_a_new_group_together_skip_nothing_sent_while_they_start(
    make_transport: MakeTransport, names: Names, nats_url: str, tmp_path: Path
) -> None:
    """``make_transport`` (unused otherwise) deletes the test's streams afterwards."""
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "nats",
        "WOW_SERVICE_NAME": f"journal-{names.ns}",  # a new service: a new group
        "WOW_NATS__SERVERS": nats_url,
        "WOW_NATS__STREAM_PREFIX": names.stream_prefix,
        "WOW_NATS__FETCH_TIMEOUT": "0.5",
        "WOW_MESSAGING__TOPIC_PREFIX": names.topic_prefix,
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
    }
    settings = NatsSettings(servers=[nats_url], stream_prefix=names.stream_prefix)
    naming = DefaultTopicNaming(names.topic_prefix)  # the members' naming
    client = NatsTransport(settings, naming=naming, topic_prefix=names.topic_prefix)
    bus = TransportCommandBus(client, MessageCodec(BodyTypeRegistry([Record])))
    try:
        reasons = await members_started_while_sending(bus, env, journal_dir, START)
    finally:
        await bus.close()
        await client.close()
    logged = {why for member in reasons for why in member}
    # one member created the consumer at the beginning; the other found it, or sent the
    # same configuration, which JetStream created once
    assert "new group at the beginning" in logged
    assert logged <= {"new group at the beginning", "existing group"}, logged
