from __future__ import annotations

import asyncio
import uuid

from wow_core.command.deadline import Deadlines, deadlines
from wow_core.model import new_id


class Entry:
    def __init__(self) -> None:
        self.done = False
        self.expired = asyncio.Event()

    def expire(self) -> None:
        self.expired.set()


async def test_entries_expire_in_deadline_order_with_one_timer() -> None:
    clock = Deadlines(asyncio.get_running_loop())
    late, early = Entry(), Entry()
    clock.add(late, 0.2)
    clock.add(early, 0.01)
    await asyncio.wait_for(early.expired.wait(), 5)
    assert not late.expired.is_set()
    await asyncio.wait_for(late.expired.wait(), 5)


async def test_a_finished_entry_never_expires() -> None:
    clock = Deadlines(asyncio.get_running_loop())
    finished, other = Entry(), Entry()
    clock.add(finished, 0.01)
    clock.add(other, 0.02)
    finished.done = True
    clock.finished()
    await asyncio.wait_for(other.expired.wait(), 5)
    assert not finished.expired.is_set()
    assert len(clock) == 0


async def test_finished_entries_are_purged_so_memory_follows_live_waits() -> None:
    clock = Deadlines(asyncio.get_running_loop())
    for _ in range(1000):
        entry = Entry()
        clock.add(entry, 30)
        entry.done = True
        clock.finished()
    assert len(clock) <= 64


async def test_one_deadlines_per_loop() -> None:
    assert deadlines() is deadlines()


def test_ids_are_version_4_uuids_and_unique() -> None:
    ids = {new_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    parsed = uuid.UUID(next(iter(ids)))
    assert parsed.version == 4
    assert parsed.variant == uuid.RFC_4122
