from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wow_core.runtime.keyed_executor import ExecutorClosedError, KeyedExecutor


async def test_one_keys_work_runs_in_submission_order_one_at_a_time() -> None:
    executor = KeyedExecutor(64)
    seen: list[int] = []
    running = 0
    overlap = False

    def work(i: int):  # type: ignore[no-untyped-def]
        async def run() -> None:
            nonlocal running, overlap
            running += 1
            overlap = overlap or running > 1
            await asyncio.sleep(0)
            seen.append(i)
            running -= 1

        return run

    for i in range(30):
        await executor.submit("a", work(i))
    assert await executor.drain(5)
    assert seen == list(range(30))
    assert not overlap


async def test_different_keys_run_in_parallel() -> None:
    executor = KeyedExecutor(64)
    started = {key: asyncio.Event() for key in "abc"}
    release = asyncio.Event()

    def work(key: str):  # type: ignore[no-untyped-def]
        async def run() -> None:
            started[key].set()
            await release.wait()

        return run

    for key in "abc":
        await executor.submit(key, work(key))
    # All three started while none finished: they run at once.
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 5)
    assert executor.active_keys == 3
    release.set()
    assert await executor.drain(5)
    assert executor.active_keys == 0


async def test_total_in_flight_work_is_bounded() -> None:
    executor = KeyedExecutor(2)
    release = asyncio.Event()

    async def blocked() -> None:
        await release.wait()

    await executor.submit("a", blocked)
    await executor.submit("b", blocked)
    third = asyncio.create_task(executor.submit("c", blocked))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not third.done()
    assert executor.in_flight == 2
    release.set()
    await asyncio.wait_for(third, 5)
    assert await executor.drain(5)
    assert executor.in_flight == 0


async def test_run_returns_results_and_raises_errors_without_breaking_the_lane() -> None:
    executor = KeyedExecutor(4)

    async def fail() -> int:
        raise ValueError("boom")

    async def ok() -> int:
        return 7

    with pytest.raises(ValueError, match="boom"):
        await executor.run("k", fail)
    assert await executor.run("k", ok) == 7


async def test_a_failing_submitted_work_is_logged_and_the_lane_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    executor = KeyedExecutor(4)
    done = asyncio.Event()

    async def fail() -> None:
        raise RuntimeError("bad work")

    async def then() -> None:
        done.set()

    await executor.submit("k", fail)
    await executor.submit("k", then)
    await asyncio.wait_for(done.wait(), 5)
    assert "bad work" in caplog.text


async def test_close_refuses_new_work_and_cancels_what_overruns() -> None:
    executor = KeyedExecutor(4)
    never = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await executor.submit("k", stuck)
    await executor.submit("k", stuck)
    assert not await executor.close(timeout=0.05)
    assert cancelled.is_set()
    assert executor.in_flight == 0
    with pytest.raises(ExecutorClosedError):
        await executor.submit("k", stuck)


async def test_close_lets_admitted_work_finish() -> None:
    executor = KeyedExecutor(4)
    finished: list[int] = []

    async def work() -> None:
        await asyncio.sleep(0)
        finished.append(1)

    for _ in range(3):
        await executor.submit("k", work)
    assert await executor.close(timeout=5)
    assert finished == [1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(
    jobs=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=60),
    bound=st.integers(1, 6),
)
def test_per_key_order_and_the_bound_hold_for_any_interleaving(
    jobs: list[tuple[int, int]], bound: int
) -> None:
    """Whatever keys and however many yields each piece of work takes, one key's work runs
    in submission order and one at a time, and no more than ``bound`` run at once."""

    async def scenario() -> None:
        executor = KeyedExecutor(bound)
        started: dict[int, list[int]] = {}
        running: dict[int, int] = {}
        peak = 0
        total = 0

        def work(key: int, index: int, yields: int):  # type: ignore[no-untyped-def]
            async def run() -> None:
                nonlocal peak, total
                started.setdefault(key, []).append(index)
                running[key] = running.get(key, 0) + 1
                total += 1
                peak = max(peak, total)
                assert running[key] == 1, "two pieces of one key ran at once"
                for _ in range(yields):
                    await asyncio.sleep(0)
                running[key] -= 1
                total -= 1

            return run

        for index, (key, yields) in enumerate(jobs):
            await executor.submit(key, work(key, index, yields))
        assert await executor.drain(10)
        for key, indexes in started.items():
            assert indexes == [i for i, (k, _) in enumerate(jobs) if k == key]
        assert peak <= bound
        assert executor.in_flight == 0

    asyncio.run(scenario())


async def test_work_that_never_suspends_is_drained_by_few_long_lived_workers() -> None:
    """No task per activation: 500 keys of work that does not suspend take at most two
    workers (the one draining and the helper it woke), and they outlive the work."""
    executor = KeyedExecutor(1024)
    done: list[int] = []

    def work(i: int):  # type: ignore[no-untyped-def]
        async def run() -> None:
            done.append(i)

        return run

    for i in range(500):
        await executor.submit(i, work(i))
    assert await executor.drain(5)
    assert sorted(done) == list(range(500))
    assert 1 <= executor.workers <= 2
    for i in range(500):
        await executor.submit(i, work(i))
    assert await executor.drain(5)
    assert 1 <= executor.workers <= 2
    assert await executor.close(5)
    assert executor.workers == 0


async def test_work_that_suspends_gets_a_worker_per_waiting_key_and_idle_ones_retire() -> None:
    executor = KeyedExecutor(64, max_idle_workers=3)
    release = asyncio.Event()
    started = 0
    all_started = asyncio.Event()

    async def blocked() -> None:
        nonlocal started
        started += 1
        if started == 20:
            all_started.set()
        await release.wait()

    for key in range(20):
        await executor.submit(key, blocked)
    await asyncio.wait_for(all_started.wait(), 5)  # 20 keys suspended at once
    assert executor.workers >= 20
    release.set()
    assert await executor.drain(5)
    for _ in range(5):
        await asyncio.sleep(0)
    assert executor.workers <= 3 + 1
    assert await executor.close(5)
    assert executor.workers == 0


async def test_work_that_cancels_itself_does_not_stop_its_lane_or_the_others() -> None:
    executor = KeyedExecutor(8)

    async def cancels() -> int:
        raise asyncio.CancelledError

    async def ok() -> int:
        return 1

    with pytest.raises(asyncio.CancelledError):
        await executor.run("k", cancels)
    assert await executor.run("k", ok) == 1
    assert await executor.run("other", ok) == 1
    assert executor.in_flight == 0


async def test_close_cancels_the_work_queued_behind_a_stuck_piece() -> None:
    executor = KeyedExecutor(8)
    never = asyncio.Event()

    async def stuck() -> None:
        await never.wait()

    async def ok() -> int:
        return 1

    await executor.submit("a", stuck)
    waiting = [asyncio.create_task(executor.run(key, ok)) for key in ("a", "a")]
    await asyncio.sleep(0)
    assert not await executor.close(timeout=0.05)
    assert executor.in_flight == 0
    assert executor.active_keys == 0
    for task in waiting:
        with pytest.raises(asyncio.CancelledError):
            await task
