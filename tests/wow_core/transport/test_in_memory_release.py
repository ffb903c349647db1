"""InMemoryTransport: a record its consumer released comes back to its partition after a
delay that doubles per delivery; an acknowledgement or a close ends that."""

from __future__ import annotations

import asyncio
import time

import pytest

from wow_core.testing.support import Rig
from wow_core.transport import ReleasingRecord, TransportMessage
from wow_core.transport.in_memory import InMemoryBroker, InMemoryRecord, InMemoryTransport

TOPIC = "wow.test.note.command"
TIMEOUT = 2.0


def record(key: str, payload: str) -> TransportMessage:
    return TransportMessage(TOPIC, key, payload, 0)


@pytest.fixture
async def rig() -> object:
    broker = InMemoryBroker(partitions=1)
    made = Rig(
        lambda: InMemoryTransport(broker=broker, release_delay=0.05, release_delay_max=0.5), TIMEOUT, "test"
    )
    yield made
    await made.aclose()


def test_the_delay_doubles_per_delivery_up_to_its_maximum() -> None:
    transport = InMemoryTransport(release_delay=0.5, release_delay_max=3)
    assert [transport.release_delay_for(n) for n in (1, 2, 3, 4, 100)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert InMemoryTransport().release_delay_for(1) == 1.0, "the default: a second"
    assert InMemoryTransport(release_delay=None).release_delay_for(1) is None
    with pytest.raises(ValueError, match="positive"):
        InMemoryTransport(release_delay=0)


async def test_a_released_record_comes_back_first_later_each_time(rig: Rig) -> None:
    transport = await rig.transport()
    receiver = await rig.open(transport, "g", [TOPIC])
    await transport.send(record("k", "1"))
    [first] = await rig.take(receiver, 1, "the record")
    assert isinstance(first, ReleasingRecord)
    assert isinstance(first, InMemoryRecord)
    waits = []
    held = first
    for delivery in (2, 3):
        released = time.monotonic()
        held.release()
        [again] = await rig.take(receiver, 1, f"delivery {delivery}")
        waits.append(time.monotonic() - released)
        assert (again.payload, again.delivery_count) == ("1", delivery)
        held = again
    assert waits[0] >= 0.045, f"0.05 s: {waits}"
    assert waits[1] >= 0.095, f"then doubled: {waits}"
    await held.ack()
    assert receiver.in_flight == 0


async def test_a_released_record_goes_before_the_queued_ones_of_its_partition(rig: Rig) -> None:
    transport = await rig.transport()
    receiver = await rig.open(transport, "g", [TOPIC])
    await transport.send(record("k", "1"))
    [first] = await rig.take(receiver, 1, "the first record")
    first.release()
    await asyncio.sleep(0.15)  # it is queued again meanwhile, before what comes next
    await transport.send(record("k", "2"))
    taken = await rig.take(receiver, 2, "both")
    assert [(r.payload, r.delivery_count) for r in taken] == [("1", 2), ("2", 1)]


async def test_a_record_acknowledged_after_its_release_is_not_delivered_again(rig: Rig) -> None:
    transport = await rig.transport()
    receiver = await rig.open(transport, "g", [TOPIC])
    await transport.send(record("k", "1"))
    [first] = await rig.take(receiver, 1, "the record")
    first.release()
    await first.ack()
    await asyncio.sleep(0.15)
    await transport.send(record("k", "fence"))
    [got] = await rig.take(receiver, 1, "the fence")
    assert got.payload == "fence"
    assert receiver.poll() is None


async def test_without_a_release_delay_a_released_record_waits_for_its_receiver_to_close() -> None:
    broker = InMemoryBroker(partitions=1)
    rig = Rig(lambda: InMemoryTransport(broker=broker, release_delay=None), TIMEOUT, "test")
    try:
        transport = await rig.transport()
        receiver = await rig.open(transport, "g", [TOPIC])
        await transport.send(record("k", "1"))
        [first] = await rig.take(receiver, 1, "the record")
        first.release()
        await asyncio.sleep(0.1)
        assert receiver.poll() is None
        assert receiver.in_flight == 1
        await receiver.close()
        follower = await rig.open(transport, "g", [TOPIC])
        [again] = await rig.take(follower, 1, "given back on close")
        assert (again.payload, again.delivery_count) == ("1", 2)
    finally:
        await rig.aclose()


async def test_a_receiver_that_closes_gives_its_released_records_back_to_the_group(rig: Rig) -> None:
    transport = await rig.transport()
    receiver = await rig.open(transport, "g", [TOPIC])
    await transport.send(record("k", "1"))
    [first] = await rig.take(receiver, 1, "the record")
    first.release()
    await receiver.close()
    follower = await rig.open(transport, "g", [TOPIC])
    [again] = await rig.take(follower, 1, "given back on close, once")
    assert (again.payload, again.delivery_count) == ("1", 2)
    await asyncio.sleep(0.15)
    assert follower.poll() is None, "the cancelled release gave nothing back a second time"
