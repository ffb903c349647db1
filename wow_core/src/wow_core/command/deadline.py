"""Deadlines of waits: one timer for all of them.

Every ``send_and_wait`` has a deadline. Arming an asyncio timer (or ``asyncio.timeout``)
per call costs more than the rest of an in-process command, so waits share one
:class:`Deadlines` per event loop: a heap ordered by deadline and one timer armed for
the earliest. When it fires, every expired entry's ``expire()`` runs; entries that
finished meanwhile are skipped and dropped. Finished entries still in the heap are
purged when they outnumber the live ones, so memory follows the waits in progress.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from typing import Protocol


class Expirable(Protocol):
    @property
    def done(self) -> bool: ...

    def expire(self) -> None: ...


class Deadlines:
    """Expire entries at their deadline (``loop.time()`` based), sharing one timer."""

    __slots__ = ("_counter", "_heap", "_live", "_loop", "_timer", "_timer_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, Expirable]] = []
        self._counter = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._live = 0

    def add(self, entry: Expirable, timeout: float) -> None:
        """Call ``entry.expire()`` after ``timeout`` seconds unless it is done by then."""
        at = self._loop.time() + timeout
        heapq.heappush(self._heap, (at, next(self._counter), entry))
        self._live += 1
        if at < self._timer_at:
            self._arm(at)

    def finished(self) -> None:
        """An entry finished before its deadline (it stays in the heap until purged)."""
        self._live -= 1
        if len(self._heap) > 64 and len(self._heap) > 4 * self._live:
            self._heap = [item for item in self._heap if not item[2].done]
            heapq.heapify(self._heap)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        # The loop may run a timer up to its clock resolution early: accept a millisecond.
        now = self._loop.time() + 0.001
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, entry = heapq.heappop(heap)
            if not entry.done:
                entry.expire()
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0])

    def __len__(self) -> int:
        return len(self._heap)


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = weakref.WeakKeyDictionary()


def deadlines() -> Deadlines:
    """The :class:`Deadlines` of the running loop (forgotten with the loop)."""
    loop = asyncio.get_running_loop()
    found = _by_loop.get(loop)
    if found is None:
        found = _by_loop[loop] = Deadlines(loop)
    return found
