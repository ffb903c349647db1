"""RedisStreamTransport against the real server: send, groups, admission, ack, recovery."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.wow_redis.conftest import REDIS_URL
from tests.wow_redis.helpers import eventually, message, named_url, next_record, opened, own_clients, take
from wow_core.messaging import BusClosedError
from wow_core.metrics import InMemoryMetrics
from wow_core.model import NamedAggregate, TopicKind
from wow_core.testing.support import ConformanceTimeout
from wow_core.transport import TransportMessage, TransportRecord
from wow_redis import RedisMessageBusObserver, RedisStreamReceiver, RedisStreamTransport
from wow_redis.observer import CLAIMED, DEAD_LETTERED, SEND_FAILURES, UNDECODABLE

pytestmark = pytest.mark.redis

Make = Callable[..., RedisStreamTransport]


async def pending_count(redis: Redis, stream: str, group: str) -> int:
    summary = await redis.xpending(stream, group)
    return int(summary["pending"])


async def delivery_counts(redis: Redis, stream: str, group: str) -> dict[str, tuple[str, int]]:
    """Per pending entry id, its consumer and XPENDING's times-delivered."""
    rows = await redis.xpending_range(stream, group, min="-", max="+", count=10_000)
    return {
        row["message_id"].decode(): (row["consumer"].decode(), int(row["times_delivered"])) for row in rows
    }


def claimed_at_least(metrics: InMemoryMetrics, stream: str, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return metrics.counter_value(CLAIMED, stream=stream, group="g1") >= count

    return check


def entry_id_of(record: TransportRecord) -> str:
    return record.position.rsplit("/", 1)[1]


def topic_of(transport: RedisStreamTransport, aggregate: str = "account") -> str:
    return transport.naming.topic(NamedAggregate("bank", aggregate), TopicKind.COMMAND)


# -- naming ------------------------------------------------------------------------------


def test_topics_keep_the_reference_naming(make_transport: Make, prefix: str) -> None:
    transport = make_transport()
    named = NamedAggregate("bank", "account")
    assert transport.naming.topic(named, TopicKind.COMMAND) == f"{prefix}bank.account:command"
    assert transport.naming.topic(named, TopicKind.EVENT) == f"{prefix}bank.account:event"
    assert transport.naming.topic(named, TopicKind.STATE) == f"{prefix}bank.account:state"


def test_context_aliases_replace_the_context_name() -> None:
    from wow_redis import RedisTopicNaming

    naming = RedisTopicNaming(context_aliases={"bank": "b"})
    assert naming.topic(NamedAggregate("bank", "account"), TopicKind.EVENT) == "b.account:event"
    assert naming.topic(NamedAggregate("shop", "order"), TopicKind.EVENT) == "shop.order:event"


# -- send --------------------------------------------------------------------------------


async def test_send_adds_the_payload_under_msg_and_the_key(make_transport: Make, redis: Redis) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    await transport.send(TransportMessage(topic, "acc-1", '{"a":"é"}', 1234))
    entries = await redis.xrange(topic)
    assert len(entries) == 1
    _, fields = entries[0]
    assert fields == {b"msg": '{"a":"é"}'.encode(), b"key": b"acc-1", b"ts": b"1234"}


async def test_concurrent_sends_all_land_in_call_order(make_transport: Make, redis: Redis) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    sends = [transport.send(message(topic, payload=str(n))) for n in range(600)]
    await asyncio.gather(*sends)
    entries = await redis.xrange(topic)
    assert [int(fields[b"msg"]) for _, fields in entries] == list(range(600))


async def test_send_many_completes_when_every_entry_was_added(make_transport: Make, redis: Redis) -> None:
    transport = make_transport(send_batch_size=7)
    topic = topic_of(transport)
    await transport.send_many([message(topic, payload=str(n)) for n in range(50)])
    entries = await redis.xrange(topic)
    assert [int(fields[b"msg"]) for _, fields in entries] == list(range(50))
    await transport.send_many([])


async def test_maxlen_bounds_the_stream_approximately(make_transport: Make, redis: Redis) -> None:
    transport = make_transport(maxlen=100)
    topic = topic_of(transport)
    await transport.send_many([message(topic, payload=str(n)) for n in range(3000)])
    length = await redis.xlen(topic)
    assert 100 <= length < 3000
    assert length <= 100 + 200  # MAXLEN ~ trims whole macro nodes (100 entries by default)


async def test_a_send_after_close_is_refused(make_transport: Make) -> None:
    transport = make_transport()
    await transport.close()
    with pytest.raises(BusClosedError):
        await transport.send(message("t"))
    with pytest.raises(BusClosedError):
        transport.open("g", ["t"])


async def test_a_server_that_is_down_fails_the_send_after_its_retries(prefix: str) -> None:
    from wow_redis import RedisSettings

    metrics = InMemoryMetrics()
    transport = RedisStreamTransport(
        RedisSettings(
            url="redis://127.0.0.1:1/0",
            key_prefix=prefix,
            send_retries=2,
            reconnect_backoff=0.01,
            socket_timeout=1,
        ),
        metrics=metrics,
    )
    try:
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(transport.send(message(f"{prefix}t")), 20)
        assert metrics.counter_value(SEND_FAILURES) == 1
        assert metrics.counter_value("wow.redis.connection_errors", where="XADD") == 2
    finally:
        await transport.close()


async def test_a_server_side_error_fails_only_its_send(
    make_transport: Make, redis: Redis, prefix: str
) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    await redis.set(f"{prefix}not-a-stream", "x")
    results = await asyncio.gather(
        transport.send(message(topic)),
        transport.send(message(f"{prefix}not-a-stream")),
        transport.send(message(topic)),
        return_exceptions=True,
    )
    assert results[0] is None
    assert results[2] is None
    assert "WRONGTYPE" in str(results[1])


async def test_a_killed_connection_is_retried_transparently(make_transport: Make, redis: Redis) -> None:
    name = f"wowtest-{uuid.uuid4().hex[:10]}"
    transport = make_transport(reconnect_backoff=0.01, url=named_url(REDIS_URL, name))
    topic = topic_of(transport)
    await transport.send(message(topic))
    killed = await own_clients(redis, name)
    assert killed, "the transport's connection is named"
    for client_id in killed:
        await redis.execute_command("CLIENT", "KILL", "ID", client_id)
    await transport.send(message(topic))
    assert await redis.xlen(topic) == 2


# -- groups, readiness and admission ----------------------------------------------------


async def test_ready_creates_the_group_on_every_stream(
    make_transport: Make, redis: Redis, prefix: str
) -> None:
    transport = make_transport()
    topics = [f"{prefix}a:command", f"{prefix}b:command"]
    receiver = transport.open("g1", topics)
    await receiver.ready()
    for topic in topics:
        groups = await redis.xinfo_groups(topic)
        assert [g["name"] for g in groups] == [b"g1"]


def starts(caplog: pytest.LogCaptureFixture, group: str) -> list[tuple[str, str, str]]:
    """(consumer, stream, why) of every start the receivers of ``group`` logged."""
    pattern = rf"Redis receiver (\S+) of group '{re.escape(group)}': stream (\S+) starts .*\(([a-z ]+)\)$"
    return [match.groups() for line in caplog.messages if (match := re.search(pattern, line))]


async def test_an_existing_group_is_reused_not_reset(
    make_transport: Make, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wow_redis")
    transport = make_transport()
    topic = topic_of(transport)
    first = await opened(transport, "g1", [topic])
    await transport.send(message(topic, payload="1"))
    [record] = await take(first, 1)
    await record.ack()
    await first.close()
    again = await opened(transport, "g1", [topic])
    assert [why for _, _, why in starts(caplog, "g1")] == ["new group at the beginning", "existing group"]
    await transport.send(message(topic, payload="2"))
    [record] = await take(again, 1)
    assert record.payload == "2"


async def test_a_new_group_starts_at_the_first_retained_entry_by_default(
    make_transport: Make, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry sent before any member created the group is not skipped (commands are deduplicated)."""
    transport = make_transport()
    assert transport.settings.group_start == "earliest"
    topics = [topic_of(transport), topic_of(transport, "card")]
    await transport.send_many([message(topic, payload=f"before-{topic}") for topic in topics])
    receiver = transport.open("g1", topics)
    with caplog.at_level(logging.INFO, logger="wow_redis"):
        await receiver.ready()
    assert [(stream, why) for _, stream, why in starts(caplog, "g1")] == [
        (topic, "new group at the beginning") for topic in topics
    ]
    await transport.send_many([message(topic, payload=f"after-{topic}") for topic in topics])
    receiver.open_processing()
    records = await take(receiver, 4)
    assert sorted(r.payload for r in records) == sorted(
        f"{when}-{t}" for when in ("before", "after") for t in topics
    )


async def test_with_group_start_latest_a_new_group_skips_what_was_sent_before(
    make_transport: Make, caplog: pytest.LogCaptureFixture
) -> None:
    transport = make_transport(group_start="latest")
    topic = topic_of(transport)
    await transport.send(message(topic, payload="before"))
    receiver = transport.open("g1", [topic])
    with caplog.at_level(logging.INFO, logger="wow_redis"):
        await receiver.ready()
    assert [why for _, _, why in starts(caplog, "g1")] == ["new group at the end"]
    await transport.send(message(topic, payload="after"))
    receiver.open_processing()
    [record] = await take(receiver, 1)
    assert record.payload == "after"


CONCURRENT_TOTAL = 600


async def test_two_members_creating_a_new_group_while_entries_are_sent_lose_nothing_sent(
    make_transport: Make, caplog: pytest.LogCaptureFixture
) -> None:
    """Two members of a new group get ready at once on their own connections, while a
    third client sends: every entry whose XADD completed is delivered to the group, the
    ones sent before the group existed too. One member creates the group, the other
    finds it (BUSYGROUP) and reuses it unchanged."""
    sender = make_transport()
    topic = topic_of(sender)
    sent: list[str] = []
    some_sent = asyncio.Event()

    async def send_all() -> None:
        for batch in range(CONCURRENT_TOTAL // 20):
            payloads = [str(batch * 20 + n) for n in range(20)]
            await sender.send_many([message(topic, key=f"k{p[-1]}", payload=p) for p in payloads])
            sent.extend(payloads)
            if len(sent) >= 100:
                some_sent.set()
            await asyncio.sleep(0.005)  # pacing: the sends span the members' creation

    sending = asyncio.create_task(send_all())
    await asyncio.wait_for(some_sent.wait(), 10)
    members = [make_transport().open("fresh", [topic]) for _ in range(2)]
    with caplog.at_level(logging.INFO, logger="wow_redis"):
        await asyncio.wait_for(asyncio.gather(*(member.ready() for member in members)), 10)
    got: list[str] = []

    async def consume(receiver: RedisStreamReceiver) -> None:
        async for record in receiver:
            got.append(record.payload)
            await record.ack()

    for member in members:
        member.open_processing()
    consumers = [asyncio.create_task(consume(member)) for member in members]
    try:
        await asyncio.wait_for(sending, 30)

        async def all_delivered() -> bool:
            return set(got) >= set(sent)

        with contextlib.suppress(ConformanceTimeout):  # the assertion says what is missing
            await eventually(all_delivered, 20, "every sent entry to be delivered")
        missing = set(sent) - set(got)
        assert not missing, (
            f"{len(missing)} of {len(sent)} sent entries never delivered, e.g. {sorted(missing, key=int)[:5]}"
        )
        assert len(got) == len(sent)  # acknowledged at once: nothing delivered twice
        assert sorted(why for _, _, why in starts(caplog, "fresh")) == [
            "existing group",
            "new group at the beginning",
        ]
    finally:
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)


async def test_nothing_is_read_before_processing_opens(make_transport: Make, redis: Redis) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    receiver = transport.open("g1", [topic])
    await receiver.ready()
    await transport.send(message(topic))
    pending = next_record(aiter(receiver))
    done, _ = await asyncio.wait({pending}, timeout=0.5)
    assert not done
    groups = await redis.xinfo_groups(topic)
    assert groups[0]["pending"] == 0
    assert groups[0]["lag"] == 1
    receiver.open_processing()
    record = await asyncio.wait_for(pending, 10)
    assert record.key == "k1"
    assert record.delivery_count == 1
    assert record.position.startswith(f"{topic}/")


async def test_members_of_a_group_share_entries_and_groups_each_get_all(
    make_transport: Make, redis: Redis
) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    a1, a2, b = transport.open("a", [topic]), transport.open("a", [topic]), transport.open("b", [topic])
    assert a1.consumer != a2.consumer
    for receiver in (a1, a2, b):
        await receiver.ready()
        receiver.open_processing()
    await transport.send_many([message(topic, payload=str(n)) for n in range(40)])
    got_b = await take(b, 40)
    assert sorted(int(r.payload) for r in got_b) == list(range(40))
    seen: list[int] = []
    it1, it2 = aiter(a1), aiter(a2)

    async def drain(iterator: object) -> None:
        while True:
            record = await anext(iterator)  # type: ignore[call-overload]
            seen.append(int(record.payload))
            await record.ack()

    tasks = [asyncio.ensure_future(drain(it1)), asyncio.ensure_future(drain(it2))]

    async def all_seen() -> bool:
        return len(seen) >= 40

    await eventually(all_seen)
    for task in tasks:
        task.cancel()
    assert sorted(seen) == list(range(40))


# -- ack and redelivery -----------------------------------------------------------------


async def test_ack_removes_the_entry_from_the_pending_list(make_transport: Make, redis: Redis) -> None:
    transport = make_transport(ack_confirmed=True)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send_many([message(topic, payload=str(n)) for n in range(20)])
    records = await take(receiver, 20)
    assert await pending_count(redis, topic, "g1") == 20
    await asyncio.gather(*(r.ack() for r in records[:15]))
    assert await pending_count(redis, topic, "g1") == 5


async def test_queued_acks_are_flushed_by_close(make_transport: Make, redis: Redis) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send_many([message(topic, payload=str(n)) for n in range(30)])
    for record in await take(receiver, 30):
        await record.ack()
    await receiver.close()
    assert await pending_count(redis, topic, "g1") == 0


async def test_an_unacked_entry_comes_back_to_the_reopened_receiver(make_transport: Make) -> None:
    transport = make_transport(claim_idle_time=None)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send_many([message(topic, payload="1"), message(topic, payload="2")])
    first, _ = await take(receiver, 2)
    await first.ack()
    await receiver.close()
    again = await opened(transport, "g1", [topic])
    [back] = await take(again, 1)
    assert back.payload == "2"
    assert back.delivery_count == 2


async def test_a_restart_under_the_same_consumer_name_rereads_its_pending_entries(
    make_transport: Make,
) -> None:
    first = make_transport(consumer_name="stable", claim_idle_time=None)
    topic = topic_of(first)
    receiver = await opened(first, "g1", [topic])
    await first.send_many([message(topic, payload=str(n)) for n in range(3)])
    await take(receiver, 3)
    await first.close()
    restarted = make_transport(consumer_name="stable", claim_idle_time=None)
    again = await opened(restarted, "g1", [topic])
    records = await take(again, 3)
    assert [r.payload for r in records] == ["0", "1", "2"]
    assert all(r.delivery_count == 2 for r in records)


async def test_close_forgets_a_consumer_without_pending_entries(make_transport: Make, redis: Redis) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    idle = transport.open("g1", [topic])
    busy = transport.open("g1", [topic])
    for receiver in (idle, busy):
        await receiver.ready()
    busy.open_processing()
    await transport.send(message(topic))
    await take(busy, 1)
    await idle.close()
    await busy.close()
    consumers = {c["name"] for c in await redis.xinfo_consumers(topic, "g1")}
    assert consumers == {busy.consumer.encode()}


# -- recovery ---------------------------------------------------------------------------


async def test_entries_of_a_dead_consumer_are_claimed_by_a_living_one(
    make_transport: Make, redis: Redis
) -> None:
    metrics = InMemoryMetrics()
    dead = make_transport(claim_idle_time=None)
    topic = topic_of(dead)
    victim = await opened(dead, "g1", [topic])
    await dead.send_many([message(topic, payload=str(n)) for n in range(10)])
    await take(victim, 10)
    await dead.close()  # left pending under the dead consumer's name
    living = make_transport(claim_idle_time=0.2, metrics=metrics)
    receiver = await opened(living, "g1", [topic])
    records = await take(receiver, 10)
    assert sorted(int(r.payload) for r in records) == list(range(10))
    assert all(r.delivery_count == 2 for r in records)
    counts = await delivery_counts(redis, topic, "g1")
    assert counts == {entry_id_of(r): (receiver.consumer, 2) for r in records}, "claimed, counted once"
    for record in records:
        await record.ack()
    await receiver.close()
    assert await pending_count(redis, topic, "g1") == 0
    assert metrics.counter_value(CLAIMED, stream=topic, group="g1") == 10


async def test_entries_waiting_in_the_read_ahead_are_not_claimed_again_by_their_own_consumer(
    make_transport: Make, redis: Redis
) -> None:
    # A slow consumer leaves entries it read waiting in its read-ahead longer than the
    # idle time; its own recovery scan must not deliver them a second time (it did: the
    # entries came twice to the same handler loop).
    transport = make_transport(claim_idle_time=0.2)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send_many([message(topic, key=f"k{n}", payload=str(n)) for n in range(20)])
    records = aiter(receiver)
    [first] = await take(records, 1)
    await first.ack()
    await asyncio.sleep(1.0)  # holding the consumer: several recovery scans pass meanwhile
    rest = await take(records, 19)
    assert sorted(int(r.payload) for r in rest) == list(range(1, 20)), "each entry once"
    for record in rest:
        await record.ack()
    with pytest.raises(TimeoutError):
        await take(records, 1, timeout=0.6)  # and nothing comes after them
    await receiver.close()
    assert await pending_count(redis, topic, "g1") == 0


@pytest.mark.parametrize("claim_idle_time", [None, 0.2], ids=["no recovery", "recovery on"])
async def test_an_iteration_left_mid_read_leaves_the_rest_to_the_next_in_order(
    make_transport: Make, redis: Redis, claim_idle_time: float | None
) -> None:
    # A consumer breaks out of its loop in the middle of a read and iterates again: the
    # entries of that read it had not taken come first, in order, once each (they were
    # left for recovery and came after newer entries, out of their key's order).
    transport = make_transport(claim_idle_time=claim_idle_time)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send_many([message(topic, key="k", payload=str(n)) for n in range(20)])
    taken: list[TransportRecord] = []

    async def until(count: int) -> None:
        async for record in receiver:
            taken.append(record)
            await record.ack()
            if len(taken) == count:
                break

    await asyncio.wait_for(until(5), 5)  # the 20 arrive in one read (batch_size is larger)
    await asyncio.sleep(0.6)  # past the claim idle time and the hand-back scan's block time
    await transport.send_many([message(topic, key="k", payload=str(n)) for n in range(20, 30)])
    await asyncio.wait_for(until(30), 5)
    assert [int(r.payload) for r in taken] == list(range(30))
    with pytest.raises(TimeoutError):
        await take(aiter(receiver), 1, timeout=0.6)  # and none of them comes again
    await receiver.close()
    assert await pending_count(redis, topic, "g1") == 0


async def _waiting_behind_a_slow_handler(
    make_transport: Make, metrics: InMemoryMetrics
) -> tuple[RedisStreamTransport, str, RedisStreamReceiver, AsyncIterator[TransportRecord]]:
    """A receiver (claim idle time 0.2 s, max_deliveries 2) that read 20 entries and handled
    the first only, once its own scan claimed each of the other 19 three times:
    (transport, topic, receiver, its record iterator)."""
    transport = make_transport(claim_idle_time=0.2, max_deliveries=2, metrics=metrics)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send_many([message(topic, key=f"k{n}", payload=str(n)) for n in range(20)])
    records = aiter(receiver)
    [first] = await take(records, 1)
    await first.ack()
    await eventually(claimed_at_least(metrics, topic, 19 * 3), what="three self-claims of each")
    return transport, topic, receiver, records


async def _all_handled_none_dead_lettered(
    redis: Redis, receiver: RedisStreamReceiver, rest: list[TransportRecord], metrics: InMemoryMetrics
) -> None:
    """Acknowledge ``rest``, close ``receiver``: nothing pending, nothing dead-lettered."""
    for record in rest:
        await record.ack()
    await receiver.close()
    [topic] = receiver.topics
    assert await pending_count(redis, topic, "g1") == 0
    assert await redis.xlen(f"{topic}.dlq") == 0
    assert metrics.counter_value(DEAD_LETTERED, stream=topic, group="g1") == 0


async def test_read_ahead_entries_claimed_by_their_own_scan_keep_their_delivery_count(
    make_transport: Make, redis: Redis
) -> None:
    # The own recovery scan claims the entries waiting in the read-ahead over and over
    # (their idle time counts while they wait); the claim must not count a delivery
    # (it did: XAUTOCLAIM counted one per scan, so they neared max_deliveries unhandled).
    metrics = InMemoryMetrics()
    _, topic, receiver, records = await _waiting_behind_a_slow_handler(make_transport, metrics)
    counts = await delivery_counts(redis, topic, "g1")
    assert len(counts) == 19
    assert {count for _, count in counts.values()} == {1}, "a self-claim counts no delivery"
    rest = await take(records, 19)
    assert sorted(int(r.payload) for r in rest) == list(range(1, 20)), "each entry once"
    assert all(r.delivery_count == 1 for r in rest)
    await _all_handled_none_dead_lettered(redis, receiver, rest, metrics)


async def test_read_ahead_entries_handed_back_unhandled_are_delivered_not_dead_lettered(
    make_transport: Make, redis: Redis
) -> None:
    # Entries self-claimed while waiting, then handed back unhandled by a close: the next
    # member delivers them for the second time, well within max_deliveries=2 (they were
    # dead-lettered: each self-claim had counted a delivery).
    metrics = InMemoryMetrics()
    transport, topic, slow, _ = await _waiting_behind_a_slow_handler(make_transport, metrics)
    await slow.close()  # the 19 never handled go back to the group
    successor = await opened(transport, "g1", [topic])
    rest = await take(successor, 19)
    assert sorted(int(r.payload) for r in rest) == list(range(1, 20))
    assert all(r.delivery_count == 2 for r in rest)
    counts = await delivery_counts(redis, topic, "g1")
    assert counts == {entry_id_of(r): (successor.consumer, 2) for r in rest}
    await _all_handled_none_dead_lettered(redis, successor, rest, metrics)


async def test_entries_of_a_crashed_consumer_are_counted_and_the_own_waiting_ones_are_not(
    make_transport: Make, redis: Redis
) -> None:
    # One scan claims both: a crashed consumer's entries (a real redelivery, counted) and
    # the entries waiting in this receiver's read-ahead (not delivered again, not counted).
    metrics = InMemoryMetrics()
    transport = make_transport(claim_idle_time=0.2, max_deliveries=2, metrics=metrics)
    topic = topic_of(transport)
    receiver = transport.open("g1", [topic])
    await receiver.ready()  # the group exists; nothing read yet
    await transport.send_many([message(topic, key=f"d{n}", payload=f"dead-{n}") for n in range(5)])
    crashed = f"crashed-{uuid.uuid4().hex[:8]}"
    [[_, taken]] = await redis.xreadgroup("g1", crashed, {topic: ">"})  # and never acknowledged
    assert len(taken) == 5
    await transport.send_many([message(topic, key=f"k{n}", payload=str(n)) for n in range(20)])
    receiver.open_processing()
    records = aiter(receiver)
    [first] = await take(records, 1)
    assert first.payload == "0"
    await first.ack()
    # the crashed entries are claimed, then wait here and are claimed again with the others
    await eventually(claimed_at_least(metrics, topic, 24 * 3), what="three claims of each")
    counts = await delivery_counts(redis, topic, "g1")
    assert len(counts) == 24
    assert {consumer for consumer, _ in counts.values()} == {receiver.consumer}
    rest = await take(records, 24)
    by_payload = {r.payload: r for r in rest}
    assert sorted(by_payload) == sorted([f"dead-{n}" for n in range(5)] + [str(n) for n in range(1, 20)])
    for payload, record in by_payload.items():
        expected = 2 if payload.startswith("dead-") else 1
        assert record.delivery_count == expected, payload
        assert counts[entry_id_of(record)][1] == expected, payload
    for record in rest:
        await record.ack()
    with pytest.raises(TimeoutError):
        await take(records, 1, timeout=0.6)
    await receiver.close()
    assert await pending_count(redis, topic, "g1") == 0
    assert await redis.xlen(f"{topic}.dlq") == 0


async def test_an_entry_past_max_deliveries_goes_to_the_dead_letter_stream(
    make_transport: Make, redis: Redis
) -> None:
    metrics = InMemoryMetrics()
    transport = make_transport(claim_idle_time=0.1, max_deliveries=3, metrics=metrics)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic, key="poison", payload="boom"))
    deliveries = [r.delivery_count for r in await take(receiver, 3)]  # never acked
    assert deliveries == [1, 2, 3]

    async def dead_lettered() -> bool:
        reported = metrics.counter_value(DEAD_LETTERED, stream=topic, group="g1") == 1
        return reported and await redis.xlen(f"{topic}.dlq") == 1

    await eventually(dead_lettered)
    [(_, fields)] = await redis.xrange(f"{topic}.dlq")
    assert fields[b"msg"] == b"boom"
    assert fields[b"key"] == b"poison"
    assert fields[b"wow_origin_stream"] == topic.encode()
    assert fields[b"wow_group"] == b"g1"
    assert fields[b"wow_deliveries"] == b"4"
    assert await pending_count(redis, topic, "g1") == 0
    assert metrics.counter_value(DEAD_LETTERED, stream=topic, group="g1") == 1


async def test_a_claimed_entry_far_past_the_own_pending_ones_is_counted_and_dead_lettered(
    make_transport: Make, redis: Redis
) -> None:
    # Two entries claimed in one scan with 60 entries pending here between them: their
    # delivery counts are read past the first XPENDING page (the second one's was taken
    # as 1, so an entry past max_deliveries was delivered again instead of dead-lettered).
    metrics = InMemoryMetrics()
    transport = make_transport(claim_idle_time=None, max_deliveries=5, metrics=metrics)
    topic = topic_of(transport)
    receiver = transport.open("g1", [topic])
    await receiver.ready()  # nothing read: the scan below is called directly
    await transport.send_many([message(topic, payload=str(n)) for n in range(62)])
    crashed = f"crashed-{uuid.uuid4().hex[:8]}"
    [[_, taken]] = await redis.xreadgroup("g1", crashed, {topic: ">"})
    ids = [raw_id.decode() for raw_id, _ in taken]
    # entries 1..60 pending here (not idle, never read here), 0 and 61 idle in the crashed one
    await redis.xclaim(topic, "g1", receiver.consumer, 0, ids[1:61], justid=True)
    await redis.xclaim(topic, "g1", crashed, 0, [ids[0]], idle=60_000, justid=True)
    await redis.xclaim(topic, "g1", crashed, 0, [ids[61]], idle=60_000, retrycount=5, justid=True)
    assert await receiver.claim_idle(30.0) == 2
    [record] = await take(receiver, 1)
    assert (record.payload, record.delivery_count) == ("0", 2)
    assert await redis.xlen(f"{topic}.dlq") == 1
    [(_, fields)] = await redis.xrange(f"{topic}.dlq")
    assert (fields[b"msg"], fields[b"wow_deliveries"]) == (b"61", b"6")
    assert metrics.counter_value(DEAD_LETTERED, stream=topic, group="g1") == 1
    await receiver.close()


# -- entries that are not messages -------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"other": "x"}, "no msg field"),
        ({"msg": b"\xff\xfe not utf-8", "key": "k"}, "not UTF-8"),
        ({"msg": "fine", "key": b"\xc3"}, "not UTF-8"),
    ],
)
async def test_an_entry_that_is_not_a_message_is_reported_and_left_pending(
    make_transport: Make,
    redis: Redis,
    fields: dict[str, object],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = InMemoryMetrics()
    transport = make_transport(claim_idle_time=None, metrics=metrics)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    bad_id = (await redis.xadd(topic, fields)).decode()  # type: ignore[arg-type]
    await transport.send(message(topic, payload="good"))
    [record] = await take(receiver, 1)
    assert record.payload == "good"
    await record.ack()
    assert metrics.counter_value(UNDECODABLE, stream=topic, group="g1") == 1

    async def only_the_bad_entry_pending() -> bool:
        return await pending_count(redis, topic, "g1") == 1

    await eventually(only_the_bad_entry_pending)
    [row] = await redis.xpending_range(topic, "g1", min="-", max="+", count=10)
    assert row["message_id"].decode() == bad_id
    assert bad_id in caplog.text
    assert reason in caplog.text


async def test_an_entry_that_is_not_a_message_ends_in_the_dead_letter_stream(
    make_transport: Make, redis: Redis
) -> None:
    transport = make_transport(claim_idle_time=0.1, max_deliveries=2)
    topic = topic_of(transport)
    await opened(transport, "g1", [topic])  # the group reads; the test watches the server
    await redis.xadd(topic, {"garbage": "1"})

    async def dead_lettered() -> bool:
        return await redis.xlen(f"{topic}.dlq") == 1

    await eventually(dead_lettered)
    assert await pending_count(redis, topic, "g1") == 0


async def test_a_pending_entry_trimmed_away_is_reported_and_acknowledged(
    make_transport: Make, redis: Redis
) -> None:
    metrics = InMemoryMetrics()
    transport = make_transport(claim_idle_time=0.1, observer=RedisMessageBusObserver(metrics))
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic, payload="soon gone"))
    [record] = await take(receiver, 1)
    await redis.xdel(topic, record.position.rsplit("/", 1)[1])

    async def released_and_reported() -> bool:
        # the server drops the entry before this process has read the reply saying so
        reported = metrics.counter_value(DEAD_LETTERED, stream=topic, group="g1") == 1
        return reported and await pending_count(redis, topic, "g1") == 0

    await eventually(released_and_reported)


# -- connection loss --------------------------------------------------------------------


async def test_a_reader_whose_connection_is_killed_goes_on_reading(
    make_transport: Make, redis: Redis
) -> None:
    metrics = InMemoryMetrics()
    name = f"wowtest-{uuid.uuid4().hex[:10]}"
    transport = make_transport(
        reconnect_backoff=0.01, block_time=5.0, metrics=metrics, url=named_url(REDIS_URL, name)
    )
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic, payload="1"))
    [first] = await take(receiver, 1)
    await first.ack()

    async def blocked_reader() -> bool:
        return bool(await own_clients(redis, name, "xreadgroup"))

    await eventually(blocked_reader)
    for client_id in await own_clients(redis, name, "xreadgroup"):
        await redis.execute_command("CLIENT", "KILL", "ID", client_id)
    await transport.send(message(topic, payload="2"))
    [second] = await take(receiver, 1)
    assert second.payload == "2"
    assert metrics.counter_value("wow.redis.connection_errors", where="XREADGROUP") >= 1


async def test_close_releases_every_task_and_connection(make_transport: Make) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    receivers = [transport.open(f"g{n}", [topic]) for n in range(3)]
    for receiver in receivers:
        await receiver.ready()
        receiver.open_processing()
    await transport.send(message(topic))
    before = {t for t in asyncio.all_tasks() if t.get_name().startswith("wow-redis")}
    assert before
    await transport.close()
    after = {t for t in asyncio.all_tasks() if t.get_name().startswith("wow-redis") and not t.done()}
    assert not after
    pool = transport.client.connection_pool
    assert not pool._in_use_connections  # type: ignore[attr-defined]
    for receiver in receivers:
        assert [r async for r in receiver] == []


async def test_close_right_after_reading_does_not_wait_for_the_blocking_read(make_transport: Make) -> None:
    # A cancellation racing the completion of a send was swallowed by asyncio.wait_for
    # (Python 3.11) when redis-py had a socket timeout: close then waited for BLOCK.
    transport = make_transport(block_time=10.0)
    topic = topic_of(transport)
    for round_no in range(5):
        receiver = await opened(transport, f"g{round_no}", [topic])
        await transport.send_many([message(topic, payload=str(n)) for n in range(300)])
        for record in await take(receiver, 300):
            await record.ack()
        started = asyncio.get_running_loop().time()
        await receiver.close()
        assert asyncio.get_running_loop().time() - started < 5.0  # not the 10 s BLOCK


async def test_a_payload_the_bus_cannot_decode_is_reported_and_left_pending(
    make_transport: Make, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    from wow_core.messaging import MessageSubscription
    from wow_core.testing.support import command, conformance_codec
    from wow_core.transport.bus import TransportCommandBus

    metrics = InMemoryMetrics()
    transport = make_transport(claim_idle_time=None, metrics=metrics)
    named = NamedAggregate("bank", "account")
    bus = TransportCommandBus(transport, conformance_codec())
    topic = bus.topic(named)
    try:
        receiver = bus.receiver(MessageSubscription.of("bank.p", [named]))
        await receiver.ready()
        receiver.open_processing()
        await transport.send(TransportMessage(topic, "a-1", "this is { not json", 0))
        await bus.send(command(named, "a-2"))
        exchange = await asyncio.wait_for(anext(receiver), 10)
        assert exchange.message.aggregate_id.id == "a-2"
        await exchange.ack()
        assert metrics.counter_value(UNDECODABLE, stream=topic, group="bank.p") == 1
        assert "not_json" in caplog.text

        async def only_the_garbage_pending() -> bool:
            return await pending_count(redis, topic, "bank.p") == 1

        await eventually(only_the_garbage_pending)
        await receiver.close()
    finally:
        await bus.close()


async def test_a_payload_that_is_not_encodable_fails_only_its_send(
    make_transport: Make, redis: Redis
) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    results = await asyncio.gather(
        transport.send(message(topic, payload="before")),
        transport.send(message(topic, payload="lone \ud800 surrogate")),
        transport.send(message(topic, payload="after")),
        return_exceptions=True,
    )
    assert results[0] is None
    assert isinstance(results[1], UnicodeEncodeError)
    assert results[2] is None
    assert [fields[b"msg"] for _, fields in await redis.xrange(topic)] == [b"before", b"after"]


async def test_a_group_destroyed_while_reading_is_created_again(make_transport: Make, redis: Redis) -> None:
    transport = make_transport(block_time=0.1)
    topic = topic_of(transport)
    receiver = await opened(transport, "g1", [topic])
    await transport.send(message(topic, payload="1"))
    [first] = await take(receiver, 1)
    await first.ack()
    await redis.xgroup_destroy(topic, "g1")

    async def group_is_back() -> bool:
        return any(g["name"] == b"g1" for g in await redis.xinfo_groups(topic))

    await eventually(group_is_back)
    await transport.send(message(topic, payload="2"))
    # created again like a new group, at the first retained entry: redelivered, not skipped
    again = await take(receiver, 2)
    assert [r.payload for r in again] == ["1", "2"]


async def test_an_error_the_reader_cannot_retry_ends_the_iteration_with_it(
    make_transport: Make, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    from redis.exceptions import ResponseError

    transport = make_transport(block_time=0.1)
    topic = topic_of(transport)
    receiver = transport.open("g1", [topic])
    await receiver.ready()
    await redis.delete(topic)
    await redis.set(topic, "no longer a stream")
    receiver.open_processing()
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await take(receiver, 1)
    assert "stopped" in caplog.text


async def test_ready_fails_after_its_retries_when_the_server_is_down(prefix: str) -> None:
    from wow_redis import RedisSettings

    transport = RedisStreamTransport(
        RedisSettings(url="redis://127.0.0.1:1/0", key_prefix=prefix, send_retries=1, reconnect_backoff=0.01)
    )
    try:
        receiver = transport.open("g1", [f"{prefix}t"])
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(receiver.ready(), 20)
    finally:
        await transport.close()


@pytest.mark.parametrize(
    "recovery",
    [
        pytest.param({"claim_idle_time": 30.0, "claim_interval": 0.1}, id="recovery-scans"),
        pytest.param({"claim_idle_time": None}, id="no-recovery"),
    ],
)
async def test_a_running_member_takes_over_what_a_closed_member_handed_back(
    make_transport: Make, redis: Redis, recovery: dict[str, object]
) -> None:
    leaving = make_transport(claim_idle_time=None)
    staying = make_transport(**recovery)
    topic = topic_of(leaving)
    fence = topic_of(leaving, "fence")
    # The leaving member alone reads all three: nothing races it for them.
    gone = await opened(leaving, "g1", [topic])
    await leaving.send_many([message(topic, payload=str(n)) for n in range(3)])
    assert [r.payload for r in await take(gone, 3)] == ["0", "1", "2"]
    # The staying member is running (past its start-up claim, which would take handed-back
    # entries by itself): it read a record sent after it started.
    receiver = await opened(staying, "g1", [topic, fence])
    await leaving.send(message(fence, payload="fence"))
    assert [r.payload for r in await take(receiver, 1)] == ["fence"]

    await gone.close()  # hands back what it read and did not acknowledge

    # long before the 30 s claim idle time, and without any recovery scan
    records = await take(receiver, 3)
    assert [r.payload for r in records] == ["0", "1", "2"]
    for record in records:
        await record.ack()

    async def all_acknowledged() -> bool:
        return await pending_count(redis, topic, "g1") == 0

    await eventually(all_acknowledged)


async def transport_ready_and_open(receiver: RedisStreamReceiver) -> RedisStreamReceiver:
    await receiver.ready()
    receiver.open_processing()
    return receiver


async def test_an_ack_after_close_still_acknowledges(make_transport: Make, redis: Redis) -> None:
    transport = make_transport()
    topic = topic_of(transport)
    receiver = await transport_ready_and_open(transport.open("g1", [topic]))
    await transport.send(message(topic))
    [record] = await take(receiver, 1)
    await receiver.close()
    assert await pending_count(redis, topic, "g1") == 1
    await record.ack()
    assert await pending_count(redis, topic, "g1") == 0
