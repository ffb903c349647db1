"""``StopSignal.interrupt``: the wait a dispatcher's stop ends (wow_core.event.stopping)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine

import pytest

from wow_core.event.stopping import DispatchStopped, StopSignal


def _until_cancelled(
    started: asyncio.Event, cancelled: asyncio.Event
) -> Callable[[], Coroutine[None, None, None]]:
    """Work that sets ``started``, then waits until it is cancelled and sets ``cancelled``."""

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    return forever


async def test_the_work_s_result_and_error_pass_through_while_not_stopped() -> None:
    signal = StopSignal()

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def fail() -> int:
        raise ConnectionError("down")

    assert await signal.interrupt(answer(), "answer") == 42
    with pytest.raises(ConnectionError, match="down"):
        await signal.interrupt(fail(), "fail")


async def test_setting_the_signal_cancels_the_work_and_raises_dispatch_stopped() -> None:
    signal = StopSignal()
    started, cancelled = asyncio.Event(), asyncio.Event()
    forever = _until_cancelled(started, cancelled)
    waiting = asyncio.ensure_future(signal.interrupt(forever(), "a backoff"))
    await asyncio.wait_for(started.wait(), 5)
    signal.set()
    with pytest.raises(DispatchStopped, match="a backoff"):
        await asyncio.wait_for(waiting, 5)
    assert cancelled.is_set()
    # once set, a new wait does not even start
    ran: list[int] = []

    async def never() -> None:
        ran.append(1)

    with pytest.raises(DispatchStopped):
        await signal.interrupt(never(), "later")
    assert ran == []


async def test_cancelling_the_waiter_cancels_the_work() -> None:
    signal = StopSignal()
    started, cancelled = asyncio.Event(), asyncio.Event()
    forever = _until_cancelled(started, cancelled)
    waiting = asyncio.ensure_future(signal.interrupt(forever(), "a wait"))
    await asyncio.wait_for(started.wait(), 5)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(cancelled.wait(), 5)
