"""The receiver kit: three pieces every broker's receiver otherwise writes again.

A :class:`~wow_core.transport.TransportReceiver` over a real broker needs, whatever the
broker:

- :class:`Readiness`: ``ready()`` as one attempt at a time (a group joined, a consumer
  created), its success cached, its failure retried by the next call, and a close that
  ends a pending attempt and turns the waiters' wake-up into ``BusClosedError``.
- :class:`ReadAhead`: the bounded buffer between the loop that reads from the broker and
  the iterator that hands records out: the reader asks for room before it reads more, so
  what is not read stays on the broker (for the other members of the group); the
  iterator takes items in order, and a cancelled ``get()`` loses nothing.
- :meth:`ReadAhead.guard`: a read loop's failure (one it does not retry) handed to the
  iterator: raised once, after the items already read, then the iteration ends; it never
  leaves a consumer waiting on a loop that died.

The Kafka, Redis and NATS receivers are built on them. Using the kit is a convenience,
never a requirement: the SPI stays a protocol. See ``docs/transports/writing.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar, cast

from wow_core.messaging.contract import BusClosedError

T = TypeVar("T")

__all__ = ["ReadAhead", "Readiness"]


class Readiness(Generic[T]):
    """A receiver's readiness: one attempt at a time, a success cached, a failure retried.

    ``attempt`` is called by the first :meth:`wait` (and again after a failure) and
    returns an awaitable (a coroutine, run as a task named ``name``, or a future, used as
    it is: a future created synchronously by ``attempt``, such as a command queued on a
    connection, is in place as ``wait()`` is called).

    Guarantees:

    - At most one attempt runs at a time; concurrent ``wait()`` callers share it and all
      get its result or its error.
    - A success is cached: later ``wait()`` calls return its result at once, until
      :meth:`reset`.
    - A failure is raised to the callers waiting on it and forgotten: the next ``wait()``
      starts a new attempt.
    - Cancelling a caller of ``wait()`` cancels only that caller, never the attempt the
      others share.
    - After :meth:`close`, ``wait()`` raises :class:`~wow_core.messaging.BusClosedError`;
      a caller waiting on an attempt that ``close`` cancelled gets ``BusClosedError`` too,
      not a ``CancelledError`` it did not ask for.

    Not guaranteed: that an attempt cancelled by ``close`` undid what it had done on the
    broker; the attempt's own cleanup does that.
    """

    __slots__ = ("_attempt", "_closed", "_future", "_name", "_what")

    def __init__(self, attempt: Callable[[], Awaitable[T]], *, what: str, name: str | None = None) -> None:
        self._attempt = attempt
        self._what = what
        self._name = name
        self._future: asyncio.Future[T] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def succeeded(self) -> bool:
        """True once an attempt succeeded (and :meth:`reset` was not called since)."""
        future = self._future
        return future is not None and future.done() and not future.cancelled() and future.exception() is None

    def result(self) -> T:
        """The result of the successful attempt; ``RuntimeError`` if there is none."""
        if not self.succeeded:
            raise RuntimeError(f"{self._what} is not ready")
        assert self._future is not None
        return self._future.result()

    def _start(self) -> asyncio.Future[T]:
        awaitable = self._attempt()
        if asyncio.iscoroutine(awaitable):
            coroutine = cast(Coroutine[Any, Any, T], awaitable)
            return asyncio.get_running_loop().create_task(coroutine, name=self._name)
        return asyncio.ensure_future(awaitable)

    async def wait(self) -> T:
        """The result of a successful attempt, starting one if none is cached or running."""
        if self._closed:
            raise BusClosedError(f"{self._what} is closed")
        future = self._future
        if future is None or (future.done() and (future.cancelled() or future.exception() is not None)):
            future = self._future = self._start()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            # the attempt was cancelled by close (a gather of futures then ends with a
            # CancelledError as its exception, not as cancelled), not this caller
            if self._closed and future.done() and (task is None or not task.cancelling()):
                raise BusClosedError(f"{self._what} was closed while getting ready") from None
            raise

    def reset(self) -> None:
        """Forget a completed outcome (the resource vanished): the next ``wait()`` tries again.

        An attempt still running is kept.
        """
        future = self._future
        if future is not None and future.done():
            self._future = None

    async def close(self) -> T | None:
        """Refuse further waits, cancel a running attempt and wait for it to end; idempotent.

        Returns the result of the attempt if it succeeded (before or despite the
        cancellation), so the caller can release what it holds; None otherwise.
        """
        self._closed = True
        future = self._future
        if future is None:
            return None
        if not future.done():
            future.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await future
        if future.cancelled() or future.exception() is not None:
            return None
        return future.result()


class ReadAhead(Generic[T]):
    """The bounded buffer between a receiver's read loop and its iterator.

    Each item has a size (1 by default: a record; a fetched batch counts its records).
    ``capacity`` bounds the total size the read loop reads ahead; once it is reached,
    :meth:`wait_for_room` holds the loop until the iterator took enough that the size
    fell to ``low_mark`` (by default ``capacity - 1``: room for one more), which spares a
    loop that reads in batches from waking for every item taken.

    Guarantees:

    - Items come out in the order they were put, each to one :meth:`get` caller.
    - The bound is the reader's: :meth:`put_nowait` never blocks and never refuses an
      open buffer, so an item the broker already handed over (a callback, a batch larger
      than the room) is kept; a reader that calls :meth:`wait_for_room` (or :meth:`put`)
      before reading keeps the size under ``capacity`` plus one read.
    - A cancelled ``get()`` takes nothing: no item is lost.
    - :meth:`end` (the reader is done, with or without an error): ``get()`` hands out the
      items left, then raises the error once (to one caller), then
      ``StopAsyncIteration`` to every caller from then on.
    - :meth:`close` (the receiver closes): ``get()`` raises ``StopAsyncIteration`` at
      once, items left are returned to the caller of ``close`` (to hand them back to the
      broker), every waiter wakes, and later puts are refused (``False``).
    """

    __slots__ = (
        "_available",
        "_capacity",
        "_closed",
        "_ended",
        "_error",
        "_items",
        "_low_mark",
        "_room",
        "_size",
    )

    def __init__(self, capacity: int, *, low_mark: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"a read-ahead capacity must be at least 1, not {capacity}")
        low = capacity - 1 if low_mark is None else low_mark
        if not 0 <= low < capacity:
            raise ValueError(f"low_mark must be in [0, {capacity}), not {low_mark}")
        self._capacity = capacity
        self._low_mark = low
        self._items: deque[tuple[T, int]] = deque()
        self._size = 0
        self._available = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._ended = False
        self._closed = False
        self._error: BaseException | None = None

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def size(self) -> int:
        """The total size of the items waiting to be taken."""
        return self._size

    @property
    def room(self) -> int:
        """``capacity`` less ``size``: how much the reader may read now (0 or less: none)."""
        return self._capacity - self._size

    def __len__(self) -> int:
        """How many items wait to be taken."""
        return len(self._items)

    @property
    def ended(self) -> bool:
        """True once :meth:`end` or :meth:`close` was called."""
        return self._ended

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the reader's side ------------------------------------------------------------

    async def wait_for_room(self) -> None:
        """Return once the size is below ``capacity``, or the buffer ended.

        When the buffer is full, waits until the iterator took it down to ``low_mark``.
        """
        while self._size >= self._capacity and not self._ended:
            self._room.clear()
            await self._room.wait()

    def put_nowait(self, item: T, size: int = 1) -> bool:
        """Add ``item`` whatever the room; False (not added) once the buffer ended."""
        if self._ended:
            return False
        self._items.append((item, size))
        self._size += size
        self._available.set()
        return True

    async def put(self, item: T, size: int = 1) -> bool:
        """Wait for room, then add ``item``; False (not added) once the buffer ended."""
        await self.wait_for_room()
        return self.put_nowait(item, size)

    def end(self, error: BaseException | None = None) -> None:
        """No more items: the iterator takes what is left, then ``error`` once, then the end.

        Only the first error is kept.
        """
        if error is not None and self._error is None and not self._closed:
            self._error = error
        self._ended = True
        self._available.set()
        self._room.set()

    def close(self) -> list[T]:
        """End the iteration now; return the items not taken (oldest first); idempotent."""
        self._closed = True
        self._error = None
        self.end()
        items = [item for item, _ in self._items]
        self._items.clear()
        self._size = 0
        return items

    async def guard(self, loop: Awaitable[None], *, what: str, logger: logging.Logger) -> None:
        """Run a read loop; an exception it raises ends the buffer with that exception.

        The loop retries what it can retry; anything else it raises is logged at ERROR
        (``<what> stopped: <type>: <error>``) and handed to the iterator by :meth:`end`,
        instead of leaving a consumer waiting on a loop that died. A loop that returns,
        or is cancelled, ends nothing.
        """
        try:
            await loop
        except Exception as error:
            logger.error("%s stopped: %s: %s", what, type(error).__name__, error)
            self.end(error)

    # -- the iterator's side ----------------------------------------------------------

    async def get(self) -> T:
        """The oldest item, waiting for one; see the class docstring for the end."""
        items = self._items
        while not items:
            if self._ended:
                error, self._error = self._error, None
                if error is not None:
                    raise error
                raise StopAsyncIteration
            self._available.clear()
            await self._available.wait()
        item, size = items.popleft()
        self._size -= size
        if self._size <= self._low_mark:
            self._room.set()
        return item
