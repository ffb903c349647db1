"""LanePool: one turn at a time per lane, in readiness order; lanes that suspend run side
by side on helpers woken one at a time; idle workers beyond the cap end; close cancels and
hands back; a failing turn loses only its own lane."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque

import pytest

from wow_core.concurrency import LanePool

PROBE: contextvars.ContextVar[str] = contextvars.ContextVar("probe", default="empty")


class Lane:
    """A test lane: a queue of steps; each step is an optional gate its turn waits on."""

    def __init__(self, name: str, steps: int = 1) -> None:
        self.name = name
        self.steps: deque[asyncio.Event | None] = deque([None] * steps)
        self.done = 0


class Owner:
    """The pool's owner as the executors use it: a turn runs the lane's first step and
    says whether another one is due; it records what ran, when, and in which task."""

    def __init__(self, *, max_idle_workers: int = 16) -> None:
        self.pool: LanePool[Lane] = LanePool(
            self.turn, abandon=self.abandon, name="test-lanes", max_idle_workers=max_idle_workers
        )
        self.order: list[tuple[str, int]] = []
        self.running: dict[str, int] = {}
        self.overlaps: list[str] = []
        self.abandoned: list[str] = []
        self.tasks: set[asyncio.Task[object]] = set()
        self.changed = asyncio.Event()
        self.fail: set[tuple[str, int]] = set()
        self.probes: list[str] = []

    async def turn(self, lane: Lane) -> bool:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.probes.append(PROBE.get())
        if self.running.get(lane.name):
            self.overlaps.append(lane.name)
        self.running[lane.name] = self.running.get(lane.name, 0) + 1
        step = lane.done
        try:
            self.order.append((lane.name, step))
            self.changed.set()
            gate = lane.steps[0]
            if gate is not None:
                await gate.wait()
            if (lane.name, step) in self.fail:
                raise RuntimeError(f"step {step} of {lane.name} failed")
        finally:
            self.running[lane.name] -= 1
        lane.steps.popleft()
        lane.done += 1
        self.changed.set()
        return bool(lane.steps)

    def abandon(self, lane: Lane) -> None:
        self.abandoned.append(lane.name)
        lane.steps.clear()
        self.changed.set()

    async def until(self, predicate: object, timeout: float = 5.0) -> None:
        assert callable(predicate)
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


async def test_one_lanes_turns_run_one_at_a_time_in_order() -> None:
    owner = Owner()
    gate = asyncio.Event()
    lane = Lane("a", steps=5)
    lane.steps[1] = gate  # the second turn suspends: the third must not start meanwhile
    owner.pool.ready(lane)
    await owner.until(lambda: len(owner.order) == 2)
    for _ in range(5):
        await asyncio.sleep(0)
    assert owner.order == [("a", 0), ("a", 1)]
    gate.set()
    await owner.until(lambda: lane.done == 5)
    assert owner.order == [("a", n) for n in range(5)]
    assert owner.overlaps == []


async def test_lanes_start_their_turns_in_the_order_they_became_ready_and_take_turns() -> None:
    owner = Owner()
    lanes = [Lane(name, steps=2) for name in "abc"]
    for lane in lanes:
        owner.pool.ready(lane)
    await owner.until(lambda: all(lane.done == 2 for lane in lanes))
    # A lane with more goes back to the end of the queue: fairness between lanes.
    assert owner.order == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1)]


async def test_nothing_runs_inside_ready() -> None:
    owner = Owner()
    owner.pool.ready(Lane("a"))
    assert owner.order == []
    await owner.until(lambda: owner.order == [("a", 0)])


async def test_turns_that_never_suspend_are_drained_by_one_worker_and_one_helper() -> None:
    owner = Owner()
    lanes = [Lane(f"k{n}", steps=3) for n in range(300)]
    for lane in lanes:
        owner.pool.ready(lane)
    await owner.until(lambda: all(lane.done == 3 for lane in lanes))
    assert len(owner.tasks) <= 2  # the worker that drained, and the helper it woke
    assert 1 <= owner.pool.workers <= 2  # they outlive the work, parked


async def test_lanes_suspended_in_their_turn_run_in_parallel_on_helpers_woken_one_by_one() -> None:
    owner = Owner()
    gate = asyncio.Event()
    lanes = [Lane(f"k{n}") for n in range(20)]
    for lane in lanes:
        lane.steps[0] = gate
        owner.pool.ready(lane)
    await owner.until(lambda: len(owner.order) == 20)  # all 20 suspended at once
    assert len(owner.tasks) == 20  # one worker per suspended lane, not more
    assert owner.pool.workers == 20
    gate.set()
    await owner.until(lambda: all(lane.done == 1 for lane in lanes))


async def test_idle_workers_beyond_the_cap_end() -> None:
    owner = Owner(max_idle_workers=3)
    gate = asyncio.Event()
    lanes = [Lane(f"k{n}") for n in range(10)]
    for lane in lanes:
        lane.steps[0] = gate
        owner.pool.ready(lane)
    await owner.until(lambda: len(owner.order) == 10)
    gate.set()
    await owner.until(lambda: all(lane.done == 1 for lane in lanes))
    async with asyncio.timeout(5):
        while owner.pool.workers > 3:
            alive = [task for task in owner.tasks if not task.done()]
            await asyncio.wait(alive, return_when=asyncio.FIRST_COMPLETED)
    assert owner.pool.workers == 3
    # Parked workers are reused: new work creates no task while one is parked.
    owner.pool.ready(Lane("again"))
    await owner.until(lambda: ("again", 0) in owner.order)
    assert owner.pool.workers == 3


async def test_a_turn_that_fails_loses_its_lane_only_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    owner = Owner()
    owner.fail.add(("bad", 1))
    bad, good = Lane("bad", steps=3), Lane("good", steps=3)
    with caplog.at_level(logging.ERROR, logger="wow_core.concurrency.lane_pool"):
        owner.pool.ready(bad)
        owner.pool.ready(good)
        await owner.until(lambda: good.done == 3 and owner.abandoned == ["bad"])
    assert ("bad", 2) not in owner.order
    assert "a turn failed" in caplog.text
    assert "step 1 of bad failed" in caplog.text
    later = Lane("later")
    owner.pool.ready(later)  # the worker went on
    await owner.until(lambda: later.done == 1)


async def test_close_cancels_a_turn_in_progress_abandons_its_lane_and_hands_back_the_ready_ones() -> None:
    owner = Owner(max_idle_workers=1)
    never = asyncio.Event()
    stuck = Lane("stuck", steps=2)
    stuck.steps[0] = never
    owner.pool.ready(stuck)
    await owner.until(lambda: owner.order == [("stuck", 0)])
    left = await owner.pool.close()
    assert owner.abandoned == ["stuck"]
    assert left == []
    assert owner.pool.workers == 0
    assert all(task.done() for task in owner.tasks)
    # Closed: a lane made ready now is only queued, and close hands it back.
    late = Lane("late")
    owner.pool.ready(late)
    for _ in range(5):
        await asyncio.sleep(0)
    assert ("late", 0) not in owner.order
    assert await owner.pool.close() == [late]


async def test_a_worker_cancelled_outside_close_abandons_its_lane_and_another_takes_over() -> None:
    owner = Owner()
    never = asyncio.Event()
    stuck = Lane("stuck", steps=2)
    stuck.steps[0] = never
    owner.pool.ready(stuck)
    await owner.until(lambda: owner.order == [("stuck", 0)])
    (worker,) = [task for task in owner.tasks if not task.done()]
    others = [Lane(f"k{n}") for n in range(3)]
    for lane in others:
        owner.pool.ready(lane)
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    assert owner.abandoned == ["stuck"]
    await owner.until(lambda: all(lane.done == 1 for lane in others))


async def test_run_now_runs_a_turn_that_does_not_suspend_inside_the_call_in_an_empty_context() -> None:
    owner = Owner()
    PROBE.set("caller")
    lane = Lane("now", steps=2)
    owner.pool.run_now(lane)
    assert owner.order == [("now", 0)]  # before run_now returned
    (task,) = owner.tasks
    assert task is not asyncio.current_task()  # in a task of its own
    assert owner.probes == ["empty"]  # in an empty context
    # It had more: the lane was made ready and a worker runs its next turn.
    await owner.until(lambda: lane.done == 2)
    assert owner.order == [("now", 0), ("now", 1)]
    assert owner.probes == ["empty", "empty"]


async def test_run_now_of_a_turn_that_suspends_is_a_task_close_cancels() -> None:
    owner = Owner()
    never = asyncio.Event()
    lane = Lane("now")
    lane.steps[0] = never
    owner.pool.run_now(lane)
    assert owner.pool.workers == 1
    await owner.pool.close()
    assert owner.abandoned == ["now"]
    assert owner.pool.workers == 0
    after = Lane("after")
    owner.pool.run_now(after)  # closed: only queued, never run
    assert owner.order == [("now", 0)]
    assert await owner.pool.close() == [after]


def test_max_idle_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_idle_workers"):
        LanePool(Owner().turn, abandon=lambda lane: None, name="x", max_idle_workers=0)
