"""KeyedExecutor: one key's work in order, different keys in parallel, bounded in total.

Dispatchers run their work here keyed by aggregate id, so one aggregate's commands
(or events) are handled one after the other, in submission order, while different
aggregates proceed concurrently. ``submit`` waits while ``max_in_flight`` pieces of work
are admitted and unfinished: that is the back-pressure a dispatcher passes on to its
receiver.

Not guaranteed: any order between keys, or between two executors.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

Work = Callable[[], Awaitable[Any]]


class ExecutorClosedError(RuntimeError):
    """Work submitted to a closed executor."""


class KeyedExecutor:
    """Ordered lanes per key over a bounded pool of in-flight work."""

    __slots__ = ("_closed", "_idle", "_in_flight", "_lanes", "_tasks", "_waiters", "max_in_flight", "name")

    def __init__(self, max_in_flight: int = 1024, *, name: str = "keyed-executor") -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.max_in_flight = max_in_flight
        self.name = name
        # Submitters waiting for a slot; a finishing piece of work hands its slot over.
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._lanes: dict[Hashable, deque[tuple[Work, asyncio.Future[Any] | None]]] = {}
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Admitted work not finished yet (queued in a lane or running)."""
        return self._in_flight

    @property
    def active_keys(self) -> int:
        return len(self._lanes)

    @property
    def closed(self) -> bool:
        return self._closed

    async def submit(self, key: Hashable, work: Work) -> None:
        """Admit ``work`` to ``key``'s lane; return once admitted (not once done).

        Waits while the executor is full. An exception of ``work`` is logged; use
        :meth:`run` to receive it.
        """
        await self._admit(key, work, None)

    async def run(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` in ``key``'s lane and return its result (or raise its error)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        await self._admit(key, work, future)
        return await future

    async def _admit(self, key: Hashable, work: Work, future: asyncio.Future[Any] | None) -> None:
        if self._closed:
            raise ExecutorClosedError(f"{self.name} is closed")
        if self._in_flight < self.max_in_flight and not self._waiters:
            self._in_flight += 1
        else:
            slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(slot)
            try:
                await slot  # resolved: a finished piece of work handed its slot to us
            except asyncio.CancelledError:
                if slot.done() and not slot.cancelled():
                    self._done()
                else:
                    self._waiters.remove(slot)
                raise
            if self._closed:
                self._done()
                raise ExecutorClosedError(f"{self.name} is closed")
        self._idle.clear()
        lane = self._lanes.get(key)
        if lane is not None:
            lane.append((work, future))
            return
        lane = self._lanes[key] = deque(((work, future),))
        self._tasks[key] = asyncio.get_running_loop().create_task(self._drain(key, lane))

    async def _drain(self, key: Hashable, lane: deque[tuple[Work, asyncio.Future[Any] | None]]) -> None:
        try:
            while lane:
                work, future = lane[0]
                try:
                    if future is not None and future.cancelled():
                        continue
                    value = await work()
                    if future is not None and not future.done():
                        future.set_result(value)
                except asyncio.CancelledError:
                    if future is not None and not future.done():
                        future.cancel()
                    raise
                except Exception as error:
                    if future is not None and not future.done():
                        future.set_exception(error)
                    else:
                        log.exception("%s: work of %r failed", self.name, key)
                finally:
                    lane.popleft()
                    self._done()
        finally:
            # Work left behind by a cancelled lane is abandoned, not run.
            while lane:
                _, future = lane.popleft()
                if future is not None and not future.done():
                    future.cancel()
                self._done()
            if self._lanes.get(key) is lane:
                del self._lanes[key]
                del self._tasks[key]

    def _done(self) -> None:
        """Release one slot: to the first waiting submitter, else to the pool."""
        waiters = self._waiters
        while waiters:
            slot = waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing is in flight (up to ``timeout``); True when idle."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self, timeout: float | None = None) -> bool:
        """Refuse new work, let admitted work finish within ``timeout``, then cancel the
        rest. True when everything finished."""
        self._closed = True
        finished = await self.drain(timeout)
        if not finished:
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return finished
