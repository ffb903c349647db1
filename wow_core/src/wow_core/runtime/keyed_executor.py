"""KeyedExecutor: one key's work in order, different keys in parallel, bounded in total.

Dispatchers run their work here keyed by aggregate id, so one aggregate's commands
(or events) are handled one after the other, in submission order, while different
aggregates proceed concurrently. ``submit`` waits while ``max_in_flight`` pieces of work
are admitted and unfinished: that is the back-pressure a dispatcher passes on to its
receiver.

How: the lanes run on a :class:`~wow_core.concurrency.LanePool` of long-lived worker
tasks. A key with work is either in the pool's ready queue or in one worker's turn,
never both, so its work runs one piece at a time in submission order. A turn runs one
piece; a key with more goes back at the end of the ready queue (fairness between keys)
and the worker moves on to the next ready key without going through the event loop.
Before it starts a piece while other keys wait, a worker wakes one more (a parked one, or
a new one): if the piece suspends (I/O), that helper takes the next key, so keys that
wait on I/O run in parallel, while work that never suspends is drained by one worker in
one go. Workers are at most ``max_in_flight + 1``; idle ones beyond
``max_idle_workers`` exit.

Not guaranteed: any order between keys, or between two executors. Work runs in the
workers' own (initially empty) ``contextvars`` context, not in the submitter's; a
context variable one piece of work sets without resetting is seen by later work of the
same worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from wow_core.concurrency import LanePool

log = logging.getLogger(__name__)

T = TypeVar("T")

Work = Callable[[], Awaitable[Any]]
_Item = tuple[Work, "asyncio.Future[Any] | None"]


class ExecutorClosedError(RuntimeError):
    """Work submitted to a closed executor."""


class KeyedExecutor:
    """Ordered lanes per key, run by a pool of workers, bounded in total in-flight work."""

    __slots__ = (
        "_closed",
        "_idle",
        "_in_flight",
        "_lanes",
        "_pool",
        "_waiters",
        "max_in_flight",
        "name",
    )

    def __init__(
        self, max_in_flight: int = 1024, *, name: str = "keyed-executor", max_idle_workers: int = 16
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if max_idle_workers < 1:
            raise ValueError("max_idle_workers must be >= 1")
        self.max_in_flight = max_in_flight
        self.name = name
        # Submitters waiting for a slot; a finishing piece of work hands its slot over.
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Work per key, admitted and not finished; the running piece is the lane's first.
        self._lanes: dict[Hashable, deque[_Item]] = {}
        # The pool runs the keys' turns; a key is in its ready queue or in one turn.
        self._pool: LanePool[Hashable] = LanePool(
            self._turn, abandon=self._abandon, name=f"{name}-worker", max_idle_workers=max_idle_workers
        )
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    @property
    def max_idle_workers(self) -> int:
        """Idle workers kept at most; one that would park beyond it ends."""
        return self._pool.max_idle_workers

    @max_idle_workers.setter
    def max_idle_workers(self, value: int) -> None:
        if value < 1:
            raise ValueError("max_idle_workers must be >= 1")
        self._pool.max_idle_workers = value

    @property
    def in_flight(self) -> int:
        """Admitted work not finished yet (queued in a lane or running)."""
        return self._in_flight

    @property
    def active_keys(self) -> int:
        """Keys with admitted, unfinished work."""
        return len(self._lanes)

    @property
    def workers(self) -> int:
        """Worker tasks alive (running, parked or about to start)."""
        return self._pool.workers

    @property
    def closed(self) -> bool:
        return self._closed

    async def submit(self, key: Hashable, work: Work) -> None:
        """Admit ``work`` to ``key``'s lane; return once admitted (not once done).

        Waits while the executor is full. An exception of ``work`` is logged; use
        :meth:`run` to receive it.
        """
        await self._admit(key, work, None)

    def submit_nowait(self, key: Hashable, work: Work) -> bool:
        """Admit ``work`` to ``key``'s lane if a slot is free at once; False (nothing
        admitted) when the executor is full or submitters are waiting: then ``await
        submit``. It spares a dispatcher two coroutines per message."""
        if self._closed:
            raise ExecutorClosedError(f"{self.name} is closed")
        if self._in_flight >= self.max_in_flight or self._waiters:
            return False
        self._in_flight += 1
        self._enqueue(key, work, None)
        return True

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
        self._enqueue(key, work, future)

    def _enqueue(self, key: Hashable, work: Work, future: asyncio.Future[Any] | None) -> None:
        """Put admitted work (its slot taken) in ``key``'s lane."""
        self._idle.clear()
        lane = self._lanes.get(key)
        if lane is not None:
            lane.append((work, future))  # the pool has the key (ready or in its turn)
            return
        self._lanes[key] = deque(((work, future),))
        self._pool.ready(key)

    async def _turn(self, key: Hashable) -> bool:
        """Run the first piece of ``key``'s lane; True when the lane has more."""
        lane = self._lanes[key]
        work, future = lane[0]
        try:
            if future is None:
                await work()
            elif not future.cancelled():
                value = await work()
                if not future.done():
                    future.set_result(value)
        except asyncio.CancelledError:
            if future is not None and not future.done():
                future.cancel()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the worker is stopped (close); the pool abandons the lane
        except Exception as error:
            if future is not None and not future.done():
                future.set_exception(error)
            else:
                log.exception("%s: work of %r failed", self.name, key)
        finally:
            lane.popleft()
            self._done()
        if lane:
            return True
        del self._lanes[key]
        return False

    def _abandon(self, key: Hashable) -> None:
        """The worker was stopped while it owned ``key``: its work left behind is
        abandoned, not run."""
        lane = self._lanes.pop(key, None)
        if lane is None:
            return
        while lane:
            _, future = lane.popleft()
            if future is not None and not future.done():
                future.cancel()
            self._done()

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
        rest; the workers end. True when everything finished."""
        self._closed = True
        finished = await self.drain(timeout)
        # Keys no worker owned when the workers stopped: abandoned, not run.
        for key in await self._pool.close():
            self._abandon(key)
        for key in list(self._lanes):
            self._abandon(key)
        return finished
