"""KeyedExecutor: one key's work in order, different keys in parallel, bounded in total.

Dispatchers run their work here keyed by aggregate id, so one aggregate's commands
(or events) are handled one after the other, in submission order, while different
aggregates proceed concurrently. ``submit`` waits while ``max_in_flight`` pieces of work
are admitted and unfinished: that is the back-pressure a dispatcher passes on to its
receiver.

How: a pool of long-lived worker tasks takes keys from a ready queue. A key with work is
either in the ready queue or owned by exactly one worker, never both, so its work runs
one piece at a time in submission order. A worker runs one piece, then puts the key back
at the end of the queue when it has more (fairness between keys), and moves on to the
next ready key without going through the event loop. Before it starts a piece while
other keys wait, it wakes one more worker (a parked one, or a new one): if the piece
suspends (I/O), that helper takes the next key, so keys that wait on I/O run in
parallel, while work that never suspends is drained by one worker in one go. Workers are
at most ``max_in_flight + 1``; idle ones beyond ``max_idle_workers`` exit.

Not guaranteed: any order between keys, or between two executors. Work runs in the
workers' own (initially empty) ``contextvars`` context, not in the submitter's; a
context variable one piece of work sets without resetting is seen by later work of the
same worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

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
        "_parked",
        "_ready",
        "_stopping",
        "_waiters",
        "_waking",
        "_workers",
        "max_idle_workers",
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
        self.max_idle_workers = max_idle_workers
        self.name = name
        # Submitters waiting for a slot; a finishing piece of work hands its slot over.
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Work per key, admitted and not finished; the running piece is the lane's first.
        self._lanes: dict[Hashable, deque[_Item]] = {}
        # Keys with work that no worker owns.
        self._ready: deque[Hashable] = deque()
        # Idle workers, each waiting on its future.
        self._parked: deque[asyncio.Future[None]] = deque()
        self._workers: set[asyncio.Task[None]] = set()
        # Workers woken (or created) that have not looked at the ready queue yet.
        self._waking = 0
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._stopping = False

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
        return len(self._workers)

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
            lane.append((work, future))  # its owner (or the ready queue) has the key
            return
        self._lanes[key] = deque(((work, future),))
        self._ready.append(key)
        if not self._waking:
            self._wake()

    def _wake(self) -> None:
        """Get one more worker looking at the ready queue: a parked one, else a new one."""
        self._waking += 1
        parked = self._parked
        while parked:
            park = parked.popleft()
            if not park.done():
                park.set_result(None)
                return
        task = asyncio.get_running_loop().create_task(
            self._work(), name=f"{self.name}-worker", context=contextvars.Context()
        )
        self._workers.add(task)

    async def _work(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        ready = self._ready
        lanes = self._lanes
        self._waking -= 1
        key: Hashable = None
        lane: deque[_Item] | None = None
        try:
            while True:
                if not ready:
                    if self._stopping or len(self._parked) >= self.max_idle_workers:
                        return
                    park: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                    self._parked.append(park)
                    try:
                        await park
                    except asyncio.CancelledError:
                        if park.done() and not park.cancelled():
                            self._waking -= 1
                        else:
                            self._parked.remove(park)
                        raise
                    self._waking -= 1
                    continue
                key = ready.popleft()
                lane = lanes[key]
                if ready and not self._waking:
                    self._wake()  # others wait: a helper takes them if this piece suspends
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
                    if task.cancelling():
                        raise  # the worker is stopped (close); the lane is abandoned below
                except Exception as error:
                    if future is not None and not future.done():
                        future.set_exception(error)
                    else:
                        log.exception("%s: work of %r failed", self.name, key)
                finally:
                    lane.popleft()
                    self._done()
                if lane:
                    ready.append(key)
                else:
                    del lanes[key]
                lane = None
        finally:
            self._workers.discard(task)
            if lane is not None:
                # The worker was stopped while it owned this key: its work left behind
                # is abandoned, not run.
                self._abandon(key, lane)
            if ready and not self._waking and not self._stopping:
                self._wake()

    def _abandon(self, key: Hashable, lane: deque[_Item]) -> None:
        while lane:
            _, future = lane.popleft()
            if future is not None and not future.done():
                future.cancel()
            self._done()
        if self._lanes.get(key) is lane:
            del self._lanes[key]

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
        self._stopping = True
        workers = list(self._workers)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        # Keys no worker owned when the workers stopped: abandoned, not run.
        self._ready.clear()
        for key, lane in list(self._lanes.items()):
            self._abandon(key, lane)
        return finished
