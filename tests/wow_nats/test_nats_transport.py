"""NatsTransport against a real JetStream server: send, readiness, admission, ack, groups.

A test that waits for an ack wait's redelivery and reads its delivery count pulls with
requests shorter than the ack wait, not a divisor of it: NATS before 2.10.14
(nats-server #5305) may deliver a redelivery that falls due as the only pull request
expires later and with its count one lower (``tests/wow_nats/test_release.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time

import nats
import pytest

from tests.wow_nats.conftest import MakeTransport, Names
from tests.wow_nats.support import WAIT, eventually, message, next_record, opened
from wow_core.messaging import BusClosedError
from wow_core.testing.support import ConformanceTimeout
from wow_core.transport import DecodeFailureDefault, Transport, TransportReceiver
from wow_nats import InvalidTopicError

pytestmark = pytest.mark.nats


async def test_is_a_transport_with_dead_letter_default(make_transport: MakeTransport) -> None:
    transport = make_transport()
    assert isinstance(transport, Transport)
    assert transport.name == "nats"
    assert transport.decode_failure_default is DecodeFailureDefault.DEAD_LETTER
    receiver = transport.open("g", ["a.b"])
    assert isinstance(receiver, TransportReceiver)


async def test_send_completes_on_the_publish_ack(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport()
    topic = names.topic()
    await transport.send(message(topic, "k1"))
    # SENT evidence: the record is stored when send returns, no waiting needed
    info = await raw_js.stream_info(transport.layout.stream(topic))
    assert info.state.messages == 1
    stored = await raw_js.get_last_msg(transport.layout.stream(topic), topic)
    assert stored.data == b'{"n":0}'
    assert stored.headers is not None
    assert stored.headers["Wow-Key"] == "k1"


@pytest.mark.parametrize("deduplicate", [True, False])
async def test_a_message_id_is_sent_when_deduplicating(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext, deduplicate: bool
) -> None:
    transport = make_transport(deduplicate=deduplicate)
    topic = names.topic()
    await transport.send(message(topic, "k1"))
    await transport.send(message(topic, "k1"))
    stored = await raw_js.get_last_msg(transport.layout.stream(topic), topic)
    assert stored.headers is not None
    assert ("Nats-Msg-Id" in stored.headers) is deduplicate
    assert stored.seq == 2  # two sends, two records: ids are unique per record


async def test_a_record_sent_after_ready_is_received_with_its_fields(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "order-1", '{"x":"ä"}', timestamp=1234))
    record = await next_record(aiter(receiver))
    assert (record.topic, record.key, record.payload, record.timestamp) == (
        topic,
        "order-1",
        '{"x":"ä"}',
        1234,
    )
    assert record.delivery_count == 1
    assert record.position == f"{transport.layout.stream(topic)}:1"
    await record.ack()
    await receiver.close()


def starts(caplog: pytest.LogCaptureFixture, group: str) -> list[tuple[str, str]]:
    """(topic, why) of every start the receivers of ``group`` logged."""
    pattern = rf"NATS receiver of group '{re.escape(group)}': (\S+) starts .*\(([a-z ]+)\)$"
    return [match.groups() for line in caplog.messages if (match := re.search(pattern, line))]


async def test_a_new_group_starts_at_the_first_retained_record_by_default(
    make_transport: MakeTransport, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    """A record sent before any member created the group is not skipped (commands are deduplicated)."""
    transport = make_transport()
    assert transport.settings.deliver_policy == "all"
    topic, other = names.topic(), names.topic("ctx", "other")  # one stream, two subjects
    await transport.send_many([message(topic, "old-1"), message(other, "elsewhere"), message(topic, "old-2")])
    group = names.group()
    with caplog.at_level(logging.INFO, logger="wow_nats"):
        receiver = await opened(transport, group, [topic])
    assert starts(caplog, group) == [(topic, "new group at the beginning")]
    await transport.send(message(topic, "new"))
    records = aiter(receiver)
    assert [(await next_record(records)).key for _ in range(3)] == ["old-1", "old-2", "new"]


async def test_an_existing_group_resumes_where_it_left_off(
    make_transport: MakeTransport, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wow_nats")
    transport = make_transport()
    topic, group = names.topic(), names.group()
    first = await opened(transport, group, [topic])
    await transport.send(message(topic, "one"))
    await (await next_record(aiter(first))).ack()
    await first.close()
    again = await opened(transport, group, [topic])
    assert [why for _, why in starts(caplog, group)] == ["new group at the beginning", "existing group"]
    await transport.send(message(topic, "two"))
    assert (await next_record(aiter(again))).key == "two"


async def test_with_deliver_policy_new_a_new_group_skips_what_was_stored_before_its_open(
    make_transport: MakeTransport, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    transport = make_transport(deliver_policy="new")
    topic, group = names.topic(), names.group()
    await transport.send(message(topic, "old"))
    with caplog.at_level(logging.INFO, logger="wow_nats"):
        receiver = await opened(transport, group, [topic])
    assert starts(caplog, group) == [(topic, "new group at the end")]
    await transport.send(message(topic, "new"))
    record = await next_record(aiter(receiver))
    assert record.key == "new"


async def test_with_deliver_policy_new_a_group_gets_what_was_sent_after_open_even_before_ready(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport(deliver_policy="new")
    topic = names.topic()
    await transport.send(message(topic, "before"))  # makes the stream
    receiver = transport.open(names.group(), [topic])
    await transport.send(message(topic, "after-open"))
    await receiver.ready()
    receiver.open_processing()
    assert (await next_record(aiter(receiver))).key == "after-open"


async def test_the_start_margin_takes_in_records_stored_shortly_before_the_first_open(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport(deliver_policy="new", start_margin=30.0)
    topic = names.topic()
    await transport.send(message(topic, "before"))
    receiver = await opened(transport, names.group(), [topic])
    assert (await next_record(aiter(receiver))).key == "before"


CONCURRENT_TOTAL = 600


async def test_two_members_creating_a_new_group_while_records_are_sent_lose_nothing_sent(
    make_transport: MakeTransport, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    """Two members of a new group get ready at once on their own connections while a
    third client sends: every record whose publish was acknowledged is delivered to the
    group, those sent before the group existed too, and both members share one consumer."""
    sender = make_transport()
    topic, group = names.topic(), names.group()
    sent: list[str] = []
    some_sent = asyncio.Event()

    async def send_all() -> None:
        for batch in range(CONCURRENT_TOTAL // 20):
            keys = [str(batch * 20 + n) for n in range(20)]
            await sender.send_many([message(topic, key) for key in keys])
            sent.extend(keys)
            if len(sent) >= 100:
                some_sent.set()
            await asyncio.sleep(0.005)  # pacing: the sends span the members' creation

    sending = asyncio.create_task(send_all())
    await asyncio.wait_for(some_sent.wait(), WAIT)
    members = [make_transport().open(group, [topic]) for _ in range(2)]
    with caplog.at_level(logging.INFO, logger="wow_nats"):
        await asyncio.wait_for(asyncio.gather(*(member.ready() for member in members)), WAIT)
    got: list[str] = []

    async def consume(receiver: TransportReceiver) -> None:
        async for record in receiver:
            got.append(record.key)
            await record.ack()

    for member in members:
        member.open_processing()
    consumers = [asyncio.create_task(consume(member)) for member in members]
    try:
        await asyncio.wait_for(sending, 30)

        async def all_delivered() -> bool:
            return set(got) >= set(sent)

        with contextlib.suppress(ConformanceTimeout):  # the assertion says what is missing
            await eventually(all_delivered, 20, "every sent record to be delivered")
        missing = set(sent) - set(got)
        assert not missing, (
            f"{len(missing)} of {len(sent)} sent records never delivered, e.g. {sorted(missing, key=int)[:5]}"
        )
        assert len(got) == len(sent)  # acknowledged at once, one consumer: nothing twice
        assert sorted(why for _, why in starts(caplog, group)) in (
            ["new group at the beginning"] * 2,  # both sent the same configuration
            ["existing group", "new group at the beginning"],
        )
    finally:
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)


async def test_nothing_is_pulled_before_open_processing(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport()
    topic = names.topic()
    receiver = transport.open(names.group(), [topic])
    await receiver.ready()
    await transport.send(message(topic, "k"))
    stream = transport.layout.stream(topic)
    consumer = transport.layout.consumer(names.group(), topic)
    records = aiter(receiver)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(records), 0.5)
    info = await raw_js.consumer_info(stream, consumer)
    # still on the server, never delivered
    assert (info.num_pending, info.num_ack_pending, info.delivered.stream_seq) == (1, 0, 0)
    receiver.open_processing()
    assert (await next_record(records)).key == "k"


async def test_readiness_means_the_durable_consumer_exists(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport(ack_wait=7.0, max_ack_pending=50)
    topic = names.topic()
    receiver = transport.open(names.group(), [topic])
    await receiver.ready()
    info = await raw_js.consumer_info(
        transport.layout.stream(topic), transport.layout.consumer(names.group(), topic)
    )
    assert info.config.durable_name == transport.layout.consumer(names.group(), topic)
    assert info.config.filter_subject == topic
    assert info.config.ack_wait == 7.0
    assert info.config.max_ack_pending == 50
    await receiver.close()
    # a durable consumer outlives its receivers
    await raw_js.consumer_info(
        transport.layout.stream(topic), transport.layout.consumer(names.group(), topic)
    )


async def test_an_acknowledged_record_is_not_delivered_again(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport(ack_wait=1.0)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send(message(topic, "first"))
    await (await next_record(aiter(receiver))).ack()
    await receiver.close()
    # after more than the ack wait, the same group sees only what came later
    stream, consumer = transport.layout.stream(topic), transport.layout.consumer(group, topic)

    async def acked() -> bool:
        info = await raw_js.consumer_info(stream, consumer)
        return bool(info.num_ack_pending == 0 and info.ack_floor.stream_seq == 1)

    await eventually(acked)
    again = await opened(transport, group, [topic])
    await transport.send(message(topic, "second"))
    assert (await next_record(aiter(again))).key == "second"


async def test_an_unacknowledged_record_comes_back_after_the_ack_wait(
    make_transport: MakeTransport, names: Names
) -> None:
    # pull requests of 0.4 s: the redelivery falls due between two expiries (module docstring)
    transport = make_transport(ack_wait=1.0, fetch_timeout=0.4)
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "k"))
    records = aiter(receiver)
    first = await next_record(records)
    started = time.monotonic()
    second = await next_record(records)
    assert (second.key, second.position, second.delivery_count) == ("k", first.position, 2)
    assert time.monotonic() - started >= 0.8
    await second.ack()


async def test_nak_redelivers_at_once(make_transport: MakeTransport, names: Names) -> None:
    transport = make_transport(ack_wait=60.0)
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "k"))
    records = aiter(receiver)
    await (await next_record(records)).nak()
    # far sooner than the ack wait of 60 s
    again = await next_record(records, timeout=5)
    assert again.delivery_count == 2


async def test_ack_is_idempotent(make_transport: MakeTransport, names: Names) -> None:
    transport = make_transport()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "k"))
    record = await next_record(aiter(receiver))
    await record.ack()
    await record.ack()
    assert record.settled


async def test_every_group_gets_every_record_and_members_share(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport()
    topic = names.topic()
    a1 = transport.open(names.group("a"), [topic])
    a2 = transport.open(names.group("a"), [topic])
    b = transport.open(names.group("b"), [topic])
    for receiver in (a1, a2, b):
        await receiver.ready()
        receiver.open_processing()
    keys = [f"k{i}" for i in range(40)]
    await transport.send_many([message(topic, key) for key in keys])

    got_a: list[str] = []
    got_b: list[str] = []
    done_a, done_b = asyncio.Event(), asyncio.Event()

    async def drain(receiver: TransportReceiver, into: list[str], done: asyncio.Event) -> None:
        async for record in receiver:
            into.append(record.key)
            await record.ack()
            if len(into) >= len(keys):
                done.set()

    tasks = [
        asyncio.create_task(drain(a1, got_a, done_a)),
        asyncio.create_task(drain(a2, got_a, done_a)),
        asyncio.create_task(drain(b, got_b, done_b)),
    ]
    await asyncio.wait_for(asyncio.gather(done_a.wait(), done_b.wait()), WAIT)
    for receiver in (a1, a2, b):
        await receiver.close()
    await asyncio.gather(*tasks)
    assert sorted(got_a) == sorted(keys)  # each record once within group a
    assert got_b == keys


async def test_records_of_one_key_come_in_send_order(make_transport: MakeTransport, names: Names) -> None:
    transport = make_transport(fetch_batch=16)
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    sent = [message(topic, f"agg-{i % 5}", f'{{"n":{i}}}') for i in range(300)]
    await transport.send_many(sent)
    seen: dict[str, list[int]] = {}
    records = aiter(receiver)
    for _ in sent:
        record = await next_record(records)
        seen.setdefault(record.key, []).append(int(record.payload[5:-1]))
        await record.ack()
    for key, numbers in seen.items():
        assert numbers == sorted(numbers), key
    assert sum(len(numbers) for numbers in seen.values()) == 300


async def test_one_receiver_on_several_topics_of_two_contexts(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport()
    t1, t2, t3 = names.topic("orders", "order"), names.topic("orders", "cart"), names.topic("billing", "bill")
    receiver = await opened(transport, names.group(), [t1, t2, t3])
    for topic in (t1, t2, t3):
        await transport.send(message(topic, topic))
    got = {(await next_record(aiter(receiver))).topic for _ in range(3)}
    assert got == {t1, t2, t3}
    # a stream per bounded context
    assert transport.layout.stream(t1) == transport.layout.stream(t2) != transport.layout.stream(t3)
    info = await raw_js.stream_info(transport.layout.stream(t1))
    assert info.state.messages == 2


async def test_close_hands_pulled_records_back_at_once(make_transport: MakeTransport, names: Names) -> None:
    transport = make_transport(ack_wait=60.0, fetch_batch=8)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send_many([message(topic, f"k{i}") for i in range(6)])
    records = aiter(receiver)
    first = await next_record(records)
    await first.ack()
    await receiver.close()
    # the five pulled but never handed out are naked on close: no 60 s ack wait
    again = await opened(transport, group, [topic])
    rest = [await next_record(aiter(again), timeout=5) for _ in range(5)]
    assert [r.key for r in rest] == [f"k{i}" for i in range(1, 6)]


async def test_close_ends_iteration_and_releases_tasks(make_transport: MakeTransport, names: Names) -> None:
    before = set(asyncio.all_tasks())
    transport = make_transport()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])

    async def consume() -> int:
        return sum([1 async for _ in receiver])

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)
    await receiver.close()
    assert await asyncio.wait_for(consumer, WAIT) == 0
    await transport.close()
    await asyncio.sleep(0)  # let cancelled tasks finish their last step
    left = {t for t in asyncio.all_tasks() - before if not t.done()}
    assert not left, left
    assert transport.closed


async def test_send_and_open_after_close_fail(make_transport: MakeTransport, names: Names) -> None:
    transport = make_transport()
    await transport.send(message(names.topic(), "k"))
    await transport.close()
    with pytest.raises(BusClosedError):
        await transport.send(message(names.topic(), "k"))
    with pytest.raises(BusClosedError):
        await transport.send_many([message(names.topic(), "k")])
    with pytest.raises(BusClosedError):
        transport.open("g", [names.topic()])
    await transport.close()  # idempotent


@pytest.mark.parametrize("topic", ["", "a b", "a.*", "a.>", "a..b", ".a", "a.", "tab\tname", "ü.x"])
async def test_a_topic_that_is_not_a_subject_is_refused(make_transport: MakeTransport, topic: str) -> None:
    transport = make_transport()
    with pytest.raises(InvalidTopicError):
        await transport.send(message(topic, "k"))
    with pytest.raises(InvalidTopicError):
        transport.open("g", [topic])


async def test_an_unreachable_server_fails_within_the_connect_timeout(names: Names) -> None:
    from wow_nats import NatsSettings, NatsTransport

    transport = NatsTransport(NatsSettings(servers=["nats://127.0.0.1:1"], connect_timeout=1.0))
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="WOW_NATS__SERVERS"):
        await transport.send(message(names.topic(), "k"))
    assert time.monotonic() - started < 5
    await transport.close()


async def test_with_deliver_policy_new_a_group_starts_exactly_at_its_open_among_many_records(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport(deliver_policy="new")
    topic, other = names.topic(), names.topic("ctx", "other")
    await transport.send_many([message(topic if n % 3 else other, f"old-{n}") for n in range(57)])
    receiver = transport.open(names.group(), [topic])
    await transport.send_many([message(topic, f"new-{n}") for n in range(3)])
    await receiver.ready()
    receiver.open_processing()
    records = aiter(receiver)
    assert [(await next_record(records)).key for _ in range(3)] == ["new-0", "new-1", "new-2"]


async def test_close_hands_back_records_being_processed_once_and_in_order(
    make_transport: MakeTransport, names: Names
) -> None:
    # pull requests of 0.4 s: the redelivery falls due between two expiries (module docstring)
    transport = make_transport(ack_wait=1.0, fetch_batch=4, fetch_timeout=0.4)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send_many([message(topic, "k", str(n)) for n in range(3)])
    records = aiter(receiver)
    taken = [await next_record(records) for _ in range(3)]
    # never acknowledged: the first comes back after the ack wait while still "in process"
    again = await next_record(records)
    assert (again.payload, again.delivery_count) == ("0", 2)
    await receiver.close()
    successor = await opened(transport, group, [topic])
    handed_back = [await next_record(aiter(successor), timeout=5) for _ in range(3)]
    assert [r.payload for r in handed_back] == ["0", "1", "2"]
    assert all(r.delivery_count >= 2 for r in handed_back)
    assert not taken[0].settled  # superseded by its redelivery: close naked that one


@pytest.mark.parametrize(
    "key",
    [" spaced ", "line\r\nNats-Msg-Id: forged", "tab\there", "", "ключ-🔑", "100%", "%41", "colon: yes"],
)
async def test_any_key_arrives_unchanged(make_transport: MakeTransport, names: Names, key: str) -> None:
    transport = make_transport()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, key))
    record = await next_record(aiter(receiver))
    assert record.key == key


async def test_a_receiver_is_built_from_its_narrow_dependencies_without_a_transport(
    nats_url: str, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    from wow_core.metrics import InMemoryMetrics
    from wow_nats import NatsReceiver, NatsSettings, StreamLayout
    from wow_nats.connection import NatsConnection
    from wow_nats.topics import NatsTopics

    settings = NatsSettings(servers=[nats_url], stream_prefix=names.stream_prefix)
    connection = NatsConnection(settings, closed=lambda: False)
    layout = StreamLayout(names.topic_prefix, settings.stream_prefix)
    published: list[str] = []

    async def publish(subject: str, data: bytes, headers: dict[str, str]) -> None:
        published.append(subject)

    closed: list[NatsReceiver] = []
    topic = names.topic()
    receiver = NatsReceiver(
        names.group(),
        [topic],
        settings=settings,
        layout=layout,
        connection=connection,
        topic_admin=NatsTopics(connection, layout, settings),
        publish=publish,
        metrics=InMemoryMetrics(),
        on_close=closed.append,
    )
    try:
        await receiver.ready()
        receiver.open_processing()
        await raw_js.publish(topic, b"\xff not text", headers={"Wow-Key": "k"})
        await raw_js.publish(topic, b"text", headers={"Wow-Key": "k"})
        record = await next_record(aiter(receiver))
        assert (record.key, record.payload) == ("k", "text")
        assert published == [layout.dead_letter_subject(topic)]  # through the publish it was given
        await record.ack()
        await receiver.close()
        assert closed == [receiver]
    finally:
        await receiver.close()
        await connection.close()
