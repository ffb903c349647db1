"""What a receiver reads from a JetStream ack subject: the same as nats-py's ``Msg.metadata``."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from wow_nats.receiver import ack_reply_fields

V1 = "$JS.ACK.ORDERS.grp.3.1042.77.1700000000123456789.5"
V2 = "$JS.ACK._.ACCHASH.ORDERS.grp.2.99.12.1700000000987654321.0.r4nd0m"
V2_SHORT = "$JS.ACK.hub.ACCHASH.ORDERS.grp.1.7.7.1700000001000000000.3"


@pytest.mark.parametrize("reply", [V1, V2, V2_SHORT], ids=["v1", "v2", "v2-without-random"])
def test_the_fields_are_those_of_nats_py_metadata(reply: str) -> None:
    meta = Msg.Metadata._from_reply(reply)
    stream, deliveries, sequence, stored_ns = ack_reply_fields(reply) or ("", 0, 0, 0)
    assert (stream, deliveries, sequence) == (meta.stream, meta.num_delivered, meta.sequence.stream)
    assert stored_ns // 1_000_000 == int(meta.timestamp.timestamp() * 1000)


@pytest.mark.parametrize(
    "reply",
    [None, "", "_INBOX.abc", "$JS.ACK", "$JS.ACK.a.b.c", "$JS.NAK.S.c.1.2.3.4.5", "$JS.ACK.S.c.x.2.3.4.5"],
    ids=["none", "empty", "inbox", "prefix-only", "too-short", "not-ack", "not-a-number"],
)
def test_a_subject_that_is_not_a_jetstream_ack_is_none(reply: str | None) -> None:
    assert ack_reply_fields(reply) is None
