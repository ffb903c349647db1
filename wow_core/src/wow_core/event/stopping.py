"""What a dispatcher's stop does to the functions it holds that are only *waiting*.

A dispatcher that stops lets the functions in flight finish, up to the shutdown
timeout. Two waits of the pipeline do no work and can last longer than any budget: the
backoff of :class:`~wow_core.event.retryable.RetryableFilter` between two attempts, and a
stateless saga's wait for its commands to be ``PROCESSED`` while it runs as a
compensation (up to ``WOW_COMMAND__WAIT_TIMEOUT``). Each runs through
:meth:`StopSignal.interrupt` with the dispatcher's signal (``FunctionExchange.stop``):
when the dispatcher stops, the wait ends at once with :class:`DispatchStopped`.

The handler settles such an exchange as ``RELEASED``: not recorded as a failure, no
wait signal emitted, not acknowledged. The dispatcher releases the source exchange, so
the backend delivers it again (to the next member of the group, or to this service when
it restarts); a compensation replay released this way leaves its record ``PREPARED``
until the execution timeout has the scheduler prepare it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

_T = TypeVar("_T")


class DispatchStopped(BaseException):
    """The dispatcher stopped while a function waited (a backoff, its commands).

    A ``BaseException`` like :class:`asyncio.CancelledError`: a filter or an error
    handler that catches ``Exception`` does not take it for a function failure.
    """


class StopSignal:
    """Set once, when its dispatcher stops; see the module doc."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    async def interrupt(self, work: Awaitable[_T], what: str) -> _T:
        """Await ``work`` unless the signal is set first: then cancel it and raise
        :class:`DispatchStopped` naming ``what`` was interrupted."""
        if self._event.is_set():
            if asyncio.iscoroutine(work):
                work.close()
            raise DispatchStopped(what)
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))
        if task.cancelled():
            raise DispatchStopped(what)
        error = task.exception()
        if error is not None and self._event.is_set():
            raise DispatchStopped(what) from error
        return task.result()
