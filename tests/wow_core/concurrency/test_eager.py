"""start_eagerly: the first step runs inside the call, as the new task, in its context;
the task then behaves as any task (result, error, cancellation), on 3.11 as on 3.12+.
start_task: the same where Python has eager tasks (3.12+), an ordinary task on 3.11."""

from __future__ import annotations

import asyncio
import contextvars
import sys

import pytest

from wow_core.concurrency import start_eagerly, start_task

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


async def test_a_coroutine_that_never_waits_is_finished_when_the_call_returns() -> None:
    ran: list[str] = []

    async def quick() -> int:
        ran.append("ran")
        return 42

    task = start_eagerly(quick())
    assert ran == ["ran"]
    assert task.done()  # awaiting it does not yield to the loop
    assert task.result() == 42


async def test_the_first_step_runs_as_the_new_task_and_the_caller_is_current_again_after() -> None:
    caller = asyncio.current_task()
    seen: list[asyncio.Task[object] | None] = []

    async def probe() -> None:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())

    task = start_eagerly(probe(), name="probe")
    assert seen == [task]
    assert asyncio.current_task() is caller
    await task
    assert seen == [task, task]
    assert task.get_name() == "probe"


async def test_the_first_step_runs_in_a_copy_of_the_callers_context_or_the_one_given() -> None:
    VAR.set("caller")

    async def read_and_set() -> str:
        seen = VAR.get()
        VAR.set("task")
        await asyncio.sleep(0)
        return seen + "/" + VAR.get()

    assert await start_eagerly(read_and_set()) == "caller/task"
    assert VAR.get() == "caller"  # the task's change stays in the task's context
    assert await start_eagerly(read_and_set(), context=contextvars.Context()) == "unset/task"


async def test_a_timeout_in_the_first_step_cancels_the_new_task_not_the_caller() -> None:
    never = asyncio.Event()

    async def bounded() -> str:
        try:
            async with asyncio.timeout(0.01):
                await never.wait()
        except TimeoutError:
            return "timed out"
        return "woken"

    task = start_eagerly(bounded())
    assert await asyncio.wait_for(task, 5) == "timed out"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_error_raised_in_the_first_step_or_later_is_the_tasks_error() -> None:
    async def fails_at_once() -> None:
        raise ValueError("at once")

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise ValueError("later")

    at_once = start_eagerly(fails_at_once())  # not raised into the caller
    assert at_once.done()
    later = start_eagerly(fails_later())
    assert not later.done()
    with pytest.raises(ValueError, match="at once"):
        await at_once
    with pytest.raises(ValueError, match="later"):
        await later


async def test_a_task_cancelled_while_suspended_gets_the_cancellation_inside_its_coroutine() -> None:
    never = asyncio.Event()
    suspended = asyncio.Event()

    async def cleans_up() -> str:
        suspended.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            return "cleaned up"
        return "woken"

    task = start_eagerly(cleans_up())
    assert suspended.is_set()
    await asyncio.sleep(0)
    task.cancel()
    assert await task == "cleaned up"


async def test_a_task_cancelled_before_it_continued_closes_its_coroutine() -> None:
    never = asyncio.Event()
    closed: list[str] = []

    async def holds() -> None:
        try:
            await never.wait()
        finally:
            closed.append("finally ran")

    task = start_eagerly(holds())
    task.cancel()  # before the loop ran the task once
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == ["finally ran"]


async def test_a_task_woken_by_what_its_first_step_awaited_continues_from_there() -> None:
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def waits() -> str:
        return "got " + await future

    task = start_eagerly(waits())
    assert not task.done()
    future.set_result("it")
    assert await asyncio.wait_for(task, 5) == "got it"


async def test_a_coroutine_cancelled_in_its_first_step_gives_a_cancelled_future() -> None:
    async def cancels_itself() -> None:
        raise asyncio.CancelledError

    future = start_eagerly(cancels_itself())
    assert future.cancelled()


async def test_start_task_is_eager_only_where_python_has_eager_tasks() -> None:
    ran: list[str] = []
    VAR.set("caller")

    async def quick() -> str:
        ran.append("ran")
        return VAR.get()

    task = start_task(quick(), name="quick")
    assert ran == (["ran"] if sys.version_info >= (3, 12) else [])
    assert await task == "caller"
    assert ran == ["ran"]


async def test_start_task_gives_the_coroutines_error() -> None:
    async def fails() -> None:
        raise ValueError("failed")

    with pytest.raises(ValueError, match="failed"):
        await start_task(fails())
