"""``HandOffDeadlines``: one loop timer for every copy waiting for its hand-off result."""

from __future__ import annotations

import asyncio
import random

import pytest
import pytest_asyncio

from wow_core.messaging.local_first.deadlines import HandOffDeadlines


class Lane:
    def __init__(self, name: str) -> None:
        self.name = name
        self.armed = 0


class Expired:
    def __init__(self) -> None:
        self.lanes: list[str] = []
        self.event = asyncio.Event()

    def __call__(self, lane: Lane) -> None:
        assert lane.armed == 0  # reset before the lane hears of it
        self.lanes.append(lane.name)
        self.event.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.lanes) < count:
                self.event.clear()
                await self.event.wait()


@pytest_asyncio.fixture
async def timers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The ``when`` of every ``call_at`` on the running loop."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback, *args, context=None):  # type: ignore[no-untyped-def]
        armed.append(when)
        return call_at(when, callback, *args, context=context)

    monkeypatch.setattr(loop, "call_at", counting)
    return armed


async def test_many_waits_share_one_timer_and_expire_in_deadline_order(timers: list[float]) -> None:
    expired = Expired()
    deadlines: HandOffDeadlines[Lane] = HandOffDeadlines(expired)
    now = asyncio.get_running_loop().time()
    lanes = [Lane(f"l{n}") for n in range(100)]
    offsets = list(range(100))
    random.Random(15).shuffle(offsets)
    for lane, offset in zip(lanes, offsets, strict=True):
        deadlines.add(lane, now + 0.05 + offset * 0.0002)
    # Re-armed only when a wait's deadline is earlier than the armed one, never per wait.
    assert len(timers) <= 1 + sum(1 for n in range(1, 100) if offsets[n] < min(offsets[:n]))
    assert len(timers) < 10
    assert deadlines.waiting == 100
    await expired.until(100)
    by_deadline = [lane.name for _, lane in sorted(zip(offsets, lanes, strict=True), key=lambda p: p[0])]
    assert expired.lanes == by_deadline
    assert deadlines.waiting == 0
    assert not deadlines.timer_armed


async def test_expiry_follows_the_deadlines_not_the_order_of_adding(timers: list[float]) -> None:
    expired = Expired()
    deadlines: HandOffDeadlines[Lane] = HandOffDeadlines(expired)
    now = asyncio.get_running_loop().time()
    late, early = Lane("late"), Lane("early")
    deadlines.add(late, now + 30)  # far enough that a loaded machine never reaches it here
    deadlines.add(early, now + 0.02)  # earlier than the armed timer: re-armed for it
    await expired.until(1)
    assert expired.lanes == ["early"]
    assert timers[-1] == now + 30, "after the early one, the timer is armed for the late deadline"
    assert deadlines.waiting == 1
    deadlines.forget(late)
    assert deadlines.waiting == 0
    deadlines.close()


async def test_a_forgotten_wait_never_expires_and_holds_no_timer() -> None:
    expired = Expired()
    deadlines: HandOffDeadlines[Lane] = HandOffDeadlines(expired)
    now = asyncio.get_running_loop().time()
    kept, forgotten = Lane("kept"), Lane("forgotten")
    deadlines.add(forgotten, now + 0.01)
    deadlines.add(kept, now + 0.03)
    deadlines.forget(forgotten)
    deadlines.forget(forgotten)  # twice: counted once
    assert forgotten.armed == 0
    assert deadlines.waiting == 1
    await expired.until(1)
    assert expired.lanes == ["kept"]
    assert not deadlines.timer_armed


async def test_forgotten_waits_do_not_accumulate() -> None:
    deadlines: HandOffDeadlines[Lane] = HandOffDeadlines(Expired())
    now = asyncio.get_running_loop().time()
    lane = Lane("busy")
    for n in range(10_000):  # a lane whose results always come before the deadline
        deadlines.add(lane, now + 30 + n * 1e-6)
        deadlines.forget(lane)
    assert deadlines.waiting == 0
    assert len(deadlines._heap) <= 2 * deadlines.waiting + 65
    deadlines.close()


async def test_a_lane_waiting_again_expires_only_for_its_current_wait(timers: list[float]) -> None:
    expired = Expired()
    deadlines: HandOffDeadlines[Lane] = HandOffDeadlines(expired)
    now = asyncio.get_running_loop().time()
    lane = Lane("again")
    deadlines.add(lane, now + 0.01)
    deadlines.forget(lane)  # its first copy was decided in time
    # the next copy waits; its deadline far enough that a loaded machine does not reach it
    # when the first timer fires (a 0.03 s margin once failed on CI)
    deadlines.add(lane, now + 2.0)
    # the loop runs due timers in deadline order: the first one's has run when this returns
    await asyncio.sleep(0.05)
    assert timers[-1] == now + 2.0, "the first deadline's timer fired and was armed again"
    assert expired.lanes == []  # the first deadline passed, but that wait was over
    await expired.until(1)
    assert expired.lanes == ["again"]


async def test_close_cancels_the_timer_and_every_wait() -> None:
    expired = Expired()
    deadlines: HandOffDeadlines[Lane] = HandOffDeadlines(expired)
    lane = Lane("closed")
    deadlines.add(lane, asyncio.get_running_loop().time() + 0.01)
    deadlines.close()
    assert lane.armed == 0
    assert deadlines.waiting == 0
    assert not deadlines.timer_armed
    await asyncio.sleep(0.03)
    assert expired.lanes == []
