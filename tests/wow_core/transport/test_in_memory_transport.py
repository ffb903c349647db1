"""InMemoryTransport specifics beyond the conformance suite: partitions moving between members."""

from __future__ import annotations

import zlib

import pytest

from wow_core.messaging import BusClosedError
from wow_core.model import NamedAggregate, TopicKind
from wow_core.runtime.settings import WowSettings
from wow_core.testing.support import Rig
from wow_core.transport import DecodeFailureDefault, TransportMessage
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport

TOPIC = "wow.test.note.command"
TIMEOUT = 2.0


def key_in_partition(partition: int, partitions: int) -> str:
    for n in range(10_000):
        key = f"k{n}"
        if zlib.crc32(key.encode()) % partitions == partition:
            return key
    raise AssertionError("no key found")


def record(key: str, payload: str) -> TransportMessage:
    return TransportMessage(TOPIC, key, payload, 0)


@pytest.fixture
async def rig() -> object:
    broker = InMemoryBroker(partitions=2)
    made = Rig(lambda: InMemoryTransport(broker=broker), TIMEOUT, "test")
    yield made
    await made.aclose()


async def test_a_moved_partition_waits_for_the_old_members_in_flight_records(rig: Rig) -> None:
    transport = await rig.transport()
    key = key_in_partition(1, 2)  # partition 1 moves to the second member when it joins
    first = await rig.open(transport, "g", [TOPIC])
    await transport.send(record(key, "1"))
    [held] = await rig.take(first, 1, "the first record")
    second = await rig.open(transport, "g", [TOPIC])
    collector = rig.consume(second)
    await transport.send(record(key, "2"))
    await rig.settle()
    assert collector.items == [], "the key's second record overtook its first"
    await held.ack()
    await collector.wait_for(lambda items: len(items) == 1, TIMEOUT, "the second record")
    assert collector.items[0].payload == "2"


async def test_a_moved_partition_gets_the_old_members_records_first_when_it_closes(rig: Rig) -> None:
    transport = await rig.transport()
    key = key_in_partition(1, 2)
    first = await rig.open(transport, "g", [TOPIC])
    await transport.send(record(key, "1"))
    await rig.take(first, 1, "the first record")
    second = await rig.open(transport, "g", [TOPIC])
    collector = rig.consume(second)
    await transport.send(record(key, "2"))
    await first.close()
    await collector.wait_for(lambda items: len(items) == 2, TIMEOUT, "both records")
    assert [r.payload for r in collector.items] == ["1", "2"]
    assert [r.delivery_count for r in collector.items] == [2, 1]


async def test_partitions_stay_with_their_member_when_nobody_moves(rig: Rig) -> None:
    transport = await rig.transport()
    receiver = await rig.open(transport, "g", [TOPIC])
    keys = [key_in_partition(0, 2), key_in_partition(1, 2)]
    for n in range(4):
        for key in keys:
            await transport.send(record(key, f"{key}:{n}"))
    records = await rig.take(receiver, 8, "every record")
    assert receiver.in_flight == 8
    for key in keys:
        assert [r.payload for r in records if r.key == key] == [f"{key}:{n}" for n in range(4)]
    for r in records:
        await r.ack()
        await r.ack()  # idempotent
    assert receiver.in_flight == 0
    assert transport.broker.backlog("g", TOPIC) == 0


async def test_nothing_is_kept_for_a_topic_no_group_opened(rig: Rig) -> None:
    transport = await rig.transport()
    await transport.send(record("k", "lost"))
    receiver = await rig.open(transport, "g", [TOPIC])
    assert transport.broker.backlog("g", TOPIC) == 0
    await transport.send(record("k", "kept"))
    assert transport.broker.backlog("g", TOPIC) == 1
    [got] = await rig.take(receiver, 1, "the record")
    assert got.payload == "kept"


async def test_an_ack_of_a_record_given_back_is_not_delivered_again(rig: Rig) -> None:
    transport = await rig.transport()
    first = await rig.open(transport, "g", [TOPIC])
    await transport.send(record("k", "late-ack"))
    [late] = await rig.take(first, 1, "the record")
    await first.close()
    await late.ack()  # the work finished after the receiver closed
    second = await rig.open(transport, "g", [TOPIC])
    await transport.send(record("k", "fence"))
    [got] = await rig.take(second, 1, "the fence")
    assert got.payload == "fence"


async def test_closing_one_client_leaves_the_broker_to_the_others(rig: Rig) -> None:
    closing = await rig.transport()
    staying = await rig.transport()
    receiver = await rig.open(staying, "g", [TOPIC])
    await closing.close()
    with pytest.raises(BusClosedError):
        await closing.send(record("k", "x"))
    with pytest.raises(BusClosedError):
        closing.open("g", [TOPIC])
    with pytest.raises(BusClosedError):
        await closing.start()
    await staying.send(record("k", "y"))
    assert [r.payload for r in await rig.take(receiver, 1)] == ["y"]


async def test_bad_arguments_are_refused() -> None:
    transport = InMemoryTransport()
    with pytest.raises(ValueError, match="group"):
        transport.open("", [TOPIC])
    with pytest.raises(ValueError, match="topic"):
        transport.open("g", [])
    with pytest.raises(ValueError, match="topic"):
        transport.open("g", [""])
    with pytest.raises(TypeError, match="TransportMessage"):
        await transport.send("not a record")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition"):
        InMemoryBroker(partitions=0)
    receiver = transport.open("g", [TOPIC])
    await receiver.close()
    with pytest.raises(BusClosedError):
        await receiver.ready()
    with pytest.raises(BusClosedError):
        receiver.open_processing()
    await transport.close()


def test_from_settings_names_topics_with_prefix_and_context_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_MESSAGING__TOPIC_PREFIX", "acme.")
    monkeypatch.setenv("WOW_MESSAGING__CONTEXT_ALIASES", '{"bank": "finance"}')
    transport = InMemoryTransport.from_settings(WowSettings.load())
    assert (
        transport.naming.topic(NamedAggregate("bank", "account"), TopicKind.EVENT)
        == "acme.finance.account.event"
    )
    assert transport.naming.topic(NamedAggregate("shop", "order"), TopicKind.STATE) == "acme.shop.order.state"
    assert transport.decode_failure_default is DecodeFailureDefault.DEAD_LETTER
    assert transport.name == "in_memory"


def test_the_default_naming() -> None:
    transport = InMemoryTransport()
    assert (
        transport.naming.topic(NamedAggregate("bank", "account"), TopicKind.COMMAND)
        == "wow.bank.account.command"
    )


def test_the_default_naming_takes_a_kind_separator_and_aliases() -> None:
    from wow_core.transport import DefaultTopicNaming

    naming = DefaultTopicNaming("p-", {"bank": "b"}, kind_separator=":")
    assert naming.topic(NamedAggregate("bank", "account"), TopicKind.EVENT) == "p-b.account:event"
    assert naming.topic(NamedAggregate("shop", "order"), TopicKind.STATE) == "p-shop.order:state"


async def test_a_second_concurrent_pull_is_a_clear_error(rig: Rig) -> None:
    import asyncio

    transport = await rig.transport()
    receiver = await rig.open(transport, "g", [TOPIC])
    first = asyncio.create_task(anext(receiver))
    await rig.settle()
    with pytest.raises(RuntimeError, match="already being iterated"):
        await anext(receiver)
    await transport.send(record("k", "x"))
    got = await asyncio.wait_for(first, TIMEOUT)
    assert got.payload == "x"


async def test_takes_only_when_a_member_could_process_the_record() -> None:
    broker = InMemoryBroker(partitions=2)
    transport = InMemoryTransport(broker=broker)
    other = "wow.test.other.command"
    # no group: a record reaches nobody, marked or not
    assert not transport.takes(TOPIC)
    assert not transport.takes(TOPIC, handled_locally=True)
    dropping = transport.open("service", [TOPIC, other])
    assert transport.takes(TOPIC)
    assert transport.takes(TOPIC, handled_locally=True)  # it did not say it drops them
    dropping.drop_handled_locally([TOPIC, "wow.test.unsubscribed.command"])
    assert dropping.drops_handled_locally == frozenset({TOPIC})
    assert not transport.takes(TOPIC, handled_locally=True)
    assert transport.takes(TOPIC)  # a record not handled locally is processed
    assert transport.takes(other, handled_locally=True)  # it processes the other topic's
    replica = InMemoryTransport(broker=broker).open("service", [TOPIC])
    replica.drop_handled_locally([TOPIC])
    assert not transport.takes(TOPIC, handled_locally=True)
    audit = InMemoryTransport(broker=broker).open("audit", [TOPIC])
    assert transport.takes(TOPIC, handled_locally=True)  # another group's plain member
    await audit.close()
    # the group stays, without members: its records wait for a member to come
    assert transport.takes(TOPIC, handled_locally=True)
    await transport.close()
