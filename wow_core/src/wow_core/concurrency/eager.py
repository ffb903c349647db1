"""Eager tasks: ``start_eagerly`` (on every Python) and ``start_task`` (where cheap).

A coroutine started eagerly runs at once until it first waits: one that never waits is
finished when the call returns and never costs a scheduling round trip (as Reactor's
``flatMap`` subscribes at once). Python 3.12+ has this as a public API
(``asyncio.Task(..., eager_start=True)``), used as is by both functions. Python 3.11, still
supported (``requires-python >= 3.11``), has no eager tasks; the two functions are for the
two kinds of caller there:

- :func:`start_eagerly` is for a caller that *relies* on the first step running inside
  the call (a local-first copy that can go out at once is sent before ``send`` returns).
  On 3.11 a small backport runs the first step with the new task made current through
  asyncio's ``_enter_task`` / ``_leave_task`` (private, but present and unchanged in every
  3.11 release; selected on the version, so no later Python uses it).
- :func:`start_task` is for a caller to whom eagerness is an optimisation only (the event
  dispatcher's concurrent functions): on 3.11 it is ``loop.create_task``. The backport
  costs more than it saves there: it still needs a task, created before the first step
  so that the step runs as that task, and that task still takes its loop step; measured
  with ``benchmarks.event_dispatch`` on 3.11 it made dispatch to 4 and 16 functions 19 % and
  32 % slower.

What holds for :func:`start_eagerly` on every version:

- the first step runs inside the call, in the task's context (``context``, or a copy of
  the caller's), with ``asyncio.current_task()`` being the new task, so timeouts and
  cancellation inside that step act on the new task, not on the caller;
- the task's result, exception and cancellation are those of the coroutine;
- the caller's ``current_task()`` is restored when the call returns.

- a coroutine that finished in its first step gives an already done future, so awaiting
  it does not yield to the loop either (on 3.11 that future is not the task: the task,
  created before the first step so that the step could run as it, still takes one loop
  step to end and reports nothing).

Not guaranteed: that the object returned is a ``Task`` (on 3.11 it is a plain future when
the coroutine finished at once; on 3.12 it is always the task). On 3.11 every later step
of the coroutine goes through one extra generator frame.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["start_eagerly", "start_task"]


if sys.version_info >= (3, 12):

    def start_eagerly(
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Future[T]:
        """A task running ``coro`` whose first step runs now, inside the caller (see the
        module doc); ``context`` defaults to a copy of the caller's. Needs a running loop."""
        loop = asyncio.get_running_loop()
        return asyncio.Task(coro, loop=loop, name=name, context=context, eager_start=True)

else:
    from asyncio.tasks import _enter_task, _leave_task

    class _Continue(Generic[T]):
        """Continues, inside a task, a coroutine whose first step already ran: the task
        forwards what it is sent or thrown (a wake-up, a cancellation), as ``await`` would."""

        __slots__ = ("awaited", "coro")

        def __init__(self, coro: Coroutine[Any, Any, T], awaited: Any) -> None:
            self.coro = coro
            self.awaited = awaited

        def __await__(self) -> Generator[Any, Any, T]:
            coro, awaited = self.coro, self.awaited
            while True:
                try:
                    sent = yield awaited
                except BaseException as error:
                    try:
                        awaited = coro.throw(error)
                    except StopIteration as stop:
                        return stop.value  # type: ignore[no-any-return]
                else:
                    try:
                        awaited = coro.send(sent)
                    except StopIteration as stop:
                        return stop.value  # type: ignore[no-any-return]

    class _EagerStep(Generic[T]):
        """The task is created (scheduled) first, then its coroutine's first step runs at
        once with the task made current, in the task's own context. The scheduled step only
        continues what is left (or reports what the first step ended with)."""

        __slots__ = ("awaited", "context", "coro", "error", "finished", "value")

        def __init__(self, coro: Coroutine[Any, Any, T], context: contextvars.Context) -> None:
            self.coro = coro
            self.context = context
            self.awaited: Any = None
            self.finished = False
            self.value: Any = None
            self.error: BaseException | None = None

        def first(self, task: asyncio.Task[Any]) -> None:
            loop = task.get_loop()
            caller = asyncio.current_task(loop)
            if caller is not None:
                _leave_task(loop, caller)
            _enter_task(loop, task)
            try:
                self.awaited = self.context.run(self.coro.send, None)
            except StopIteration as stop:
                self.finished = True
                self.value = stop.value
            except BaseException as error:
                self.finished = True
                self.error = error
            finally:
                _leave_task(loop, task)
                if caller is not None:
                    _enter_task(loop, caller)

        async def rest(self) -> T | None:
            if self.finished:
                return None  # the outcome went to the future start_eagerly returned
            return await _Continue(self.coro, self.awaited)

        def close(self, _: object = None) -> None:
            """Close a coroutine whose task was cancelled before it could continue it."""
            if getattr(self.coro, "cr_frame", None) is not None:
                self.context.run(self.coro.close)

    def start_eagerly(
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Future[T]:
        """A task running ``coro`` whose first step runs now, inside the caller (see the
        module doc); ``context`` defaults to a copy of the caller's. Needs a running loop."""
        loop = asyncio.get_running_loop()
        if context is None:
            context = contextvars.copy_context()
        step: _EagerStep[T] = _EagerStep(coro, context)
        task = loop.create_task(step.rest(), name=name, context=context)
        step.first(task)
        if not step.finished:
            task.add_done_callback(step.close)
            return task  # type: ignore[return-value]  # rest() returns T once not finished
        done: asyncio.Future[T] = loop.create_future()
        error = step.error
        if error is None:
            done.set_result(step.value)
        elif isinstance(error, asyncio.CancelledError):
            done.cancel()
        else:
            done.set_exception(error)
        return done


if sys.version_info >= (3, 12):
    start_task = start_eagerly
else:

    def start_task(
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Future[T]:
        """A task running ``coro``: eager (as :func:`start_eagerly`) on Python 3.12+, an
        ordinary scheduled task on 3.11 (see the module doc). ``context`` defaults to a copy
        of the caller's. Needs a running loop."""
        return asyncio.get_running_loop().create_task(coro, name=name, context=context)
