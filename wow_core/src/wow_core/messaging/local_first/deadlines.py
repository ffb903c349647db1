"""``HandOffDeadlines``: one timer for every copy waiting for its hand-off result.

A distributed copy whose hand-off result (the local admission) is not known when its turn
comes waits for it, at most until its deadline (the hand-off timeout after the send). A
timer handle per waiting copy costs a handle, an entry in the loop's heap and a cancel
per copy, although the deadline almost never passes. Here the waiting copies share one
heap of deadlines and the loop holds a single timer, armed at the earliest of them.

Guarantees: a copy still waiting when its deadline passed is reported expired
(``expire(lane)``) at the first loop turn after the deadline, in deadline order; a copy
whose result came first (:meth:`HandOffDeadlines.forget`) is never reported. The timer
runs its callback in an empty context (it must not keep a sender's context alive).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Armable(Protocol):
    """What waits for a deadline: ``armed`` is the ticket of its current wait, 0 when none."""

    armed: int


L = TypeVar("L", bound=Armable)

_COMPACT_SLACK = 64
"""Forgotten entries tolerated beyond the live ones before the heap is rebuilt."""


class HandOffDeadlines(Generic[L]):
    """Deadlines of waiting lanes, one loop timer for all of them.

    ``expire`` is called with a lane whose wait reached its deadline; the lane's ``armed``
    ticket is reset to 0 first. Forgotten waits are dropped lazily (when they reach the top
    of the heap, or when they outnumber the live ones, by a rebuild), so memory stays
    proportional to the waits in progress.
    """

    __slots__ = ("_context", "_expire", "_handle", "_heap", "_live", "_tickets")

    def __init__(self, expire: Callable[[L], None]) -> None:
        self._expire = expire
        self._heap: list[tuple[float, int, L]] = []
        self._handle: asyncio.TimerHandle | None = None
        self._tickets = 0
        self._live = 0
        self._context = contextvars.Context()

    @property
    def waiting(self) -> int:
        """Waits in progress (added, neither forgotten nor expired)."""
        return self._live

    @property
    def timer_armed(self) -> bool:
        return self._handle is not None

    def add(self, lane: L, deadline: float) -> None:
        """``lane`` waits until ``deadline`` (loop time); it must not be waiting already."""
        self._tickets += 1
        ticket = self._tickets
        lane.armed = ticket
        self._live += 1
        heap = self._heap
        heapq.heappush(heap, (deadline, ticket, lane))
        handle = self._handle
        if handle is None:
            self._arm(deadline)
        elif deadline < handle.when():
            handle.cancel()
            self._arm(deadline)
        elif len(heap) > 2 * self._live + _COMPACT_SLACK:
            self._compact()

    def forget(self, lane: L) -> None:
        """``lane`` stopped waiting before its deadline (its result came, or it was disarmed)."""
        if lane.armed:
            lane.armed = 0
            self._live -= 1

    def close(self) -> None:
        """Cancel the timer and forget every wait (nothing is reported expired after this)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        for _, _, lane in self._heap:
            lane.armed = 0
        self._heap.clear()
        self._live = 0

    def _arm(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_at(deadline, self._fire, context=self._context)

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if entry[2].armed == entry[1]]
        heapq.heapify(self._heap)

    def _fire(self) -> None:
        self._handle = None
        heap = self._heap
        now = asyncio.get_running_loop().time()
        expired: list[L] = []
        while heap and heap[0][0] <= now:
            _, ticket, lane = heapq.heappop(heap)
            if lane.armed == ticket:
                lane.armed = 0
                self._live -= 1
                expired.append(lane)
        while heap and heap[0][2].armed != heap[0][1]:
            heapq.heappop(heap)  # forgotten: no timer for it
        if heap:
            self._arm(heap[0][0])
        for lane in expired:
            self._expire(lane)
