"""``LanePool``: long-lived worker tasks that run the turns of ready lanes.

A *lane* is whatever its owner keeps in order (a key's queue of work, an aggregate's
queue of copies). The owner says when a lane is ready (:meth:`LanePool.ready`); a worker
takes ready lanes in the order they became ready and runs one *turn* of each (the
owner's ``turn`` coroutine function: run or send the lane's first item). A turn returns
True when the lane has another item that can go now: the lane goes back at the end of
the ready queue (fairness between lanes) and the worker moves on to the next ready lane
without a trip through the event loop.

Before a worker starts a turn while other lanes are ready, it wakes one more worker (a
parked one, or a new task): if the turn suspends (I/O), that helper takes the next lane,
so lanes that wait on I/O run in parallel, while turns that never suspend are drained by
one worker in one go. A worker with nothing ready parks on a future; workers parked
beyond ``max_idle_workers`` end.

Guaranteed, provided the owner puts a lane in the pool only while it is neither ready
nor in a turn (calls :meth:`ready` once per readiness, and :meth:`run_now` only for a
lane that is not ready):

- one turn of a lane at a time: a lane is in the ready queue or in exactly one turn;
- lanes start their turns in the order they became ready (first in, first out);
- each :meth:`ready` leads to exactly one turn, unless the pool is closed first or the
  worker running it is cancelled;
- a turn that raises loses only its own lane: the error is logged, ``abandon(lane)`` is
  called and the worker goes on with the other lanes; a worker cancelled during a turn
  (:meth:`close`, loop shutdown) calls ``abandon(lane)`` too, then ends;
- workers (tasks) run in their own, initially empty, ``contextvars`` context, never in
  the context of whoever made a lane ready.

Not guaranteed: any order between the turns of different lanes once they started (a turn
that suspends lets later lanes overtake it), or an upper bound on the workers beyond one
per lane suspended in a turn (the owner bounds the lanes in flight).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from wow_core.concurrency.eager import start_eagerly

log = logging.getLogger(__name__)

L = TypeVar("L")


class LanePool(Generic[L]):
    """Worker tasks that run one turn at a time of each ready lane; see the module doc."""

    __slots__ = (
        "_abandon",
        "_parked",
        "_ready",
        "_stopping",
        "_turn",
        "_waking",
        "_workers",
        "max_idle_workers",
        "name",
    )

    def __init__(
        self,
        turn: Callable[[L], Awaitable[bool]],
        *,
        abandon: Callable[[L], None],
        name: str,
        max_idle_workers: int = 16,
    ) -> None:
        if max_idle_workers < 1:
            raise ValueError("max_idle_workers must be >= 1")
        self._turn = turn
        self._abandon = abandon
        self.name = name
        """Name of the worker tasks."""
        self.max_idle_workers = max_idle_workers
        """Parked workers kept at most; one that would park beyond it ends."""
        # Lanes whose turn is due, in the order they became ready.
        self._ready: deque[L] = deque()
        # Idle workers, each waiting on its future.
        self._parked: deque[asyncio.Future[None]] = deque()
        self._workers: set[asyncio.Future[None]] = set()
        # Workers woken (or created) that have not looked at the ready queue yet.
        self._waking = 0
        self._stopping = False

    @property
    def workers(self) -> int:
        """Tasks alive: workers running a turn, parked or about to start, and turns
        started by :meth:`run_now` that have not finished."""
        return len(self._workers)

    @property
    def waiting(self) -> int:
        """Lanes ready and not taken by a worker yet."""
        return len(self._ready)

    @property
    def closed(self) -> bool:
        return self._stopping

    def ready(self, lane: L) -> None:
        """``lane``'s next turn is due: a worker runs it after the lanes ready before it.

        Never runs the turn inside this call. After :meth:`close` the lane is only queued
        (nothing runs it).
        """
        self._ready.append(lane)
        if not self._waking and not self._stopping:
            self._wake()

    def run_now(self, lane: L, *, name: str | None = None) -> None:
        """Run ``lane``'s turn in a task of its own whose first step runs inside this call
        (see :func:`~wow_core.concurrency.start_eagerly`), in an empty context.

        For a lane that is not ready and has nothing ahead of it: a turn that does not
        suspend is over when this returns. The task counts among :attr:`workers` until it
        ends and is cancelled by :meth:`close`; when the turn returns True the lane is
        made :meth:`ready`. After :meth:`close` the lane is only queued, as by :meth:`ready`.
        """
        if self._stopping:
            self._ready.append(lane)
            return
        task = start_eagerly(self._once(lane), name=name or self.name, context=contextvars.Context())
        if not task.done():
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

    async def close(self) -> list[L]:
        """Stop: no worker is woken any more, every task (parked, in a turn, started by
        :meth:`run_now`) is cancelled and awaited. Returns the lanes that were ready and
        never taken, in order, for the owner to dispose of; a lane whose turn was cut
        short was given to ``abandon``. Idempotent."""
        self._stopping = True
        tasks = list(self._workers)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        left = list(self._ready)
        self._ready.clear()
        return left

    # -- workers ------------------------------------------------------------------------

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
            self._work(), name=self.name, context=contextvars.Context()
        )
        self._workers.add(task)

    async def _work(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        ready = self._ready
        parked = self._parked
        turn = self._turn
        self._waking -= 1
        try:
            while True:
                if not ready:
                    if self._stopping or len(parked) >= self.max_idle_workers:
                        return
                    park: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                    parked.append(park)
                    try:
                        await park
                    except asyncio.CancelledError:
                        if park.done() and not park.cancelled():
                            self._waking -= 1  # woken, then cancelled before it looked
                        else:
                            parked.remove(park)
                        raise
                    self._waking -= 1
                    continue
                lane = ready.popleft()
                if ready and not self._waking:
                    self._wake()  # others wait: a helper takes them if this turn suspends
                try:
                    again = await turn(lane)
                except Exception:
                    log.exception("%s: a turn failed; its lane is abandoned", self.name)
                    self._abandon(lane)
                    continue
                except BaseException:
                    self._abandon(lane)  # stopped during the turn (close, loop shutdown)
                    raise
                if again:
                    ready.append(lane)
        finally:
            self._workers.discard(task)
            if ready and not self._waking and not self._stopping:
                self._wake()  # a worker that ends leaves no ready lane behind unattended

    async def _once(self, lane: L) -> None:
        """One turn of ``lane`` outside the workers (see :meth:`run_now`)."""
        try:
            again = await self._turn(lane)
        except Exception:
            log.exception("%s: a turn failed; its lane is abandoned", self.name)
            self._abandon(lane)
            return
        except BaseException:
            self._abandon(lane)
            raise
        if again:
            self.ready(lane)
