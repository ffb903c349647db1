"""Properties of InMemoryTransport's consumer groups under any interleaving (hypothesis).

Members join, pull, acknowledge and close in any order while records are sent. Whatever
happens: a record of a key is delivered to a member only when every earlier record of that
key is acknowledged or held by that same member (so a key's records never overtake one
another), a record is held by at most one member at a time, and in the end every record
is acknowledged exactly when something acknowledged it — nothing is lost.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from wow_core.transport.in_memory import (
    InMemoryBroker,
    InMemoryRecord,
    InMemoryTransport,
    InMemoryTransportReceiver,
)
from wow_core.transport.spi import TransportMessage

TOPIC = "t"
KEYS = ["a", "b", "c", "d"]

operation = st.one_of(
    st.tuples(st.just("send"), st.integers(0, len(KEYS) - 1)),
    st.tuples(st.just("join"), st.booleans()),
    st.tuples(st.just("poll"), st.integers(0, 5)),
    st.tuples(st.just("ack"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("close"), st.integers(0, 5)),
)


def check_order(
    record: InMemoryRecord,
    member: InMemoryTransportReceiver,
    keys: list[str],
    seen: dict[int, InMemoryRecord],
) -> None:
    """Every earlier record of the key was delivered, and is acked or held by ``member``."""
    seen[record.offset] = record
    for offset in range(record.offset):
        if keys[offset] != record.key:
            continue
        earlier = seen.get(offset)
        assert earlier is not None, f"{record} overtook the record at offset {offset}"
        assert earlier.acked or earlier.holder is member, (
            f"{record} delivered to {member} while {earlier} is held by another member"
        )


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=40), st.integers(1, 4))
def test_consumer_group_invariants_hold_for_any_interleaving(
    ops: list[tuple[object, ...]], partitions: int
) -> None:
    async def scenario() -> None:
        transport = InMemoryTransport(broker=InMemoryBroker(partitions))
        members: list[InMemoryTransportReceiver] = []
        held: dict[int, list[InMemoryRecord]] = {}
        keys: list[str] = []  # the key of every record sent, by offset
        seen: dict[int, InMemoryRecord] = {}  # this group's records delivered so far
        acked_by_us: set[int] = set()
        offset = 0

        def join(opened: bool) -> None:
            member = transport.open("g", [TOPIC])
            if opened:
                member.open_processing()
            members.append(member)
            held[len(members) - 1] = []

        join(True)  # the group exists before the first record
        for op in ops:
            kind = op[0]
            live = [i for i, m in enumerate(members) if not m._closed]
            if kind == "send":
                keys.append(KEYS[int(op[1])])  # type: ignore[call-overload]
                await transport.send(TransportMessage(TOPIC, keys[-1], str(offset), 0))
                offset += 1
            elif kind == "join":
                join(bool(op[1]))
            elif kind == "poll" and live:
                index = live[int(op[1]) % len(live)]  # type: ignore[call-overload]
                member = members[index]
                member.open_processing()
                record = member.poll()
                if record is not None:
                    assert record.holder is member
                    check_order(record, member, keys, seen)
                    held[index].append(record)
            elif kind == "ack" and live:
                index = live[int(op[1]) % len(live)]  # type: ignore[call-overload]
                mine = [r for r in held[index] if r.holder is members[index]]
                if mine:
                    record = mine[int(op[2]) % len(mine)]  # type: ignore[call-overload]
                    await record.ack()
                    acked_by_us.add(record.offset)
            elif kind == "close" and live:
                index = live[int(op[1]) % len(live)]  # type: ignore[call-overload]
                await members[index].close()
                held[index].clear()

        # In the end one member drains the group: every record not acknowledged comes.
        for member in members:
            await member.close()
        last = transport.open("g", [TOPIC])
        last.open_processing()
        while (record := last.poll()) is not None:
            assert record.offset not in acked_by_us, f"{record} was acknowledged, yet delivered again"
            check_order(record, last, keys, seen)
            await record.ack()
            acked_by_us.add(record.offset)
        assert acked_by_us == set(range(offset)), "a record was lost"
        assert transport.broker.backlog("g", TOPIC) == 0
        await transport.close()

    asyncio.run(scenario())
