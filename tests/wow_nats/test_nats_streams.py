"""Creating and reconciling streams and consumers; stream ensured once under concurrency."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js.api import StreamConfig

from tests.wow_nats.conftest import MakeTransport, Names
from tests.wow_nats.support import message, next_record, opened
from wow_nats import StreamSubjectsTakenError

pytestmark = pytest.mark.nats


async def test_many_concurrent_first_sends_create_one_stream(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport()
    topics = [names.topic("ctx", f"agg{i % 4}") for i in range(50)]
    await asyncio.gather(*(transport.send(message(topic, "k")) for topic in topics))
    streams = [info.config.name for info in await raw_js.streams_info() if info.config.name]
    assert [name for name in streams if name.startswith(names.stream_prefix)] == [
        transport.layout.stream(topics[0])
    ]
    info = await raw_js.stream_info(transport.layout.stream(topics[0]))
    assert info.state.messages == 50


async def test_an_existing_stream_gets_the_missing_subjects_added(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport(max_age=3600.0)
    topic = names.topic()
    stream = transport.layout.stream(topic)
    base = transport.layout.base(topic)
    # created earlier by someone else with only the bare subject and a subject of theirs
    await raw_js.add_stream(StreamConfig(name=stream, subjects=[base, "elsewhere." + names.ns]))
    await transport.send(message(topic, "k"))
    info = await raw_js.stream_info(stream)
    assert set(info.config.subjects or []) == {base, base + ".>", "elsewhere." + names.ns}
    assert info.config.max_age == 3600.0


async def test_settings_of_an_existing_consumer_are_reconciled(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    topic, group = names.topic(), names.group()
    first = make_transport(ack_wait=5.0)
    receiver = first.open(group, [topic])
    await receiver.ready()
    await receiver.close()
    second = make_transport(ack_wait=9.0, max_ack_pending=77)
    again = second.open(group, [topic])
    await again.ready()
    info = await raw_js.consumer_info(second.layout.stream(topic), second.layout.consumer(group, topic))
    assert (info.config.ack_wait, info.config.max_ack_pending) == (9.0, 77)


async def test_a_consumer_deleted_behind_the_receivers_back_is_created_again(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport(fetch_timeout=0.5)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    stream = transport.layout.stream(topic)
    await raw_js.delete_consumer(stream, transport.layout.consumer(group, topic))

    async def recreated() -> None:
        while True:
            try:
                await raw_js.consumer_info(
                    transport.layout.stream(topic), transport.layout.consumer(group, topic)
                )
                return
            except nats.js.errors.NotFoundError:
                await asyncio.sleep(0.05)

    await asyncio.wait_for(recreated(), 10)
    await transport.send(message(topic, "after"))
    assert (await next_record(aiter(receiver))).key == "after"


async def test_a_stream_deleted_behind_the_receivers_back_is_created_again_and_delivers(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    """The receiver makes the stream and its consumer again, and what is sent afterwards
    arrives. The news of the deleted consumer comes while the server is still removing the
    stream, and on NATS 2.9 a stream made again before that ended stores records but never
    delivers them (without the pause this failed 6 of 15 runs under load): the receiver pauses
    for the removal to end first."""
    transport = make_transport(fetch_timeout=0.5)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    records = aiter(receiver)
    await transport.send(message(topic, "before"))
    await (await next_record(records)).ack()
    stream, consumer = transport.layout.stream(topic), transport.layout.consumer(group, topic)
    await raw_js.delete_stream(stream)

    async def recreated() -> None:
        while True:
            try:
                await raw_js.consumer_info(stream, consumer)
                return
            except nats.js.errors.NotFoundError:
                await asyncio.sleep(0.05)

    await asyncio.wait_for(recreated(), 10)
    await transport.send(message(topic, "after"))
    assert (await next_record(records, timeout=10)).key == "after"


async def test_subjects_held_by_another_stream_are_named_with_the_setting_that_separates_them(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    topic = names.topic()
    transport = make_transport()
    base = transport.layout.base(topic)
    # another application (or another stream prefix) on the same server holds the subjects
    other = names.stream_prefix + "other_app"
    await raw_js.add_stream(StreamConfig(name=other, subjects=[base + ".>"]))
    with pytest.raises(StreamSubjectsTakenError) as raised:
        await transport.send(message(topic, "k"))
    text = str(raised.value)
    assert repr(other) in text, text
    assert base + ".>" in text, text
    assert transport.layout.stream(topic) in text, text
    assert "WOW_MESSAGING__TOPIC_PREFIX" in text, text
    assert f"WOW_NATS__STREAM_PREFIX, now {names.stream_prefix!r}" in text, text
    assert "not found" not in text, text
    receiver = transport.open(names.group(), [topic])
    with pytest.raises(StreamSubjectsTakenError):
        await receiver.ready()
    await receiver.close()


async def test_a_read_loop_failure_ends_the_iteration_with_it_once(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    topic = names.topic()
    transport = make_transport()
    other = names.stream_prefix + "other_app"
    await raw_js.add_stream(StreamConfig(name=other, subjects=[transport.layout.base(topic) + ".>"]))
    receiver = transport.open(names.group(), [topic])
    receiver.open_processing()  # without ready(): the pull loop finds the subjects taken
    records = aiter(receiver)
    with pytest.raises(StreamSubjectsTakenError):
        await asyncio.wait_for(anext(records), 10)
    with pytest.raises(StopAsyncIteration):  # handed on once, then the end
        await asyncio.wait_for(anext(records), 10)
    await receiver.close()
