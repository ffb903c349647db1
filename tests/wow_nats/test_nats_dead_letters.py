"""Poison records, garbage records and the dead-letter subject ``<topic>.dlq``."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.aio.msg import Msg

from tests.wow_nats.conftest import MakeTransport, Names
from tests.wow_nats.support import message, next_record, opened
from wow_core.messaging import MessageSubscription
from wow_core.metrics import InMemoryMetrics
from wow_core.model import NamedAggregate
from wow_core.testing.support import command, conformance_codec
from wow_core.transport import DeadLetterReason, DefaultTopicNaming
from wow_core.transport.bus import TransportCommandBus

pytestmark = pytest.mark.nats


async def dead_letters(js: nats.js.JetStreamContext, stream: str, topic: str, count: int) -> list[Msg]:
    """Read ``count`` records of ``<topic>.dlq`` with an ephemeral consumer."""
    sub = await js.pull_subscribe(topic + ".dlq", stream=stream)
    got: list[Msg] = []
    while len(got) < count:
        got.extend(await sub.fetch(count - len(got), timeout=10))
    await sub.unsubscribe()
    return got


async def test_a_record_past_max_deliver_goes_to_the_dead_letter_subject(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport(max_deliver=2, ack_wait=30.0)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send(message(topic, "poison", '{"bad":true}', timestamp=42))
    await transport.send(message(topic, "fine"))
    records = aiter(receiver)
    deliveries: list[int] = []
    while len(deliveries) < 3:
        record = await next_record(records)
        if record.key == "poison":
            deliveries.append(record.delivery_count)
            await record.nak()
        else:
            deliveries.append(-1)
            await record.ack()
    assert sorted(deliveries) == [-1, 1, 2]
    stream = transport.layout.stream(topic)
    [letter] = await dead_letters(raw_js, stream, topic, 1)
    assert letter.data == b'{"bad":true}'
    assert letter.headers is not None
    assert letter.headers["Wow-Key"] == "poison"
    assert letter.headers["Wow-Dlq-Reason"] == "max_deliver"
    assert letter.headers["Wow-Dlq-Group"] == group
    assert letter.headers["Wow-Dlq-Deliveries"] == "3"
    assert letter.headers["Wow-Dlq-Position"] == f"{stream}:1"

    # terminated for the group: not delivered again, nothing left pending
    async def settled() -> bool:
        info = await raw_js.consumer_info(stream, transport.layout.consumer(group, topic))
        return bool(info.num_ack_pending == 0 and info.num_redelivered == 0)

    from tests.wow_nats.support import eventually

    await eventually(settled)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(records), 0.3)


async def test_a_payload_that_is_not_utf8_is_dead_lettered_byte_for_byte(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport()
    transport.metrics = metrics = InMemoryMetrics()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    garbage = b"\xff\xfe{not text"
    await raw_js.publish(topic, garbage, headers={"Wow-Key": "k"})
    await transport.send(message(topic, "after"))
    # the receiver goes on with the next record
    assert (await next_record(aiter(receiver))).key == "after"
    [letter] = await dead_letters(raw_js, transport.layout.stream(topic), topic, 1)
    assert letter.data == garbage
    assert letter.headers is not None
    assert letter.headers["Wow-Dlq-Reason"] == "not_utf8"
    assert metrics.counter_value("wow.nats.dead_lettered", reason="not_utf8", topic=topic) == 1


async def test_a_foreign_record_is_handed_out_for_the_bus_to_judge(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    ack = await raw_js.publish(topic, b"not json at all", headers={"Wow-Timestamp": "yesterday"})
    record = await next_record(aiter(receiver))
    # no key header, a garbage timestamp: the key is empty (the bus's key check refuses
    # it and applies the decode-failure policy), the time is JetStream's
    assert (record.key, record.payload) == ("", "not json at all")
    assert record.timestamp > 1_600_000_000_000
    assert record.position == f"{ack.stream}:{ack.seq}"


async def test_the_dead_letter_subject_is_in_the_context_stream_and_not_delivered_to_the_topic(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    # what the core's DEAD_LETTER policy does: send the raw record to <topic>.dlq, then ack
    transport = make_transport()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic + ".dlq", "k", "raw"))
    await transport.send(message(topic, "k", "ok"))
    assert (await next_record(aiter(receiver))).payload == "ok"
    info = await raw_js.stream_info(transport.layout.stream(topic))
    assert info.state.messages == 2
    [letter] = await dead_letters(raw_js, transport.layout.stream(topic), topic, 1)
    assert letter.data == b"raw"


async def test_a_record_published_twice_with_one_id_is_stored_once(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    # send's retries reuse the Nats-Msg-Id: JetStream's duplicate window drops the copy
    transport = make_transport()
    topic = names.topic()
    headers = {"Wow-Key": "k", "Nats-Msg-Id": "same"}
    first = await transport.publish(topic, b"{}", dict(headers))
    second = await transport.publish(topic, b"{}", dict(headers))
    assert second.duplicate
    assert second.seq == first.seq
    info = await raw_js.stream_info(transport.layout.stream(topic))
    assert info.state.messages == 1


async def test_a_record_the_bus_cannot_decode_is_dead_lettered_once_with_why(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    # the core's decode-failure policy on NATS: the record's bytes, and why, in headers
    transport = make_transport()
    # the test's own topic prefix: its stream is the test's, never another's
    bus = TransportCommandBus(transport, conformance_codec(), naming=DefaultTopicNaming(names.topic_prefix))
    account = NamedAggregate("ctx", "agg")
    topic = bus.topic(account)
    assert topic == names.topic()
    group = names.group()
    receiver = bus.receiver(MessageSubscription.of(group, [account]))
    await receiver.ready()
    receiver.open_processing()
    await raw_js.publish(topic, b'{"foreign": "json"}', headers={"Wow-Key": "a-1"})
    await bus.send(command(account, "a-1", 1))
    exchange = await asyncio.wait_for(anext(aiter(receiver)), 30)
    await exchange.ack()
    stream = transport.layout.stream(topic)
    [letter] = await dead_letters(raw_js, stream, topic, 1)
    assert letter.data == b'{"foreign": "json"}', "the record's own bytes"
    assert letter.headers is not None
    assert letter.headers["Wow-Key"] == "a-1"
    assert letter.headers["Wow-Dlq-Reason"] == "undecodable"
    assert letter.headers["Wow-Dlq-Group"] == group
    assert letter.headers["Wow-Dlq-Position"] == f"{stream}:1"
    assert letter.headers["Wow-Dlq-Deliveries"] == "1"
    assert letter.headers["Wow-Dlq-Error"].startswith("wrong_shape:")
    assert "\n" not in letter.headers["Wow-Dlq-Error"]
    # dead-lettered again (its acknowledgement lost in a crash): stored once
    reason = DeadLetterReason("undecodable", group, f"{stream}:1", 2, "again")
    await transport.send_dead_letter(message(topic + ".dlq", "a-1", '{"foreign": "json"}'), reason)
    info = await raw_js.stream_info(stream)
    assert info.state.messages == 3, "the record, the command and one dead letter"
    await receiver.close()
    await bus.close()
