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

A queued copy may hold an *emitted* message (its header read-only: the local copy a
local bus took): it is copied, with its own writable header, only when it goes out. An
admitted copy that nobody could process is settled in the admission's callback, without
a worker's turn.

Guarantees and limits:

- Queues of different aggregates never wait for one another; there is no lock shared by
  aggregates. Nothing orders copies of *different* aggregates, topics or buses.
- A queued copy keeps only what the registered :class:`~wow_core.context.ContextCapture`
  implementations capture (metrics source, trace context), never the sender's whole
  ``contextvars`` context; the workers that send copies run in an empty context.
- The backlog (copies waiting, per aggregate type) is reported to the observer on every
  change (``on_backlog``), or read by it when it needs it if it says so
  (``reads_backlog``: the metrics middleware's gauge ``wow.local_first.backlog``, read
  at collection with wow-otel);
  reaching the high-water mark logs one warning per crossing, not one per copy.
- :meth:`flush` sends what is queued within a timeout and cancels the rest (reported to
  the observer: ``on_copies_cancelled``).
  Copies live only in this process: a crash loses every queued copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from wow_core.concurrency import LanePool
from wow_core.context import CapturedContext, ContextCapture
from wow_core.messaging.contract import BusClosedError, MessageBus
from wow_core.messaging.local_first.deadlines import HandOffDeadlines
from wow_core.messaging.local_first.observer import LocalFirstObserver
from wow_core.model import AggregateId, Header, Message, NamedAggregate

M = TypeVar("M", bound=Message)

log = logging.getLogger("wow_core.messaging.local_first")

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
        "outboxed",
        "started",
    )

    def __init__(self, message: M, context: CapturedContext) -> None:
        self.message = message
        self.context = context
        self.admission: asyncio.Future[bool] | None = None
        self.deadline = 0.0
        self.handed_off = False
        self.abandoned = False
        self.started = False
        self.outboxed = False
        """A ``local_first=true`` copy of the message is already in a transactional outbox
        (see :meth:`LocalFirstMessageBus.send_outboxed`): this copy goes out only when the
        local admission did not confirm (``local_first=false``)."""
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


class _LaneState(Enum):
    """Where a copy lane is; exactly one at a time."""

    IDLE = "idle"
    """No copy of the lane can go out yet: the lane is empty or its first copy was queued
    without being started."""
    WAITING = "waiting"
    """The first copy waits for its hand-off result (a callback on the admission and an
    entry in the shared :class:`~wow_core.messaging.local_first.deadlines.HandOffDeadlines`)."""
    READY = "ready"
    """The lane is in the worker pool's ready queue."""
    RUNNING = "running"
    """A task (a pool worker, or the task that sends a copy at once) owns the lane and is
    sending its first copy."""


# Module-level names of the states: the hot paths read a global, not an Enum attribute.
_IDLE = _LaneState.IDLE
_WAITING = _LaneState.WAITING
_READY = _LaneState.READY
_RUNNING = _LaneState.RUNNING


class _Lane:
    """The copy queue of one aggregate id and its :class:`_LaneState`.

    A lane is in the ready queue, owned by one task, or waiting on one callback, never
    two of those at once: its copies go out one at a time, in queue order.
    """

    __slots__ = ("admission", "armed", "copies", "key", "owner", "state")

    def __init__(self, key: AggregateId, owner: LocalFirstDistributedCopies[Any]) -> None:
        self.key = key
        self.owner = owner
        self.copies: deque[QueuedCopy[Any]] = deque()
        self.state = _IDLE
        self.admission: asyncio.Future[bool] | None = None
        # The ticket of this lane's wait in the owner's HandOffDeadlines (0: not waiting).
        self.armed = 0

    def decided(self, _: object = None) -> None:
        """The awaited hand-off result arrived, or its deadline passed."""
        self.owner._decided(self)

    def disarm(self) -> None:
        if self.armed:
            self.owner._deadlines.forget(self)
        admission = self.admission
        if admission is not None:
            unlisten = getattr(admission, "unlisten", None)
            if unlisten is not None:
                unlisten(self.decided)
            else:
                admission.remove_done_callback(self.decided)
            self.admission = None


class LocalFirstDistributedCopies(Generic[M]):
    """The distributed copies of one local-first bus, queued per aggregate id.

    ``bus_name`` is ``command``, ``event`` or ``state`` and, with ``settings_key`` (the
    settings of the bus), names it in log messages. ``observer`` hears of every copy sent,
    failed, cancelled or timed out and of every backlog change; ``None`` calls nothing.

    How the queues are drained: a lane whose first copy can go out (its hand-off result is
    known, or its deadline passed) is made ready in a :class:`~wow_core.concurrency.LanePool`;
    its long-lived worker tasks send one copy per turn, and a lane whose next copy can go
    out goes back at the end of the ready queue (fairness between aggregates). A lane
    whose first copy waits for its hand-off result holds no worker: a callback on the
    admission (or its deadline, in one timer shared by every waiting lane:
    :class:`~wow_core.messaging.local_first.deadlines.HandOffDeadlines`) makes it ready.
    Before a worker sends while other lanes are ready, it wakes one more worker, so a send
    that suspends (I/O) does not delay other aggregates. Idle workers beyond ``max_idle_workers`` end.
    """

    def __init__(
        self,
        distributed: MessageBus[M, Any],
        *,
        bus_name: str,
        settings_key: str = "",
        observer: LocalFirstObserver | None = None,
        captures: Sequence[ContextCapture] = (),
        backlog_high_water_mark: int = 10000,
        hand_off_timeout: float = 30.0,
        max_idle_workers: int = 8,
    ) -> None:
        if backlog_high_water_mark < 1:
            raise ValueError("backlog_high_water_mark must be >= 1")
        if hand_off_timeout <= 0:
            raise ValueError("hand_off_timeout must be > 0")
        self._distributed = distributed
        # Whether a copy could be processed by any receiver; the transport bus answers for
        # the transports that see their receivers (the in-memory one).
        self._delivers: Callable[..., bool] | None = getattr(distributed, "delivers", None)
        self.bus_name = bus_name
        self._settings_key = settings_key or f"WOW_{bus_name.upper()}__BUS__LOCAL_FIRST"
        self._observer = observer
        self._captures = tuple(captures)
        self.backlog_high_water_mark = backlog_high_water_mark
        self._rearm_below = max(1, int(backlog_high_water_mark * REARM_RATIO))
        self.hand_off_timeout = hand_off_timeout
        self._lanes: dict[AggregateId, _Lane] = {}
        # One loop timer for the deadlines of every lane waiting for a hand-off result.
        self._deadlines: HandOffDeadlines[_Lane] = HandOffDeadlines(_Lane.decided)
        # Callbacks on admissions run in this empty context: one registered in the
        # sender's context would keep that whole context (a web request...) alive while
        # the copy waits. Shared: the callbacks only move lanes, they set no variable.
        self._empty_context = contextvars.Context()
        # The lane state is READY exactly while the lane is in the pool's ready queue.
        self._pool: LanePool[_Lane] = LanePool(
            self._turn,
            abandon=self._abandon,
            name=f"local-first {bus_name} copies",
            max_idle_workers=max_idle_workers,
        )
        # Lanes not idle (waiting, ready or running); join and flush wait for 0.
        self._active = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        # per aggregate type met (zero kept: an observer reading it reports zero there)
        self._backlog: dict[NamedAggregate, int] = {}
        # whether the observer is told each change, or reads the backlog itself
        self._tells_backlog = observer is not None and not observer.reads_backlog(self._backlogs)
        self._above_mark: set[NamedAggregate] = set()
        self._closed = False
        self._flushing: asyncio.Task[FlushResult] | None = None

    # -- queueing -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def observer(self) -> LocalFirstObserver | None:
        """What hears of copies sent, failed, cancelled, timed out and of the backlog."""
        return self._observer

    @property
    def workers(self) -> int:
        """Worker tasks alive (sending, parked or about to start)."""
        return self._pool.workers

    @property
    def max_idle_workers(self) -> int:
        """Idle workers kept at most; one that would park beyond it ends."""
        return self._pool.max_idle_workers

    @max_idle_workers.setter
    def max_idle_workers(self, value: int) -> None:
        if value < 1:
            raise ValueError("max_idle_workers must be >= 1")
        self._pool.max_idle_workers = value

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
        entry: QueuedCopy[M] = QueuedCopy(message, CapturedContext.take(self._captures))
        key = message.aggregate_id
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(key, self)
        lane.copies.append(entry)
        self._add_backlog(key.named_aggregate, 1)
        if start:
            self.start(entry)
        return entry

    def start(self, entry: QueuedCopy[M]) -> None:
        """Let ``entry`` go out in its turn: once every earlier copy of its aggregate was
        sent and its hand-off result is known (or its deadline passed), a worker sends it.

        Never sends inside this call and never runs in the sender's context: the worker
        sends in its own (empty) context with only what the captures took restored.
        """
        entry.started = True
        lane = self._lanes.get(entry.message.aggregate_id)
        if lane is None or lane.state is not _IDLE or lane.copies[0] is not entry:
            return  # an earlier copy is in its lane; this one follows in its turn
        self._active += 1
        self._quiet.clear()
        admission = entry.admission
        if admission is None and self._reaches_nobody(entry):
            # Refused, nothing ahead of it, and its topic has no receiver at all: its turn
            # is now and there is nothing to send (see _send_in_turn), so no task either.
            lane.state = _RUNNING
            lane.copies.popleft()
            self._add_backlog(lane.key.named_aggregate, -1)
            entry._resolve(None)
            if self._advance(lane):
                self._pool.ready(lane)
            return
        if admission is None or admission.done():
            # It can go out now and nothing is ahead of it: send it in a task whose first
            # step runs inside this call, so a send that does not wait completes before
            # this returns (a refused sender then waits for no loop turn).
            lane.state = _RUNNING
            self._pool.run_now(lane, name=f"local-first {self.bus_name} copy")
            return
        if self._arm(lane):
            self._pool.ready(lane)

    def sends_nothing(self, message: M) -> bool:
        """True when a copy of ``message`` queued now would go out at once and reach nobody:
        no copy of its aggregate is queued (its turn is now) and its topic has no receiver at
        all, whatever its mark (only a transport that sees its receivers, the in-memory
        one, can tell). Such a copy needs no queue entry, context, timer or callback: a
        local-first bus does not queue it (nothing to send, nothing to wait for).

        Raises :class:`BusClosedError` once :meth:`flush` started, as :meth:`queue` does.
        """
        if self._closed:
            raise BusClosedError(f"local-first {self.bus_name} copies are closed")
        delivers = self._delivers
        return (
            delivers is not None
            and message.aggregate_id not in self._lanes
            and not delivers(message, handled_locally=False)
        )

    def _reaches_nobody(self, entry: QueuedCopy[M]) -> bool:
        """A copy not handed off (marked ``"false"``) that no receiver could get now."""
        delivers = self._delivers
        return delivers is not None and not delivers(entry.message, handled_locally=False)

    def backlog(self, named_aggregate: NamedAggregate | None = None) -> int:
        """Copies waiting to be sent, for one aggregate type or in total."""
        if named_aggregate is not None:
            return self._backlog.get(named_aggregate, 0)
        return sum(self._backlog.values())

    async def join(self) -> None:
        """Wait until every started copy (including ones queued meanwhile) was sent or failed."""
        while self._active:
            await self._quiet.wait()

    # -- draining -----------------------------------------------------------------------

    def _arm(self, lane: _Lane) -> bool:
        """A lane whose first copy was started: True when that copy can go out now (the lane
        is READY; the caller puts it in the pool), else it waits for its hand-off result."""
        entry = lane.copies[0]
        admission = entry.admission
        if (
            admission is not None
            and not admission.done()
            and asyncio.get_running_loop().time() < entry.deadline
        ):
            lane.state = _WAITING
            lane.admission = admission
            self._deadlines.add(lane, entry.deadline)
            listen = getattr(admission, "listen", None)
            if listen is not None:
                # The in-memory bus's admission calls back in the call that decides it
                # (no loop turn); the callback only moves lanes and sets no variable.
                listen(lane.decided)
            else:
                admission.add_done_callback(lane.decided, context=self._empty_context)
            return False
        lane.state = _READY
        return True

    def _decided(self, lane: _Lane) -> None:
        if lane.state is not _WAITING:
            return
        lane.disarm()
        while self._settles_unsent(lane.copies[0]):
            # Its turn is now (first in its lane, its result known) and there is nothing
            # to send: settled here, in the admission's callback, without a worker's turn.
            lane.state = _RUNNING
            lane.copies.popleft()
            self._add_backlog(lane.key.named_aggregate, -1)
            if not self._advance(lane):
                return  # the next copy waits for its own result, or the lane went idle
        lane.state = _READY
        self._pool.ready(lane)

    def _settles_unsent(self, entry: QueuedCopy[M]) -> bool:
        """True (and ``entry`` resolved) when the copy, whose turn it is, goes nowhere: its
        admission confirmed and every receiver of its topic would drop a copy handled
        locally (or there is none), or its outboxed copy is relayed. Anything else (a
        rejection, a timeout, a copy some receiver could process) is sent by a worker."""
        admission = entry.admission
        if admission is None or not admission.done() or admission.cancelled():
            return False
        if admission.exception() is not None or admission.result() is not True:
            return False
        if not entry.outboxed:
            delivers = self._delivers
            if delivers is None or delivers(entry.message, handled_locally=True):
                return False
            header = entry.message.header
            if not header.read_only:  # an emitted local copy already says "true"
                header[Header.LOCAL_FIRST] = "true"
        entry._resolve(None)
        return True

    async def _turn(self, lane: _Lane) -> bool:
        """Send a lane's first copy (the lane is owned by the calling task); True when the
        lane's next copy can go out now (the pool puts the lane back in its ready queue)."""
        lane.state = _RUNNING
        await self._send_in_turn(lane.copies[0])
        lane.copies.popleft()
        self._add_backlog(lane.key.named_aggregate, -1)
        return self._advance(lane)

    def _abandon(self, lane: _Lane) -> None:
        """The task sending the lane's first copy was stopped (flush timeout, loop
        shutdown, a cancelled worker): the lane's copies, that one included, are cancelled
        and counted."""
        if lane.state is _RUNNING:
            self._cancel_all(lane)
            self._retire(lane)

    def _advance(self, lane: _Lane) -> bool:
        """After a lane's first copy was sent: True when the next one can go out now, else
        it waits for its hand-off result or the lane goes idle."""
        copies = lane.copies
        if copies and copies[0].started:
            return self._arm(lane)
        self._retire(lane)
        return False

    def _retire(self, lane: _Lane) -> None:
        """An active lane goes idle (and is forgotten when it has no copies)."""
        lane.state = _IDLE
        if not lane.copies and self._lanes.get(lane.key) is lane:
            del self._lanes[lane.key]
        self._active -= 1
        if not self._active:
            self._quiet.set()

    def _cancel_all(self, lane: _Lane) -> None:
        key = lane.key
        count = len(lane.copies)
        if not count:
            return
        for entry in lane.copies:
            entry._resolve(CopyCancelledError(f"copy of {entry.message.name} {key} cancelled, never sent"))
        lane.copies.clear()
        self._add_backlog(key.named_aggregate, -count)
        if self._observer is not None:
            self._observer.on_copies_cancelled(key.named_aggregate, count)

    async def _send_in_turn(self, entry: QueuedCopy[M]) -> None:
        """Send one copy; raises only when the task sending it is cancelled itself."""
        local_first = self._decide(entry)
        message = entry.message
        if message.header.read_only:
            # The emitted (immutable) local copy of a handed-off message: the copy that goes
            # out gets its own writable header now, not at every send (most go nowhere).
            message = entry.message = message.copy()
        if entry.outboxed and local_first:
            # Admitted locally: the outbox's relay sends the copy marked true; nothing more.
            entry._resolve(None)
            return
        message.header[Header.LOCAL_FIRST] = "true" if local_first else "false"
        delivers = self._delivers
        if delivers is not None and not delivers(message, handled_locally=local_first):
            # Nobody could process it: its topic has no receiver at all, or every receiver
            # would acknowledge and drop it unprocessed as handled locally (the in-memory
            # transport knows its receivers). Not encoded, not sent, not counted as sent;
            # a send waiting for it completes (a send to nobody proves nothing more).
            entry._resolve(None)
            return
        try:
            with entry.context.restored():
                await self._distributed.send(message)
        except (Exception, asyncio.CancelledError) as error:
            if isinstance(error, asyncio.CancelledError):
                worker = asyncio.current_task()
                if worker is not None and worker.cancelling():
                    raise
            if self._observer is not None:
                self._observer.on_copy_failed(message, entry.handed_off, error)
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
        if self._observer is not None:
            self._observer.on_copy_sent(message, local_first)
        entry._resolve(None)

    def _decide(self, entry: QueuedCopy[M]) -> bool:
        """The hand-off result: true only when every routed receiver admitted the message.

        Called once the result is known or its deadline passed (the lane was made ready).
        """
        admission = entry.admission
        if admission is None:
            return False
        if not admission.done():
            message = entry.message
            if self._observer is not None:
                self._observer.on_hand_off_timeout(message)
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

    def _backlogs(self) -> Mapping[NamedAggregate, int]:
        """The copies waiting per aggregate type met so far (an observer's read)."""
        return self._backlog

    def _add_backlog(self, named_aggregate: NamedAggregate, delta: int) -> None:
        value = self._backlog[named_aggregate] = self._backlog.get(named_aggregate, 0) + delta
        if self._tells_backlog and self._observer is not None:
            self._observer.on_backlog(named_aggregate, value)
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
        cancelled; each is reported to the observer (``on_copies_cancelled``) and a sender
        still waiting for one gets :class:`CopyCancelledError`.
        """
        if self._flushing is None:
            self._closed = True
            self._flushing = asyncio.get_running_loop().create_task(self._flush(timeout))
        return await asyncio.shield(self._flushing)

    async def _flush(self, timeout: float | None) -> FlushResult:
        if self._active:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.join(), timeout)
        cancelled = sum(len(lane.copies) for lane in self._lanes.values())
        # Stops the workers; a lane one of them was sending is cancelled through _abandon.
        await self._pool.close()
        # Whatever is still queued now (waiting for a hand-off result, ready but not taken,
        # or never started) is cancelled.
        for lane in list(self._lanes.values()):
            lane.disarm()
            self._cancel_all(lane)
            if lane.state is not _IDLE:
                self._retire(lane)
            elif self._lanes.get(lane.key) is lane:
                del self._lanes[lane.key]
        self._deadlines.close()
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


def _flag(value: bool) -> str:
    return "true" if value else "false"
