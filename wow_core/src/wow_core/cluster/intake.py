"""``CommandIntake``: the partitioned, deduplicating command intake of one bounded context.

The intake of context ``C`` is the subscription ``NAME`` (``<C>.intake`` by default) of the
context's command topic ``<prefix><C>.commands`` (:func:`~wow_core.cluster.wire.commands_topic`).
Commands are keyed by aggregate id with the partitioner of the event topics, so the
consumer-group member that owns a partition of the command topic owns the same partition
number of the event topics: a command executes where its aggregate's log partition is
owned, with no forwarding. This needs a transport whose consumer groups give each key
partition to one member (``owns_partitions``: the in-memory and Kafka transports); any
other transport is refused at start with :class:`IntakeUnsupportedError`.

For each command, in its aggregate's lane (one aggregate's commands in order, different
aggregates in parallel, at most :attr:`InFlightLimit.intakes` at once on the node):

1. a scheduled command (``due_at``) waits in its lane for its due time first;
2. it is executed through the context's kernel, after
   :meth:`~wow_core.command.WaitCoordinator.forward` put the envelope's wait context on
   it; a creation that named no aggregate was given its id when decoded
   (:class:`~wow_core.cluster.wire.CreationIds`); the kernel deduplicates by request id
   per aggregate type; the ``PROCESSED`` signal goes to the waiting node;
3. the outcome is settled: a commit, a duplicate or no change is done, and with
   ``reply_to.committed`` a :class:`~wow_core.cluster.wire.CommandReceipt` (committed,
   ``duplicate`` for a duplicate) goes to ``<prefix><reply_to.context>.receipts``; a
   rejection (a business outcome: a domain error, ``COMMAND_UNHANDLED``,
   ``COMMAND_INVALID`` with its violations) is never retried nor parked, and with a
   ``reply_to`` its rejected receipt is sent. A receipt is acknowledged by the broker
   (the transport's ``send`` returned) before the record is acknowledged;
4. a technical failure (the kernel raised: a store that is down, an executor that is
   closing; ``EVENT_VERSION_CONFLICT``: a contended outcome; a receipt ``send`` that
   raised) is retried ``retries`` times with a growing backoff, then the aggregate is
   parked in the :class:`~wow_core.cluster.ledger.FailureLedger` at the command's
   position; its later commands wait until :meth:`CommandIntake.retry` or
   :meth:`CommandIntake.skip`. A :class:`CommandBusyError` is backpressure: retried after
   ``busy_backoff`` without spending the retry budget.

The checkpoint of a partition is the contiguous low watermark of settled commands
(:class:`~wow_core.cluster.checkpoint.LowWatermark`): a record is acknowledged only once
settled, and the transport commits no further than every earlier record acknowledged
(the Kafka receiver commits its contiguous watermark), so a handover or restart executes
again at most what was in flight, which the kernel deduplicates; a receipt sent again
then is dropped by the sender by command id (:class:`~wow_core.cluster.wire.ReceiptDeduplicator`).

Counters go to the node's metrics facade (:mod:`wow_core.metrics`, exported with
``WOW_METRICS=otel``), tagged with the subscription (``intake``): ``wow.intake.received``
(records taken), ``wow.intake.settled`` (by ``outcome``: ``committed``, ``duplicate``,
``rejected``, ``skipped``), ``wow.intake.retries`` (technical failures retried),
``wow.intake.busy_retries``, ``wow.intake.parked``, ``wow.intake.revoked_dropped``, and the
gauge ``wow.intake.lane_depth`` (commands received and not settled, in every lane).

With a :class:`~wow_core.cluster.journal.LedgerJournal` (the ledger topic), a park, a
retry and a skip are written to the journal in order, retried until the broker takes them,
and nothing that depends on a write is settled before it is taken: the retried aggregate's
commands, the skipped command (and its receipt), a ``wow.ledger.*`` command's receipt; the
commands of a partition new to the node wait for the journal's read barrier.

On a revocation of partitions (a rebalance; the receiver's optional
:class:`~wow_core.transport.spi.RevocationListening` method, offered by the Kafka receiver),
the intake drops the commands of those partitions it has not started (unacknowledged: the
new owner runs them from the checkpoint), lets the ones in flight finish (their receipts
included) and only then lets the revocation complete, so the old and the new owner never
run a partition's commands at once. A parked aggregate of a revoked partition leaves this
node's ledger: its failed command is the new owner's to run again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wow_core.cluster.checkpoint import LowWatermark, parse_position
from wow_core.cluster.journal import JournalClosedError, LedgerJournal
from wow_core.cluster.ledger import FailureLedger, ParkedAggregate, ParkedNotFoundError, parked_to_json
from wow_core.cluster.wire import (
    LEDGER,
    LEDGER_BODIES,
    CommandReceipt,
    CommandWire,
    CreationIds,
    EnvelopeHead,
    LedgerList,
    LedgerRetry,
    ReceiptOutcome,
    UndecodableCommand,
    WireError,
    commands_topic,
    decode_command,
    receipts_topic,
    register_ledger_bodies,
)
from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.stages import CommandStage, ErrorCodes, WaitSignal
from wow_core.concurrency.lane_pool import LanePool
from wow_core.metrics import Metrics, NoopMetrics
from wow_core.model import AggregateId, BodyTypeRegistry, TopicKind, now_ms
from wow_core.modeling.kernel import CommandKernel, CommandOutcome
from wow_core.transport.defaults import DefaultTopicNaming, naming_of
from wow_core.transport.spi import (
    Transport,
    TransportMessage,
    TransportReceiver,
    TransportRecord,
    set_revocation_listener,
)

log = logging.getLogger(__name__)

SKIPPED = "COMMAND_SKIPPED"
"""The error code of the receipt of a command skipped from the failure ledger."""


class CommandBusyError(RuntimeError):
    """The node refuses a command as busy (``me.ahoo.wow.runtime.CommandBusyException``):
    backpressure, not a failure. The intake retries it after a backoff without spending
    its retry budget."""


class ContendedOutcomeError(RuntimeError):
    """The kernel gave up on a command after repeated version conflicts: the outcome is
    contended, not decided; a technical failure that the intake retries."""


class IntakeUnsupportedError(RuntimeError):
    """The transport cannot run a cluster intake: its consumer groups do not give each
    key partition to one member."""


class InFlightLimit:
    """The bound on commands the intakes of a node execute at once.

    ``intakes`` defaults to half of ``node`` (the node's in-flight bound, at least 1), so a
    node that owns many partitions of a backlog leaves room for its callers, sagas and
    timers. One limit is shared by every intake of the node.
    """

    __slots__ = ("_semaphore", "intakes", "node")

    def __init__(self, node: int, intakes: int | None = None) -> None:
        if node < 1:
            raise ValueError("the node's in-flight bound must be >= 1")
        if intakes is not None and not 1 <= intakes <= node:
            raise ValueError(f"InFlightLimit.intakes must be between 1 and the node's bound {node}")
        self.node = node
        self.intakes = intakes if intakes is not None else max(1, node // 2)
        self._semaphore = asyncio.Semaphore(self.intakes)

    @property
    def semaphore(self) -> asyncio.Semaphore:
        return self._semaphore


@dataclass(frozen=True, slots=True)
class IntakeOptions:
    """How one intake retries and reads ahead (``WOW_CLUSTER__*`` in the runtime)."""

    retries: int = 3
    """Technical failures retried before the aggregate is parked."""
    retry_backoff: float = 0.2
    """Seconds before the first retry; doubled at each next one."""
    max_retry_backoff: float = 5.0
    busy_backoff: float = 0.05
    """Seconds before a command refused as busy runs again."""
    max_buffered: int = 4096
    """Records received and not settled at most (read-ahead); past it, reading waits."""

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        for name in ("retry_backoff", "max_retry_backoff", "busy_backoff"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if self.max_buffered < 1:
            raise ValueError("max_buffered must be >= 1")


class _Entry:
    __slots__ = (
        "aggregate_id",
        "attempts",
        "busy",
        "dropped",
        "head",
        "lane_id",
        "offset",
        "outcome",
        "partition",
        "record",
        "rejection",
        "revoked",
        "running",
        "wire",
    )

    def __init__(
        self,
        record: TransportRecord,
        aggregate_id: AggregateId,
        wire: CommandWire | None,
        rejection: UndecodableCommand | None,
        partition: tuple[str, int] | None,
        offset: int,
    ) -> None:
        self.record = record
        self.aggregate_id = aggregate_id
        self.wire = wire
        self.rejection = rejection
        self.partition = partition
        self.offset = offset
        self.attempts = 0
        self.busy = 0
        self.running = False  # in the kernel or sending its receipt
        self.revoked = False  # its partition is being revoked: finish, never retry
        self.dropped = False  # taken out unsettled (revocation): never to run here
        self.outcome: CommandReceipt | None = None  # decided: only its settlement is left
        self.head: EnvelopeHead | None = rejection.head if rejection is not None else None
        # A ledger system command runs in a lane of its own, never behind a parked aggregate.
        self.lane_id = (
            AggregateId(LEDGER, wire.command.id)
            if wire is not None and type(wire.command.body) in LEDGER_BODIES
            else aggregate_id
        )


class _Lane:
    __slots__ = ("aggregate_id", "parked", "queue")

    def __init__(self, aggregate_id: AggregateId) -> None:
        self.aggregate_id = aggregate_id
        self.queue: deque[_Entry] = deque()
        self.parked: ParkedAggregate | None = None


class CommandIntake:
    """The intake of the context ``context_name``; see the module doc.

    ``kernel`` decides the commands (its registry names the aggregates the context
    hosts), ``coordinator`` is the node's :class:`~wow_core.command.WaitCoordinator`,
    ``registry`` the body types of the wire. ``sleep`` is the backoff and due-time wait
    (a test may pass a faster one).
    """

    def __init__(
        self,
        context_name: str,
        transport: Transport,
        kernel: CommandKernel,
        coordinator: WaitCoordinator,
        registry: BodyTypeRegistry,
        *,
        limit: InFlightLimit,
        ledger: FailureLedger | None = None,
        options: IntakeOptions | None = None,
        name: str | None = None,
        prefix: str = "wow.",
        creations: CreationIds | None = None,
        strict_bodies: bool = True,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        metrics: Metrics | None = None,
        journal: LedgerJournal | None = None,
    ) -> None:
        self.context_name = context_name
        self.topic = commands_topic(context_name, prefix)
        self.name = name or f"{context_name}.intake"
        self.prefix = prefix
        self.transport = transport
        self.kernel = kernel
        self.coordinator = coordinator
        self.registry = register_ledger_bodies(registry)
        self.limit = limit
        self.ledger = ledger if ledger is not None else FailureLedger()
        self.options = options or IntakeOptions()
        self.creations = creations or CreationIds()
        self.strict_bodies = strict_bodies
        self._sleep = sleep
        self.metrics: Metrics = metrics if metrics is not None else NoopMetrics()
        self.journal = journal
        if journal is not None:
            self.ledger = journal.ledger
        self._skips: set[tuple[AggregateId, str]] = set()  # skipped before their record came
        # settles written to the journal, by (aggregate, from_position): the settlement of
        # the command at that position waits for it (module doc)
        self._journal_settles: dict[tuple[AggregateId, str], asyncio.Future[None]] = {}
        self._tags = {"intake": self.name}
        self._outcome_tags = {
            outcome: {"intake": self.name, "outcome": outcome}
            for outcome in ("committed", "duplicate", "rejected", "skipped")
        }
        self._lanes: dict[AggregateId, _Lane] = {}
        self._watermarks: dict[tuple[str, int], LowWatermark] = {}
        self._buffer = asyncio.Semaphore(self.options.max_buffered)
        self._pool: LanePool[_Lane] = LanePool(self._turn, abandon=self._abandon, name=self.name)
        self._receiver: TransportReceiver | None = None
        self._loop: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._unsettled = 0
        self._epochs: dict[tuple[str, int], int] = {}  # revocations seen, per partition
        self._running: dict[tuple[str, int] | None, set[_Entry]] = {}
        self._run_changed = asyncio.Event()
        # Counters, for tests and metrics.
        self.executed = 0
        self.committed = 0
        self.duplicates = 0
        self.rejected = 0
        self.retried = 0
        self.busy_retried = 0
        self.receipts_sent = 0
        self.dead_lettered = 0
        self.revoked_dropped = 0

    # -- life -----------------------------------------------------------------------

    async def prepare(self) -> None:
        """Join the subscription ``name`` of the command topic and wait until the receiver
        is ready, without taking commands yet (the runtime prepares every receiver first).

        :class:`IntakeUnsupportedError` for a transport without partition ownership."""
        if self._receiver is not None:
            return
        if not getattr(self.transport, "owns_partitions", False):
            raise IntakeUnsupportedError(
                f"the cluster intake of {self.context_name!r} needs a transport whose consumer groups "
                f"give each key partition to one member (in_memory, kafka); "
                f"{getattr(self.transport, 'name', type(self.transport).__name__)!r} does not: "
                "its consumers share a stream without partition ownership, so one aggregate's "
                "commands could run on two nodes at once"
            )
        check = getattr(self.transport, "check_co_partitioned", None)
        if check is not None:
            naming = naming_of(self.transport, DefaultTopicNaming(self.prefix))
            event_topics = sorted(
                naming.topic(named, TopicKind.EVENT)
                for named in self.kernel.registry.named_aggregates
                if named.context_name == self.context_name
            )
            await check(self.topic, event_topics)
        if self.journal is not None:
            await self.journal.start()  # the cluster's parked entries, before any command
        receiver = self.transport.open(self.name, [self.topic])
        set_revocation_listener(receiver, self._on_revoked)
        self._receiver = receiver
        await receiver.ready()

    async def start(self) -> None:
        """Start taking commands (prepares first if needed)."""
        if self._loop is not None:
            return
        await self.prepare()
        receiver = self._receiver
        assert receiver is not None
        receiver.open_processing()
        self._loop = asyncio.get_running_loop().create_task(self._consume(receiver), name=self.name)
        log.info("cluster intake %s takes %s", self.name, self.topic)

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop reading, let what is in flight settle (up to ``timeout``), then close.

        What is not settled (parked lanes, commands behind them, commands cut short) is
        not acknowledged: the next owner of its partition executes it. True when
        everything not parked settled."""
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        settled = True
        if self._unsettled_flowing():
            self._idle.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._idle.wait()
            except TimeoutError:
                settled = False
        await self._pool.close()
        self._lanes.clear()
        self._journal_settles.clear()
        if self._receiver is not None:
            await self._receiver.close()
            self._receiver = None
        if self.journal is not None:
            await self.journal.close()  # what it did not write yet, for up to its timeout
        return settled

    def _unsettled_flowing(self) -> bool:
        return any(lane.parked is None and lane.queue for lane in self._lanes.values())

    def _check_idle(self) -> None:
        if not self._idle.is_set() and not self._unsettled_flowing():
            self._idle.set()

    # -- observation ------------------------------------------------------------------

    def checkpoint(self, partition: int, topic: str | None = None) -> int | None:
        """The checkpoint of ``partition`` of the command topic: the offset after the last
        settled command, every earlier one settled (None before any settled)."""
        mark = self._watermarks.get((topic or self.topic, partition))
        return None if mark is None else mark.checkpoint

    @property
    def in_flight(self) -> int:
        """Commands received and not settled (including those of parked lanes)."""
        return self._unsettled

    def parked(self) -> list[ParkedAggregate]:
        """The aggregates this intake parked, oldest first."""
        return self.ledger.entries(self.name)

    # -- the ledger's operations ---------------------------------------------------------

    def retry(self, aggregate_id: AggregateId) -> ParkedAggregate:
        """Run the parked aggregate's commands again from its failed one, with a fresh retry
        budget. :class:`~wow_core.cluster.ledger.ParkedNotFoundError` if it is not parked.

        With a journal, the retry is written to it and the aggregate's commands run at once,
        but none is settled (acknowledged) before the broker took that write: a crash
        meanwhile finds the aggregate still parked, its commands unacknowledged."""
        entry = self.ledger.remove(self.name, aggregate_id)
        if self.journal is not None:
            self._hold_until_written((aggregate_id, entry.from_position), self.journal.settle(entry, "retry"))
        lane = self._lanes.get(aggregate_id)
        if lane is not None and lane.parked is not None:
            lane.parked = None
            if lane.queue:
                lane.queue[0].attempts = 0
                self._pool.ready(lane)
        return entry

    def _hold_until_written(self, key: tuple[AggregateId, str], written: asyncio.Future[None]) -> None:
        """The command at ``key`` is not settled before ``written`` is done; once it is, the
        hold goes (one that failed, the journal closing, stays: that command is not settled)."""
        self._journal_settles[key] = written

        def release(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is None and self._journal_settles.get(key) is done:
                del self._journal_settles[key]

        written.add_done_callback(release)

    async def _journal_settled(self, entry: ParkedAggregate) -> None:
        """Return once the journal took the settle of ``entry`` (at once without one)."""
        written = self._journal_settles.get((entry.aggregate_id, entry.from_position))
        if written is not None:
            await asyncio.shield(written)

    async def skip(self, aggregate_id: AggregateId) -> ParkedAggregate:
        """Settle the parked aggregate's failed command without executing it, then run its
        later commands. The failed command's sender, when it named a ``reply_to``, gets a
        rejected receipt ``COMMAND_SKIPPED``, acknowledged by the broker before the command
        is settled (as a rejection's). With a journal, returns once the broker took the
        skip (retried until then), before anything is settled."""
        entry = self.ledger.remove(self.name, aggregate_id)
        lane = self._lanes.get(aggregate_id)
        head = lane.queue[0] if lane is not None and lane.queue else None
        if head is None or head.record.position != entry.from_position:
            self._skips.add((aggregate_id, entry.from_position))  # its record is still to come
        if self.journal is not None:
            try:
                await asyncio.shield(self.journal.settle(entry, "skip"))  # retried until taken
            except BaseException:
                self._skips.discard((aggregate_id, entry.from_position))
                self.ledger.park(entry)  # not written (the journal closed): still parked
                raise
        if lane is not None and lane.parked is not None:
            lane.parked = None
            if head is not None and head.record.position == entry.from_position:
                try:
                    await self._skip_head(head)
                except BaseException:
                    lane.parked = entry  # the receipt failed: still parked, try again
                    self.ledger.park(entry)
                    raise
                lane.queue.popleft()
                await self._settle(head)
            if lane.queue:
                lane.queue[0].attempts = 0
                self._pool.ready(lane)
            else:
                del self._lanes[aggregate_id]
        return entry

    async def _skip_head(self, entry: _Entry) -> None:
        """Answer ``entry`` as skipped (its receipt, when it asked for one)."""
        self._skips.discard((entry.lane_id, entry.record.position))
        if entry.outcome is None:
            entry.outcome = CommandReceipt(
                ReceiptOutcome.REJECTED,
                self._command_id(entry),
                entry.wire.command.request_id if entry.wire is not None else self._request_id(entry),
                entry.aggregate_id,
                error_code=SKIPPED,
                error_msg="skipped from the failure ledger by an operator: never executed",
                position=entry.record.position,
            )
        await self._run(entry)

    def _request_id(self, entry: _Entry) -> str:
        assert entry.head is not None
        return entry.head.request_id

    # -- reading --------------------------------------------------------------------------

    async def _consume(self, receiver: TransportReceiver) -> None:
        async for record in receiver:
            place = parse_position(record.position)
            key = None if place is None else (record.topic, place[0])
            epoch = self._epochs.get(key, 0) if key is not None else 0
            await self._buffer.acquire()
            if key is not None and self._epochs.get(key, 0) != epoch:
                self._buffer.release()  # revoked while it waited for room: the new owner's
                continue
            try:
                entry = self._entry(record)
            except WireError as error:
                self._buffer.release()
                await self._dead_letter(record, error)
                continue
            fresh = entry.partition is not None and entry.partition not in self._watermarks
            if fresh and self.journal is not None:
                await self._catch_up(self.journal)
            self._unsettled += 1
            self.metrics.increment("wow.intake.received", 1.0, self._tags)
            self.metrics.gauge("wow.intake.lane_depth", self._unsettled, self._tags)
            if entry.partition is not None:
                mark = self._watermarks.get(entry.partition)
                if mark is None:
                    mark = self._watermarks[entry.partition] = LowWatermark()
                mark.track(entry.offset)
            lane = self._lanes.get(entry.lane_id)
            if lane is None:
                lane = self._lanes[entry.lane_id] = _Lane(entry.lane_id)
            lane.queue.append(entry)
            if len(lane.queue) == 1 and lane.parked is None:
                self._pool.ready(lane)

    async def _catch_up(self, journal: LedgerJournal) -> None:
        """A partition new to this node: what the ledger holds of it, first. The read
        barrier is tried again until it passes (each failure logged): a partition's commands
        never run before this node knows which of them are parked."""
        attempt = 0
        while True:
            try:
                await journal.caught_up()
                return
            except Exception as error:
                attempt += 1
                backoff = min(self.options.retry_backoff * 2 ** (attempt - 1), self.options.max_retry_backoff)
                log.error(
                    "%s: the ledger journal %s cannot be read (attempt %d): %r; the new partition's "
                    "commands wait, trying again in %.2f s",
                    self.name,
                    journal.topic,
                    attempt,
                    error,
                    backoff,
                )
                await self._sleep(backoff)

    def _entry(self, record: TransportRecord) -> _Entry:
        place = parse_position(record.position)
        partition, offset = (None, 0) if place is None else ((record.topic, place[0]), place[1])
        try:
            wire = decode_command(record.payload, self.registry, self.creations, strict=self.strict_bodies)
        except UndecodableCommand as refused:
            aggregate_id = refused.head.aggregate_id
            if aggregate_id is None:  # pragma: no cover - the head always names one
                raise WireError("command.aggregate", "missing") from None
            return _Entry(record, aggregate_id, None, refused, partition, offset)
        return _Entry(record, wire.command.aggregate_id, wire, None, partition, offset)

    async def _dead_letter(self, record: TransportRecord, error: WireError) -> None:
        """An envelope nobody can be answered for: to ``<topic>.dlq``, then acknowledged."""
        log.error(
            "%s: record %s is not a command envelope (%s); dead-lettered", self.name, record.position, error
        )
        try:
            await self.transport.send(
                TransportMessage(f"{record.topic}.dlq", record.key, record.payload, record.timestamp)
            )
        except Exception:
            log.exception("%s: dead-lettering %s failed; left unacknowledged", self.name, record.position)
            return
        self.dead_lettered += 1
        await record.ack()

    # -- lanes ----------------------------------------------------------------------------

    async def _turn(self, lane: _Lane) -> bool:
        """Run the head of ``lane``: True when the lane has more to run now."""
        if not lane.queue:
            return False  # emptied by a revocation while it waited for its turn
        entry = lane.queue[0]
        wire = entry.wire
        if wire is not None and wire.due_at is not None and entry.outcome is None:
            delay = (wire.due_at - now_ms()) / 1000
            if delay > 0:
                await self._sleep(delay)  # awaitDue: the lane waits for the due time
                if entry.dropped:
                    return False  # revoked while it waited: the new owner runs it
        if lane.parked is None and entry.outcome is None:
            held = self.ledger.get(self.name, lane.aggregate_id)
            if held is not None and held.from_position == entry.record.position:
                lane.parked = held  # parked before (by this node or a former owner)
                self._check_idle()
                return False
            if (lane.aggregate_id, entry.record.position) in self._skips:
                await self._skip_head(entry)
                lane.queue.popleft()
                await self._settle(entry)
                return bool(lane.queue)
        try:
            async with self.limit.semaphore:
                if entry.dropped:
                    return False  # revoked while it waited: the new owner runs it
                entry.running = True
                running = self._running.setdefault(entry.partition, set())
                running.add(entry)
                try:
                    await self._run(entry)
                finally:
                    entry.running = False
                    running.discard(entry)
                    self._run_changed.set()
        except CommandBusyError:
            if entry.revoked:
                return self._drop_head(lane)
            entry.busy += 1
            self.busy_retried += 1
            self.metrics.increment("wow.intake.busy_retries", 1.0, self._tags)
            await self._sleep(self.options.busy_backoff)
            return True
        except Exception as error:
            if entry.revoked:
                return self._drop_head(lane)
            entry.attempts += 1
            if entry.attempts <= self.options.retries:
                self.retried += 1
                self.metrics.increment("wow.intake.retries", 1.0, self._tags)
                log.warning(
                    "%s: %s at %s failed (attempt %d), retrying: %s",
                    self.name,
                    lane.aggregate_id,
                    entry.record.position,
                    entry.attempts,
                    error,
                )
                backoff = min(
                    self.options.retry_backoff * 2 ** (entry.attempts - 1), self.options.max_retry_backoff
                )
                await self._sleep(backoff)
                return True
            await self._park(lane, entry, error)
            return False
        lane.queue.popleft()
        await self._settle(entry)
        if lane.queue and lane.parked is None:
            return True
        if not lane.queue and lane.parked is None and self._lanes.get(lane.aggregate_id) is lane:
            del self._lanes[lane.aggregate_id]
        return False

    def _drop_head(self, lane: _Lane) -> bool:
        """The head of ``lane`` failed while its partition is being revoked: not retried nor
        parked here, the new owner runs it again."""
        self._forget(lane.queue.popleft())
        if self._lanes.get(lane.aggregate_id) is lane:
            del self._lanes[lane.aggregate_id]
        return False

    def _forget(self, entry: _Entry) -> None:
        """Take ``entry`` out unsettled and unacknowledged (its partition was revoked)."""
        entry.dropped = True
        self.revoked_dropped += 1
        self._unsettled -= 1
        self._buffer.release()
        self.metrics.increment("wow.intake.revoked_dropped", 1.0, self._tags)
        self.metrics.gauge("wow.intake.lane_depth", self._unsettled, self._tags)

    async def _on_revoked(self, partitions: Sequence[tuple[str, int]]) -> None:
        """The revocation listener (module doc): drop what did not start, await what runs."""
        revoked = set(partitions)
        for key in revoked:
            self._epochs[key] = self._epochs.get(key, 0) + 1
        try:
            for lane_id, lane in list(self._lanes.items()):
                if not any(entry.partition in revoked for entry in lane.queue):
                    continue
                kept: deque[_Entry] = deque()
                for entry in lane.queue:
                    if entry.partition not in revoked:
                        kept.append(entry)
                    elif entry.running:
                        entry.revoked = True
                        kept.append(entry)
                    else:
                        self._forget(entry)
                lane.queue = kept
                if not kept:
                    if lane.parked is not None and self.journal is None:
                        # a node's own ledger: its failed command is the new owner's to run
                        self.ledger.discard(self.name, lane.aggregate_id)
                    lane.parked = None
                    del self._lanes[lane_id]
            while any(self._running.get(key) for key in revoked):
                self._run_changed.clear()
                await self._run_changed.wait()
        finally:
            for key in revoked:
                self._watermarks.pop(key, None)
                self._running.pop(key, None)
            self._check_idle()
        log.info("%s: revoked %s", self.name, sorted(revoked))

    def _abandon(self, lane: _Lane) -> None:
        """A turn cut short (stop): its commands stay unacknowledged for the next owner."""
        self._lanes.pop(lane.aggregate_id, None)
        self._check_idle()

    async def _park(self, lane: _Lane, entry: _Entry, error: BaseException) -> None:
        parked = ParkedAggregate(
            name=self.name,
            aggregate_id=lane.aggregate_id,
            from_position=entry.record.position,
            command_id=self._command_id(entry),
            error=f"{type(error).__name__}: {error}",
            attempts=entry.attempts,
            parked_at=now_ms(),
            waiting=len(lane.queue) - 1,
        )
        lane.parked = parked
        self.ledger.park(parked)
        if self.journal is not None:
            # queued, retried until the broker takes it; nothing waits for it: the parked
            # command stays unacknowledged (a crash before it is written runs it again)
            self.journal.park(parked)
        self.metrics.increment("wow.intake.parked", 1.0, self._tags)
        log.error(
            "%s: %s parked at %s after %d attempts: %s",
            self.name,
            lane.aggregate_id,
            parked.from_position,
            entry.attempts,
            parked.error,
        )
        wire = entry.wire
        if wire is not None and entry.outcome is None:
            command = self.coordinator.forward(wire.command, wire.wait)
            self.coordinator.route(
                command.header,
                WaitSignal(
                    command.id,
                    CommandStage.PROCESSED,
                    command.aggregate_id,
                    error_code=ErrorCodes.PROCESSING_ERROR,
                    error_msg=f"parked: {parked.error}",
                    final=True,
                ),
            )
        self._check_idle()

    @staticmethod
    def _command_id(entry: _Entry) -> str:
        if entry.wire is not None:
            return entry.wire.command.id
        assert entry.head is not None
        return entry.head.command_id

    async def _settle(self, entry: _Entry) -> None:
        written = self._journal_settles.get((entry.lane_id, entry.record.position))
        if written is not None:
            try:
                await asyncio.shield(written)  # the retry that let it run is in the journal
            except JournalClosedError:
                log.warning(
                    "%s: %s at %s left unacknowledged: its retry was not written to the journal",
                    self.name,
                    entry.aggregate_id,
                    entry.record.position,
                )
                return
        await entry.record.ack()
        mark = self._watermarks.get(entry.partition) if entry.partition is not None else None
        if mark is not None:
            mark.settle(entry.offset)
        self._unsettled -= 1
        self._buffer.release()
        receipt = entry.outcome
        if receipt is None or receipt.error_code == SKIPPED:
            outcome = "skipped"
        elif receipt.committed:
            outcome = "duplicate" if receipt.duplicate else "committed"
        else:
            outcome = "rejected"
        self.metrics.increment("wow.intake.settled", 1.0, self._outcome_tags[outcome])
        self.metrics.gauge("wow.intake.lane_depth", self._unsettled, self._tags)
        self._check_idle()

    # -- one command ----------------------------------------------------------------------

    async def _run(self, entry: _Entry) -> None:
        """Decide ``entry`` (once) and send its receipt; raises on a technical failure."""
        receipt = entry.outcome
        if receipt is None:
            receipt = await self._decide(entry)
            entry.outcome = receipt
        if entry.wire is not None:
            reply_to = entry.wire.reply_to
        else:
            assert entry.head is not None
            reply_to = entry.head.reply_to
        if reply_to is None or (receipt.committed and not reply_to.committed):
            return
        await self.transport.send(
            TransportMessage(
                receipts_topic(reply_to.context, self.prefix),
                entry.aggregate_id.id,
                receipt.encode(),
                now_ms(),
            )
        )
        self.receipts_sent += 1

    async def _decide(self, entry: _Entry) -> CommandReceipt:
        position = entry.record.position
        if entry.rejection is not None:
            refused = entry.rejection
            head = refused.head
            self.rejected += 1
            return CommandReceipt(
                ReceiptOutcome.REJECTED,
                head.command_id,
                head.request_id,
                head.aggregate_id,
                error_code=refused.code,
                error_msg=refused.message,
                errors=refused.violations,
                wait=head.wait,
                position=position,
            )
        wire = entry.wire
        assert wire is not None
        if type(wire.command.body) in LEDGER_BODIES:
            return await self._ledger_command(wire, position)
        command = self.coordinator.forward(wire.command, wire.wait)
        if command.is_void:
            self.kernel.dropped(command)
            return CommandReceipt(
                ReceiptOutcome.COMMITTED,
                command.id,
                command.request_id,
                command.aggregate_id,
                position=position,
            )
        outcome: CommandOutcome = await self.kernel.process(command)
        if outcome.error_code == ErrorCodes.EVENT_VERSION_CONFLICT:
            raise ContendedOutcomeError(outcome.error_msg)
        self.executed += 1
        self.coordinator.route(command.header, outcome.signal())
        return self._receipt(outcome, wire, position)

    async def _ledger_command(self, wire: CommandWire, position: str) -> CommandReceipt:
        """Run a ``wow.ledger.*`` system command on this node's parked entries."""
        command = wire.command
        body = command.body
        target = command.aggregate_id

        def answer(result: dict[str, Any], code: str = "", message: str = "") -> CommandReceipt:
            return CommandReceipt(
                ReceiptOutcome.REJECTED if code else ReceiptOutcome.COMMITTED,
                command.id,
                command.request_id,
                target,
                result=result,
                error_code=code,
                error_msg=message,
                position=position,
            )

        if body.name and body.name != self.name:
            self.rejected += 1
            return answer({}, "LEDGER_UNKNOWN_SUBSCRIPTION", f"{body.name!r} is not {self.name!r}")
        if isinstance(body, LedgerList):
            return answer({"parked": [parked_to_json(entry) for entry in self.parked()]})
        try:
            entry = self.retry(target) if isinstance(body, LedgerRetry) else await self.skip(target)
        except ParkedNotFoundError as error:
            self.rejected += 1
            return answer({}, "LEDGER_ENTRY_NOT_FOUND", str(error))
        await self._journal_settled(entry)  # its receipt says done: the journal has it first
        return answer({"parked": [parked_to_json(entry)]})

    def _receipt(self, outcome: CommandOutcome, wire: CommandWire, position: str) -> CommandReceipt:
        command = outcome.command
        if outcome.succeeded or outcome.duplicate:
            if outcome.duplicate:
                self.duplicates += 1
            else:
                self.committed += 1
            return CommandReceipt(
                ReceiptOutcome.COMMITTED,
                command.id,
                command.request_id,
                outcome.aggregate_id,
                outcome.version,
                dict(outcome.result),
                outcome.duplicate,
                wait=wire.wait,
                position=position,
            )
        self.rejected += 1
        return CommandReceipt(
            ReceiptOutcome.REJECTED,
            command.id,
            command.request_id,
            outcome.aggregate_id,
            outcome.version,
            error_code=outcome.error_code,
            error_msg=outcome.error_msg,
            errors=outcome.errors,
            wait=wire.wait,
            position=position,
        )


__all__ = [
    "CommandBusyError",
    "CommandIntake",
    "ContendedOutcomeError",
    "InFlightLimit",
    "IntakeOptions",
    "IntakeUnsupportedError",
]
