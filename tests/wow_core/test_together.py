"""``all_or_none`` / ``together``: awaitables at once, the first failure cancels the rest."""

from __future__ import annotations

import asyncio

import pytest

from wow_core.concurrency import TogetherError, all_or_none, together


async def test_they_run_at_once_and_give_their_results_in_order() -> None:
    started: list[int] = []

    async def step(i: int, delay: float) -> int:
        started.append(i)
        await asyncio.sleep(delay)
        return i

    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await all_or_none([step(0, 0.2), step(1, 0.2), step(2, 0.0)]) == [0, 1, 2]
    assert loop.time() - began < 0.35  # one after another: 0.4 s
    assert started == [0, 1, 2]


async def test_the_first_failure_cancels_the_others_and_names_its_index() -> None:
    cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("no broker")

    with pytest.raises(TogetherError) as caught:
        await all_or_none([slow(), fails()])
    assert caught.value.index == 1
    assert isinstance(caught.value.error, ValueError)
    assert cancelled.is_set()
    with pytest.raises(ValueError, match="no broker"):
        await together([slow(), fails()])


async def test_cancelling_the_caller_cancels_every_one() -> None:
    cancelled: list[int] = []

    async def slow(i: int) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    task = asyncio.ensure_future(together([slow(0), slow(1)]))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == [0, 1]
