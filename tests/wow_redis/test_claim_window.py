"""Recovery: an entry deleted, or acknowledged, between the claim and the fetch.

A recovery scan claims with ``XAUTOCLAIM ... JUSTID`` (counting no delivery), then fetches
the entries it delivers again with ``XCLAIM`` (counting one). An entry deleted from the
stream (``XDEL``, or trimmed by ``MAXLEN``) between the two is dropped from the pending
list by Redis 7's ``XCLAIM`` and not returned: it must be reported as trimmed, once,
like the deleted ids ``XAUTOCLAIM`` reports itself. One acknowledged in that window was
handled: it is neither reported nor delivered. The window is made deterministic by
running the ``XDEL`` (or ``XACK``) right before the receiver's fetch.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.wow_redis.helpers import message, take
from wow_core.model import NamedAggregate, TopicKind
from wow_redis import RedisMessageBusObserver, RedisStreamReceiver, RedisStreamTransport

pytestmark = pytest.mark.redis

Make = Callable[..., RedisStreamTransport]

TRIMMED = "trimmed before processing"


class Recording(RedisMessageBusObserver):
    """Keeps every dead-letter report: (stream, group, entry id, deliveries, reason)."""

    def __init__(self) -> None:
        super().__init__()
        self.dead: list[tuple[str, str, str, int, str]] = []

    def dead_lettered(self, stream: str, group: str, entry_id: str, deliveries: int, reason: str) -> None:
        self.dead.append((stream, group, entry_id, deliveries, reason))
        super().dead_lettered(stream, group, entry_id, deliveries, reason)


async def _crashed_entries(
    transport: RedisStreamTransport, redis: Redis, own_between: int
) -> tuple[str, RedisStreamReceiver, list[str], list[str]]:
    """Four entries idle in a crashed consumer (ids 0, 1, -2, -1 of the stream) with
    ``own_between`` entries pending in the receiver between the second and the third (not
    idle, never read by it: with 60, the third's count is past the first XPENDING page).

    Returns (topic, receiver, the four idle ids, the own ids between them); the receiver is
    ready, processing not open: only the scans the test calls run.
    """
    topic = transport.naming.topic(NamedAggregate("bank", "account"), TopicKind.COMMAND)
    receiver = transport.open("g1", [topic])
    await receiver.ready()
    await transport.send_many([message(topic, key=f"k{n}", payload=str(n)) for n in range(4 + own_between)])
    crashed = f"crashed-{uuid.uuid4().hex[:8]}"
    [[_, taken]] = await redis.xreadgroup("g1", crashed, {topic: ">"})
    ids = [raw_id.decode() for raw_id, _ in taken]
    idle = [ids[0], ids[1], ids[-2], ids[-1]]
    own = ids[2:-2]
    if own:
        await redis.xclaim(topic, "g1", receiver.consumer, 0, own, justid=True)
    await redis.xclaim(topic, "g1", crashed, 0, idle, idle=60_000, justid=True)
    return topic, receiver, idle, own


def _in_the_window(receiver: RedisStreamReceiver, action: Callable[[], Awaitable[Any]]) -> list[list[str]]:
    """Run ``action`` between the claim (``XAUTOCLAIM ... JUSTID``) and the fetch of the
    entries delivered again; returns the id lists the fetch was given."""
    original = receiver._redeliver
    calls: list[list[str]] = []

    async def redeliver(topic: str, ids: list[str]) -> None:
        calls.append(list(ids))
        if len(calls) == 1:
            await action()
        await original(topic, ids)

    receiver._redeliver = redeliver  # type: ignore[method-assign]
    return calls


async def _pending(redis: Redis, topic: str) -> dict[str, tuple[str, int]]:
    rows = await redis.xpending_range(topic, "g1", min="-", max="+", count=10_000)
    return {
        row["message_id"].decode(): (row["consumer"].decode(), int(row["times_delivered"])) for row in rows
    }


async def _nothing_more_then_nothing_pending(
    redis: Redis, receiver: RedisStreamReceiver, topic: str, own: list[str]
) -> None:
    """No further record; once the own entries are acknowledged and the receiver closed,
    nothing is pending and nothing went to the dead-letter stream."""
    with pytest.raises(TimeoutError):
        await take(receiver, 1, timeout=0.5)
    if own:
        await redis.xack(topic, "g1", *own)
    await receiver.close()
    assert await _pending(redis, topic) == {}
    assert await redis.xlen(f"{topic}.dlq") == 0


async def _the_other_three_delivered_again(
    receiver: RedisStreamReceiver, redis: Redis, topic: str, idle: list[str], gone: str
) -> None:
    """The claimed entries but ``gone`` are delivered once each, in order, with a count of 2
    (pending here with it), ``gone`` is not pending, and they are acknowledged."""
    records = await take(receiver, 3)
    expected = [entry for entry in idle if entry != gone]
    assert [r.position.rsplit("/", 1)[1] for r in records] == expected
    assert [r.delivery_count for r in records] == [2, 2, 2]
    pending = await _pending(redis, topic)
    assert {i: pending[i] for i in expected} == {i: (receiver.consumer, 2) for i in expected}
    assert gone not in pending
    for record in records:
        await record.ack()


@pytest.mark.parametrize("own_between", [0, 60], ids=["one page", "past the first page"])
async def test_an_entry_deleted_between_the_claim_and_the_fetch_is_reported_as_trimmed_once(
    make_transport: Make, redis: Redis, own_between: int
) -> None:
    # It was neither delivered nor reported: Redis 7's XCLAIM drops a deleted entry from
    # the pending list without returning it, and the counts, read after that XCLAIM, no
    # longer held it, so it looked acknowledged.
    observer = Recording()
    transport = make_transport(claim_idle_time=None, observer=observer)
    topic, receiver, idle, own = await _crashed_entries(transport, redis, own_between)
    victim = idle[2]

    async def delete() -> None:
        assert await redis.xdel(topic, victim) == 1

    calls = _in_the_window(receiver, delete)
    assert await receiver.claim_idle(30.0) == 4
    assert calls == [idle], "the four claimed entries are fetched in one call"
    assert observer.dead == [(topic, "g1", victim, 0, TRIMMED)], "reported once, as trimmed"
    await _the_other_three_delivered_again(receiver, redis, topic, idle, victim)
    await _nothing_more_then_nothing_pending(redis, receiver, topic, own)
    assert observer.dead == [(topic, "g1", victim, 0, TRIMMED)], "and not again"


@pytest.mark.parametrize("own_between", [0, 60], ids=["one page", "past the first page"])
async def test_an_entry_acknowledged_between_the_claim_and_the_fetch_is_neither_reported_nor_delivered(
    make_transport: Make, redis: Redis, own_between: int
) -> None:
    # Its previous (slow, not crashed) owner finished it meanwhile: it was handled.
    observer = Recording()
    transport = make_transport(claim_idle_time=None, observer=observer)
    topic, receiver, idle, own = await _crashed_entries(transport, redis, own_between)
    finished = idle[2]

    async def acknowledge() -> None:
        assert await redis.xack(topic, "g1", finished) == 1

    _in_the_window(receiver, acknowledge)
    assert await receiver.claim_idle(30.0) == 4
    await _the_other_three_delivered_again(receiver, redis, topic, idle, finished)
    await _nothing_more_then_nothing_pending(redis, receiver, topic, own)
    assert observer.dead == []
    assert await redis.xlen(topic) == 4 + own_between, "nothing deleted: the entry was handled"
