"""``LocalFirstDistributedCopies``: the per-aggregate queues of distributed copies.

Every local-first send queues the distributed copy of its message here before the
message is handed to the local bus. The queue of one aggregate id sends its copies one
after another, in queue order: a copy goes out only after every earlier copy of the same
aggregate was sent (or failed), whatever the earlier copies waited for. That is what
keeps an aggregate's messages in send order on the distributed bus.

A copy waits for its *hand-off result* (the local admission) before it goes out, and is
sent with ``local_first`` = that result. The copy, not the sender, waits: a sender that
stops waiting changes nothing about the copy, so there is neither a duplicate nor a loss.
A result that does not arrive within the hand-off timeout counts as a refusal (logged,
the copy goes out with ``local_first=false``).

Guarantees and limits:

- Queues of different aggregates never wait for one another; there is no lock shared by
  aggregates. Nothing orders copies of *different* aggregates, topics or buses.
- A queued copy keeps only what the registered :class:`~wow_core.context.ContextCapture`
  implementations capture (metrics source, trace context), never the sender's whole
  ``contextvars`` context; the drain tasks run in an empty context.
- The backlog (copies waiting, per aggregate type) is the gauge ``wow.local_first.backlog``;
  reaching the high-water mark logs one warning per crossing, not one per copy.
- :meth:`flush` sends what is queued within a timeout and cancels (and counts) the rest.
  Copies live only in this process: a crash loses every queued copy.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from asyncio.tasks import _enter_task, _leave_task
from collections import deque
from collections.abc import Coroutine, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from wow_core.context import CapturedContext, ContextCapture
from wow_core.messaging.contract import BusClosedError, MessageBus
from wow_core.metrics import Metrics, NoopMetrics
from wow_core.model import AggregateId, Header, Message, NamedAggregate

M = TypeVar("M", bound=Message)

log = logging.getLogger("wow_core.messaging.local_first")

BACKLOG_GAUGE = "wow.local_first.backlog"
COPIES_SENT = "wow.local_first.copies.sent"
COPY_FAILED = "wow.local_first.copy.failed"
COPIES_CANCELLED = "wow.local_first.copies.cancelled"
HAND_OFF_TIMEOUTS = "wow.local_first.hand_off.timeouts"

REARM_RATIO = 0.9
"""A high-water crossing ends when the backlog falls below 90 % of the mark; only then can
the next crossing warn again (a backlog hovering at the mark does not flood the log)."""


class CopyCancelledError(BusClosedError):
    """A queued copy was cancelled (shutdown timeout) and never sent."""


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What :meth:`LocalFirstDistributedCopies.flush` did."""

    completed: bool
    """True when every queued copy was sent (or failed) before the timeout."""
    cancelled: int
    """Copies still queued at the timeout, cancelled: other services never receive them."""


class QueuedCopy(Generic[M]):
    """One distributed copy in its aggregate's queue.

    Its ``admission`` is attached after the hand-off (``None`` means refused). A sender
    that waits for the copy (a refused send) waits on :meth:`completion`.
    """

    __slots__ = (
        "_done",
        "_error",
        "_settled",
        "abandoned",
        "admission",
        "context",
        "deadline",
        "handed_off",
        "message",
    )

    def __init__(self, message: M, context: CapturedContext) -> None:
        self.message = message
        self.context = context
        self.admission: asyncio.Future[bool] | None = None
        self.deadline = 0.0
        self.handed_off = False
        self.abandoned = False
        self._done: asyncio.Future[None] | None = None
        self._settled = False
        self._error: BaseException | None = None

    def handed_off_with(self, admission: asyncio.Future[bool], deadline: float) -> None:
        """The local bus accepted the hand-off; the copy waits for ``admission`` until ``deadline``."""
        self.admission = admission
        self.deadline = deadline
        self.handed_off = True

    def completion(self) -> asyncio.Future[None]:
        """A future resolved when this copy was sent, failed with its error, or was cancelled."""
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
            if self._settled:
                if self._error is None:
                    self._done.set_result(None)
                else:
                    self._done.set_exception(self._error)
        return self._done

    def abandon(self) -> None:
        """The waiting sender went away: failures are now logged here instead of raised."""
        self.abandoned = True
        if self._done is not None:
            self._done.add_done_callback(_retrieve)

    def _resolve(self, error: BaseException | None) -> None:
        if self._settled:
            return
        self._settled = True
        self._error = error
        done = self._done
        if done is None or done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    @property
    def awaited(self) -> bool:
        return self._done is not None and not self.abandoned


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class _Lane:
    """The copy queue of one aggregate id and the task draining it."""

    __slots__ = ("copies", "step", "task")

    def __init__(self) -> None:
        self.copies: deque[QueuedCopy[Any]] = deque()
        self.task: asyncio.Task[None] | None = None
        self.step: _EagerStep | None = None


class _Continue:
    """Continues, inside a task, a coroutine whose first step already ran.

    The task forwards what it is sent or thrown (a wake-up, a cancellation) to the
    coroutine, exactly as an ``await`` chain would.
    """

    __slots__ = ("awaited", "coro")

    def __init__(self, coro: Coroutine[Any, Any, None], awaited: Any) -> None:
        self.coro = coro
        self.awaited = awaited

    def __await__(self) -> Generator[Any, Any, None]:
        coro, awaited = self.coro, self.awaited
        while True:
            try:
                sent = yield awaited
            except BaseException as error:
                try:
                    awaited = coro.throw(error)
                except StopIteration:
                    return
            else:
                try:
                    awaited = coro.send(sent)
                except StopIteration:
                    return


class _EagerStep:
    """A task whose first step runs at once, inside the caller, as that task.

    asyncio of Python 3.11 has no eager tasks: the task is created (scheduled) first, then
    its coroutine's first step runs synchronously with the task made current (so
    ``current_task()``, and the timeouts that cancel it, see the task, not the caller) in
    the task's own context. The scheduled step then only continues what is left.
    """

    __slots__ = ("awaited", "context", "coro", "error", "finished")

    def __init__(self, coro: Coroutine[Any, Any, None], context: contextvars.Context) -> None:
        self.coro = coro
        self.context = context
        self.awaited: Any = None
        self.finished = False
        self.error: BaseException | None = None

    def first(self, task: asyncio.Task[None]) -> None:
        loop = task.get_loop()
        caller = asyncio.current_task(loop)
        if caller is not None:
            _leave_task(loop, caller)
        _enter_task(loop, task)
        try:
            self.awaited = self.context.run(self.coro.send, None)
        except StopIteration:
            self.finished = True
        except BaseException as error:
            self.finished = True
            self.error = error
        finally:
            _leave_task(loop, task)
            if caller is not None:
                _enter_task(loop, caller)

    async def rest(self) -> None:
        if self.finished:
            if self.error is not None:
                raise self.error
            return
        await _Continue(self.coro, self.awaited)

    def close(self) -> None:
        """Close a coroutine whose task was cancelled before it could continue it."""
        if getattr(self.coro, "cr_frame", None) is not None:
            self.context.run(self.coro.close)


class LocalFirstDistributedCopies(Generic[M]):
    """The distributed copies of one local-first bus, queued per aggregate id.

    ``bus_name`` is ``command``, ``event`` or ``state`` (the tag of every metric);
    ``settings_key`` names the settings of the bus in log messages.
    """

    def __init__(
        self,
        distributed: MessageBus[M, Any],
        *,
        bus_name: str,
        settings_key: str = "",
        metrics: Metrics | None = None,
        captures: Sequence[ContextCapture] = (),
        backlog_high_water_mark: int = 10000,
        hand_off_timeout: float = 30.0,
    ) -> None:
        if backlog_high_water_mark < 1:
            raise ValueError("backlog_high_water_mark must be >= 1")
        if hand_off_timeout <= 0:
            raise ValueError("hand_off_timeout must be > 0")
        self._distributed = distributed
        self.bus_name = bus_name
        self._settings_key = settings_key or f"WOW_{bus_name.upper()}__BUS__LOCAL_FIRST"
        self._metrics: Metrics = metrics or NoopMetrics()
        self._captures = tuple(captures)
        self.backlog_high_water_mark = backlog_high_water_mark
        self._rearm_below = max(1, int(backlog_high_water_mark * REARM_RATIO))
        self.hand_off_timeout = hand_off_timeout
        self._lanes: dict[AggregateId, _Lane] = {}
        self._backlog: dict[NamedAggregate, int] = {}
        self._above_mark: set[NamedAggregate] = set()
        self._tag_cache: dict[NamedAggregate, dict[str, str]] = {}
        self._sent_tags: dict[tuple[NamedAggregate, bool], dict[str, str]] = {}
        self._closed = False
        self._flushing: asyncio.Task[FlushResult] | None = None

    # -- queueing -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def queue(self, message: M, *, start: bool = True) -> QueuedCopy[M]:
        """Queue ``message`` (an independent copy) behind the earlier copies of its aggregate.

        Synchronous, so nothing can run between queueing and the hand-off that follows.
        The copy counts as refused until :meth:`QueuedCopy.handed_off_with` is called; a
        caller that hands off after queueing passes ``start=False`` and calls :meth:`start`
        once the copy's hand-off result is attached. Raises :class:`BusClosedError` once
        :meth:`flush` started.
        """
        if self._closed:
            raise BusClosedError(f"local-first {self.bus_name} copies are closed")
        entry: QueuedCopy[M] = QueuedCopy(message, CapturedContext(self._captures))
        key = message.aggregate_id
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.copies.append(entry)
        self._add_backlog(key.named_aggregate, 1)
        if start:
            self.start(entry)
        return entry

    def start(self, entry: QueuedCopy[M]) -> None:
        """Let the queue of ``entry``'s aggregate send, if it is not sending already.

        The queue's task takes its first step now, inside this call (as that task, in an
        empty context, never the sender's), so a copy that can go out at once (refused,
        over a transport whose send does not wait) is sent before this returns; whatever
        has to wait continues in the task.
        """
        key = entry.message.aggregate_id
        lane = self._lanes.get(key)
        if lane is None or lane.task is not None:
            return
        context = contextvars.Context()
        step = _EagerStep(self._drain(key, lane), context)
        lane.task = asyncio.get_running_loop().create_task(
            step.rest(), name=f"local-first {self.bus_name} copies {key}", context=context
        )
        lane.step = step
        step.first(lane.task)

    def backlog(self, named_aggregate: NamedAggregate | None = None) -> int:
        """Copies waiting to be sent, for one aggregate type or in total."""
        if named_aggregate is not None:
            return self._backlog.get(named_aggregate, 0)
        return sum(self._backlog.values())

    async def join(self) -> None:
        """Wait until every queued copy (including ones queued meanwhile) was sent or failed."""
        while True:
            tasks = {lane.task for lane in self._lanes.values() if lane.task is not None}
            if not tasks:
                return
            await asyncio.wait(tasks)

    # -- draining -----------------------------------------------------------------------

    async def _drain(self, key: AggregateId, lane: _Lane) -> None:
        try:
            while lane.copies:
                entry = lane.copies[0]
                await self._send_in_turn(entry)
                lane.copies.popleft()
                self._add_backlog(key.named_aggregate, -1)
        except asyncio.CancelledError:
            self._cancel_all(key, lane)
            raise
        finally:
            lane.task = None
            lane.step = None
            if not lane.copies and self._lanes.get(key) is lane:
                del self._lanes[key]

    def _cancel_all(self, key: AggregateId, lane: _Lane) -> None:
        count = len(lane.copies)
        if not count:
            return
        for entry in lane.copies:
            entry._resolve(CopyCancelledError(f"copy of {entry.message.name} {key} cancelled, never sent"))
        lane.copies.clear()
        self._add_backlog(key.named_aggregate, -count)
        self._metrics.increment(COPIES_CANCELLED, count, self._tags(key.named_aggregate))

    async def _send_in_turn(self, entry: QueuedCopy[M]) -> None:
        local_first = await self._decide(entry)
        message = entry.message
        message.header[Header.LOCAL_FIRST] = "true" if local_first else "false"
        tags = self._tags(message.aggregate_id.named_aggregate)
        try:
            with entry.context.restored():
                await self._distributed.send(message)
        except Exception as error:
            self._metrics.increment(COPY_FAILED, 1.0, {**tags, "handed_off": _flag(entry.handed_off)})
            if not entry.awaited:
                log.error(
                    "local-first %s: the distributed copy of %s %s (id %s, local_first=%s) failed; "
                    "the send already completed, other services will not receive it: %s: %s",
                    self.bus_name,
                    message.name,
                    message.aggregate_id,
                    message.id,
                    _flag(local_first),
                    type(error).__name__,
                    error,
                )
            entry._resolve(error)
            return
        sent_tags = self._sent_tags.get((message.aggregate_id.named_aggregate, local_first))
        if sent_tags is None:
            sent_tags = {**tags, "local_first": _flag(local_first)}
            self._sent_tags[(message.aggregate_id.named_aggregate, local_first)] = sent_tags
        self._metrics.increment(COPIES_SENT, 1.0, sent_tags)
        entry._resolve(None)

    async def _decide(self, entry: QueuedCopy[M]) -> bool:
        """The hand-off result: true only when every routed receiver admitted the message."""
        admission = entry.admission
        if admission is None:
            return False
        if not admission.done():
            await _wait_until(admission, entry.deadline)
            if not admission.done():
                message = entry.message
                self._metrics.increment(
                    HAND_OFF_TIMEOUTS, 1.0, self._tags(message.aggregate_id.named_aggregate)
                )
                log.warning(
                    "local-first %s: no hand-off result for %s %s (id %s) within %.3g s; "
                    "counted as refused, the distributed copy goes out unmarked",
                    self.bus_name,
                    message.name,
                    message.aggregate_id,
                    message.id,
                    self.hand_off_timeout,
                )
                return False
        if admission.cancelled():
            return False
        error = admission.exception()
        if error is not None:
            message = entry.message
            log.error(
                "local-first %s: the local admission of %s %s (id %s) failed; the distributed copy "
                "goes out unmarked: %s: %s",
                self.bus_name,
                message.name,
                message.aggregate_id,
                message.id,
                type(error).__name__,
                error,
            )
            return False
        return admission.result() is True

    # -- backlog ------------------------------------------------------------------------

    def _tags(self, named_aggregate: NamedAggregate) -> dict[str, str]:
        tags = self._tag_cache.get(named_aggregate)
        if tags is None:
            tags = self._tag_cache[named_aggregate] = {
                "bus": self.bus_name,
                "aggregate": str(named_aggregate),
            }
        return tags

    def _add_backlog(self, named_aggregate: NamedAggregate, delta: int) -> None:
        value = self._backlog.get(named_aggregate, 0) + delta
        if value:
            self._backlog[named_aggregate] = value
        else:
            self._backlog.pop(named_aggregate, None)
        self._metrics.gauge(BACKLOG_GAUGE, float(value), self._tags(named_aggregate))
        if value >= self.backlog_high_water_mark:
            if named_aggregate not in self._above_mark:
                self._above_mark.add(named_aggregate)
                log.warning(
                    "local-first %s: %d distributed copies of %s are waiting to be sent "
                    "(high-water mark %d, %s__BACKLOG_HIGH_WATER_MARK); local receivers are slower "
                    "than senders or admissions are pending",
                    self.bus_name,
                    value,
                    named_aggregate,
                    self.backlog_high_water_mark,
                    self._settings_key,
                )
        elif value < self._rearm_below:
            self._above_mark.discard(named_aggregate)

    # -- shutdown -----------------------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> FlushResult:
        """Stop taking copies; send the queued ones within ``timeout``; cancel the rest.

        Idempotent: a second call waits for the first. Returns how many copies were
        cancelled; each is counted on ``wow.local_first.copies.cancelled`` and a sender
        still waiting for one gets :class:`CopyCancelledError`.
        """
        if self._flushing is None:
            self._closed = True
            self._flushing = asyncio.get_running_loop().create_task(self._flush(timeout))
        return await asyncio.shield(self._flushing)

    async def _flush(self, timeout: float | None) -> FlushResult:
        tasks = {lane.task for lane in self._lanes.values() if lane.task is not None}
        pending: set[asyncio.Task[None]] = set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
        cancelled = sum(len(lane.copies) for lane in self._lanes.values())
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        # Whatever is still queued now is cancelled; a task cancelled before its scheduled
        # step never resumed its queue, so that queue is closed here.
        stuck = [(key, lane) for key, lane in self._lanes.items() if lane.copies]
        for key, lane in stuck:
            if lane.step is not None:
                lane.step.close()
            self._cancel_all(key, lane)
            lane.task = None
            lane.step = None
            if self._lanes.get(key) is lane:
                del self._lanes[key]
        if not cancelled:
            return FlushResult(True, 0)
        log.warning(
            "local-first %s: %d distributed copies were still queued after %.3g s and were cancelled; "
            "other services will never receive them",
            self.bus_name,
            cancelled,
            timeout if timeout is not None else 0.0,
        )
        return FlushResult(False, cancelled)

    stop = flush


async def _wait_until(future: asyncio.Future[bool], deadline: float) -> None:
    """Wait until ``future`` is done or the loop clock reaches ``deadline``; never raises
    for the future's outcome and never cancels it."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    future.add_done_callback(wake)
    timer = loop.call_at(deadline, wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)


def _flag(value: bool) -> str:
    return "true" if value else "false"
