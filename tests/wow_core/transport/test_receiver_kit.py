"""The receiver kit: readiness, the bounded read-ahead buffer, a loop failure handed on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from wow_core.messaging import BusClosedError
from wow_core.spi import ReadAhead, Readiness

WAIT = 2.0


class _Attempts:
    """An attempt that waits for the test to let it finish, and counts its starts."""

    def __init__(self) -> None:
        self.started = 0
        self.release = asyncio.Event()
        self.fail_with: BaseException | None = None
        self.cancelled = 0
        self.running = asyncio.Event()

    async def __call__(self) -> str:
        self.started += 1
        number = self.started
        self.running.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail_with is not None:
            raise self.fail_with
        return f"ready #{number}"


async def _started(attempts: _Attempts) -> None:
    """Wait until the (first) attempt runs."""
    async with asyncio.timeout(WAIT):
        await attempts.running.wait()


# -- Readiness ------------------------------------------------------------------------


async def test_readiness_is_cached_after_a_success() -> None:
    attempts = _Attempts()
    attempts.release.set()
    readiness = Readiness(attempts, what="receiver of group 'g'")
    assert not readiness.succeeded
    assert await readiness.wait() == "ready #1"
    assert await readiness.wait() == "ready #1"
    assert attempts.started == 1
    assert readiness.succeeded
    assert readiness.result() == "ready #1"


async def test_readiness_is_tried_again_after_a_failure() -> None:
    attempts = _Attempts()
    attempts.fail_with = ConnectionError("broker down")
    attempts.release.set()
    readiness = Readiness(attempts, what="receiver of group 'g'")
    with pytest.raises(ConnectionError, match="broker down"):
        await readiness.wait()
    assert not readiness.succeeded
    with pytest.raises(RuntimeError, match="not ready"):
        readiness.result()
    attempts.fail_with = None
    assert await readiness.wait() == "ready #2"
    assert attempts.started == 2


async def test_concurrent_callers_share_one_attempt_and_its_outcome() -> None:
    attempts = _Attempts()
    readiness = Readiness(attempts, what="receiver of group 'g'")
    waiters = [asyncio.ensure_future(readiness.wait()) for _ in range(3)]
    await _started(attempts)
    attempts.release.set()
    assert await asyncio.gather(*waiters) == ["ready #1"] * 3
    assert attempts.started == 1


async def test_concurrent_callers_all_get_the_failure_of_their_attempt() -> None:
    attempts = _Attempts()
    attempts.fail_with = ConnectionError("broker down")
    readiness = Readiness(attempts, what="receiver of group 'g'")
    waiters = [asyncio.ensure_future(readiness.wait()) for _ in range(3)]
    await _started(attempts)
    attempts.release.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [ConnectionError] * 3
    assert attempts.started == 1


async def test_cancelling_one_caller_leaves_the_attempt_to_the_others() -> None:
    attempts = _Attempts()
    readiness = Readiness(attempts, what="receiver of group 'g'")
    first = asyncio.ensure_future(readiness.wait())
    second = asyncio.ensure_future(readiness.wait())
    await _started(attempts)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    attempts.release.set()
    assert await second == "ready #1"
    assert attempts.cancelled == 0


async def test_close_during_ready_cancels_the_attempt_and_the_waiters_get_bus_closed() -> None:
    attempts = _Attempts()
    readiness = Readiness(attempts, what="receiver of group 'g'")
    waiters = [asyncio.ensure_future(readiness.wait()) for _ in range(2)]
    await _started(attempts)
    assert await readiness.close() is None
    assert attempts.cancelled == 1
    for waiter in waiters:
        with pytest.raises(BusClosedError, match="receiver of group 'g' was closed while getting ready"):
            await waiter
    with pytest.raises(BusClosedError, match="receiver of group 'g' is closed"):
        await readiness.wait()
    assert attempts.started == 1


async def test_a_caller_cancelled_while_close_cancels_the_attempt_stays_cancelled() -> None:
    attempts = _Attempts()
    readiness = Readiness(attempts, what="receiver of group 'g'")
    waiter = asyncio.ensure_future(readiness.wait())
    await _started(attempts)
    waiter.cancel()
    await readiness.close()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_close_after_a_success_returns_its_result() -> None:
    attempts = _Attempts()
    attempts.release.set()
    readiness = Readiness(attempts, what="r")
    await readiness.wait()
    assert await readiness.close() == "ready #1"
    assert await readiness.close() == "ready #1"  # idempotent
    assert readiness.closed


async def test_reset_forgets_a_success() -> None:
    attempts = _Attempts()
    attempts.release.set()
    readiness = Readiness(attempts, what="r")
    await readiness.wait()
    readiness.reset()
    assert not readiness.succeeded
    assert await readiness.wait() == "ready #2"


async def test_a_future_returned_by_the_attempt_is_used_as_it_is() -> None:
    created: list[asyncio.Future[str]] = []

    def attempt() -> asyncio.Future[str]:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        created.append(future)  # in place as wait() is called, before any task runs
        return future

    readiness = Readiness(attempt, what="r")
    waiter = asyncio.ensure_future(readiness.wait())
    await asyncio.sleep(0)
    assert len(created) == 1
    created[0].set_result("groups created")
    assert await waiter == "groups created"


async def test_the_attempt_task_carries_its_name() -> None:
    names: list[str] = []

    async def attempt() -> None:
        task = asyncio.current_task()
        assert task is not None
        names.append(task.get_name())

    await Readiness(attempt, what="r", name="wow-probe-start:g").wait()
    assert names == ["wow-probe-start:g"]


# -- ReadAhead ------------------------------------------------------------------------


async def test_items_come_out_in_order_with_their_sizes_counted() -> None:
    buffer: ReadAhead[str] = ReadAhead(10)
    assert buffer.put_nowait("a", 3)
    assert buffer.put_nowait("b")
    assert (buffer.size, len(buffer), buffer.room) == (4, 2, 6)
    assert await buffer.get() == "a"
    assert await buffer.get() == "b"
    assert (buffer.size, buffer.room) == (0, 10)


async def test_a_full_buffer_holds_the_reader_until_an_item_is_taken() -> None:
    buffer: ReadAhead[int] = ReadAhead(2)
    assert await buffer.put(1)
    assert await buffer.put(2)
    third = asyncio.ensure_future(buffer.put(3))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not third.done()
    assert buffer.size == 2
    assert await buffer.get() == 1
    async with asyncio.timeout(WAIT):
        assert await third
    assert [await buffer.get(), await buffer.get()] == [2, 3]


async def test_a_low_mark_holds_the_reader_until_the_iterator_took_it_down() -> None:
    buffer: ReadAhead[int] = ReadAhead(4, low_mark=2)
    buffer.put_nowait(1, 2)
    buffer.put_nowait(2, 2)
    room = asyncio.ensure_future(buffer.wait_for_room())
    await buffer.get()
    await asyncio.sleep(0)
    assert room.done()  # size 2 <= low mark
    buffer.put_nowait(3, 3)
    room = asyncio.ensure_future(buffer.wait_for_room())
    await asyncio.sleep(0)  # the reader finds it full (size 5) and waits
    await buffer.get()  # size 3: below capacity, above the low mark
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not room.done()
    await buffer.get()
    async with asyncio.timeout(WAIT):
        await room


async def test_put_nowait_keeps_what_the_broker_already_handed_over() -> None:
    buffer: ReadAhead[int] = ReadAhead(1)
    assert buffer.put_nowait(1, 5)
    assert buffer.put_nowait(2)
    assert buffer.room == -5
    assert [await buffer.get(), await buffer.get()] == [1, 2]


async def test_a_cancelled_get_takes_nothing() -> None:
    buffer: ReadAhead[str] = ReadAhead(4)
    getter = asyncio.ensure_future(buffer.get())
    await asyncio.sleep(0)
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    buffer.put_nowait("kept")
    assert await buffer.get() == "kept"


async def test_each_item_goes_to_one_of_several_getters() -> None:
    buffer: ReadAhead[int] = ReadAhead(8)
    getters = [asyncio.ensure_future(buffer.get()) for _ in range(3)]
    await asyncio.sleep(0)
    for item in (1, 2, 3):
        buffer.put_nowait(item)
    async with asyncio.timeout(WAIT):
        assert sorted(await asyncio.gather(*getters)) == [1, 2, 3]


async def test_end_drains_what_is_left_then_stops() -> None:
    buffer: ReadAhead[int] = ReadAhead(4)
    buffer.put_nowait(1)
    buffer.end()
    assert not buffer.put_nowait(2)
    assert await buffer.get() == 1
    for _ in range(2):
        with pytest.raises(StopAsyncIteration):
            await buffer.get()


async def test_end_wakes_a_waiting_getter_and_a_waiting_reader() -> None:
    buffer: ReadAhead[int] = ReadAhead(1)
    buffer.put_nowait(1)
    reader = asyncio.ensure_future(buffer.put(2))
    drained: list[int] = []
    took_one = asyncio.Event()

    async def take_all() -> None:
        while True:
            drained.append(await buffer.get())
            took_one.set()

    getter = asyncio.ensure_future(take_all())
    async with asyncio.timeout(WAIT):
        await took_one.wait()
    buffer.end()
    async with asyncio.timeout(WAIT):
        with pytest.raises(StopAsyncIteration):
            await getter
    assert drained in ([1], [1, 2])
    async with asyncio.timeout(WAIT):
        await reader


async def test_close_ends_at_once_and_returns_the_items_not_taken() -> None:
    buffer: ReadAhead[int] = ReadAhead(2)
    buffer.put_nowait(1)
    buffer.put_nowait(2)
    waiting_reader = asyncio.ensure_future(buffer.put(3))
    await asyncio.sleep(0)
    assert buffer.close() == [1, 2]
    assert buffer.closed
    assert buffer.ended
    async with asyncio.timeout(WAIT):
        assert await waiting_reader is False
    with pytest.raises(StopAsyncIteration):
        await buffer.get()
    assert not buffer.put_nowait(4)
    assert buffer.close() == []  # idempotent
    assert buffer.size == 0


async def test_close_wakes_a_waiting_getter() -> None:
    buffer: ReadAhead[int] = ReadAhead(2)
    getter = asyncio.ensure_future(buffer.get())
    await asyncio.sleep(0)
    buffer.close()
    async with asyncio.timeout(WAIT):
        with pytest.raises(StopAsyncIteration):
            await getter


def test_capacity_and_low_mark_are_checked() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ReadAhead(0)
    with pytest.raises(ValueError, match="low_mark"):
        ReadAhead(2, low_mark=2)
    assert ReadAhead(3).capacity == 3


# -- a loop failure handed to the iterator -----------------------------------------------


async def test_a_loop_failure_comes_after_the_items_read_once_then_the_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    buffer: ReadAhead[int] = ReadAhead(4)

    async def loop() -> None:
        buffer.put_nowait(1)
        raise TypeError("the stream key holds a string")

    with caplog.at_level(logging.ERROR, logger="probe"):
        await buffer.guard(loop(), what="receiver g/c", logger=logging.getLogger("probe"))
    assert "receiver g/c stopped: TypeError: the stream key holds a string" in caplog.text
    assert await buffer.get() == 1
    with pytest.raises(TypeError, match="holds a string"):
        await buffer.get()
    for _ in range(2):
        with pytest.raises(StopAsyncIteration):
            await buffer.get()


async def test_a_loop_failure_wakes_a_waiting_getter() -> None:
    buffer: ReadAhead[int] = ReadAhead(4)
    failed = asyncio.Event()

    async def loop() -> None:
        await failed.wait()
        raise OSError("gone")

    getter = asyncio.ensure_future(buffer.get())
    runner = asyncio.ensure_future(buffer.guard(loop(), what="r", logger=logging.getLogger("probe")))
    failed.set()
    async with asyncio.timeout(WAIT):
        with pytest.raises(OSError, match="gone"):
            await getter
    await runner


async def test_only_the_first_of_two_loop_failures_is_handed_on() -> None:
    buffer: ReadAhead[int] = ReadAhead(4)
    log = logging.getLogger("probe")

    async def fails(error: Exception) -> None:
        raise error

    await buffer.guard(fails(ValueError("first")), what="read loop", logger=log)
    await buffer.guard(fails(KeyError("second")), what="claim loop", logger=log)
    with pytest.raises(ValueError, match="first"):
        await buffer.get()
    with pytest.raises(StopAsyncIteration):
        await buffer.get()


async def test_a_loop_that_returns_or_is_cancelled_ends_nothing() -> None:
    buffer: ReadAhead[int] = ReadAhead(4)
    log = logging.getLogger("probe")

    async def returns() -> None:
        return None

    async def waits() -> None:
        await asyncio.Event().wait()

    await buffer.guard(returns(), what="r", logger=log)
    runner = asyncio.ensure_future(buffer.guard(waits(), what="r", logger=log))
    await asyncio.sleep(0)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert not buffer.ended
    buffer.put_nowait(7)
    assert await buffer.get() == 7


async def test_a_failure_after_close_is_not_handed_on() -> None:
    buffer: ReadAhead[int] = ReadAhead(4)

    async def fails() -> None:
        raise ValueError("late")

    buffer.close()
    await buffer.guard(fails(), what="r", logger=logging.getLogger("probe"))
    with pytest.raises(StopAsyncIteration):
        await buffer.get()


async def test_close_during_ready_on_a_gathered_future_gives_bus_closed_too() -> None:
    loop = asyncio.get_running_loop()
    parts = [loop.create_future(), loop.create_future()]
    readiness = Readiness(lambda: asyncio.gather(*parts), what="receiver g/c")
    waiter = asyncio.ensure_future(readiness.wait())
    await asyncio.sleep(0)  # the waiter waits on the gathered future
    await readiness.close()
    with pytest.raises(BusClosedError, match="was closed while getting ready"):
        await waiter
    assert all(part.cancelled() for part in parts)
