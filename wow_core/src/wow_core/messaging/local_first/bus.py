"""Local-first dual-copy admission (spec 000, "LocalFirst dual-copy admission").

:class:`LocalFirstMessageBus` combines one :class:`~wow_core.messaging.contract.LocalMessageBus`
and one distributed :class:`~wow_core.messaging.contract.MessageBus`. For a message of a
local aggregate whose header does not disable local-first, ``send``:

1. queues an independent distributed copy in the aggregate's copy queue
   (:class:`~wow_core.messaging.local_first.copies.LocalFirstDistributedCopies`);
2. copies the message again, marks that copy ``local_first=true`` and hands it to the
   local bus (``hand_off``), which never waits for a receiver to pull it; the admission
   is confirmed when every routed local receiver acknowledged the message (after
   processing it) and rejected when one released it unacknowledged, quiesced or closed;
3. in its turn, after every earlier copy of the same aggregate was sent, the distributed
   copy goes out with ``local_first`` = the admission result.

When ``send`` completes:

=================================  ==========================================  ==========================
case                               ``send`` completes                          distributed copy
=================================  ==========================================  ==========================
handed off                         at once (the message entered the local      in its turn, once the
                                   sinks)                                      receivers decided
refused (no routable receiver,     when its copy was sent in its turn, or      ``local_first=false``
a closed route)                    fails with it
local hand-off error               as refused; the error is logged             ``local_first=false``
rejected after the hand-off        already completed                           ``local_first=false``
=================================  ==========================================  ==========================

Every distributed copy carries the ``local_first`` marker this bus decided, never one
the message came with: ``true`` only from the admission result of a hand-off, ``false``
for everything else, including messages of aggregates this service does not own (sent
distributed at once, unmarked) and Void commands. A marker copied from a received message
or set by a caller therefore never suppresses delivery.

SENT of a handed-off message proves only that it entered this process's local sinks:
not the distributed send, not any processing; a crash loses it and its queued copy. SENT
of a refused message proves the distributed send completed, not processing. Void commands
skip local-first (``local_first=false``, distributed send in their turn only).

Nothing is ordered across topics or buses: commands, domain events and state events each
have their own bus and their own copy queues.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wow_core.context import ContextCapture
from wow_core.messaging.contract import (
    BusClosedError,
    CommandBus,
    DomainEventBus,
    EventStreamExchange,
    HandOffReceipt,
    LocalMessageBus,
    MessageBus,
    MessageExchange,
    MessageReceiver,
    MessageSubscription,
    ServerCommandExchange,
    StateEventBus,
    StateEventExchange,
)
from wow_core.messaging.local_first.aggregates import LocalAggregates, every_aggregate_is_local
from wow_core.messaging.local_first.copies import LocalFirstDistributedCopies, QueuedCopy
from wow_core.messaging.local_first.observer import LocalFirstObserver, SendRoute
from wow_core.messaging.local_first.receiver import LocalFirstReceiver
from wow_core.messaging.local_first.settings import LocalFirstSettings
from wow_core.model import (
    CommandMessage,
    DomainEventStream,
    Header,
    Message,
    NamedAggregate,
    StateEvent,
    TopicKind,
)

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=MessageExchange[Any])

log = logging.getLogger("wow_core.messaging.local_first")

_BUS_NAMES: dict[TopicKind, tuple[str, str]] = {
    TopicKind.COMMAND: ("command", "WOW_COMMAND__BUS__LOCAL_FIRST"),
    TopicKind.EVENT: ("event", "WOW_EVENT__BUS__LOCAL_FIRST"),
    TopicKind.STATE: ("state", "WOW_EVENTSOURCING__STATE__BUS__LOCAL_FIRST"),
}


class LocalFirstMessageBus(Generic[M, E]):
    """A local bus and a distributed bus, combined by dual-copy admission (module docstring).

    ``is_local`` tells which aggregates this service owns: only their messages are handed
    off locally, and only their distributed copies marked ``local_first=true`` are filtered
    by :meth:`receiver`. ``copies`` may be passed in to share or register it with the
    runtime; by default the bus creates its own from ``settings``.

    ``observer`` hears every decision of the bus, its copies and its receivers
    (:class:`~wow_core.messaging.local_first.observer.LocalFirstObserver`; the runtime
    gives the one its middleware contributes); ``None``, the default, calls nothing. A
    ``copies`` passed in keeps the observer it was built with.
    """

    def __init__(
        self,
        local: LocalMessageBus[M, E],
        distributed: MessageBus[M, E],
        *,
        settings: LocalFirstSettings | None = None,
        observer: LocalFirstObserver | None = None,
        captures: Sequence[ContextCapture] = (),
        is_local: LocalAggregates = every_aggregate_is_local,
        copies: LocalFirstDistributedCopies[M] | None = None,
    ) -> None:
        if local.topic_kind != distributed.topic_kind:
            raise ValueError(
                f"local bus carries {local.topic_kind} messages, distributed bus {distributed.topic_kind}"
            )
        settings = settings or LocalFirstSettings()
        self._local = local
        self._distributed = distributed
        self._observer = observer
        self._is_local = is_local
        bus_name, settings_key = _BUS_NAMES[local.topic_kind]
        self.bus_name = bus_name
        self.hand_off_timeout = settings.hand_off_timeout
        self.copies: LocalFirstDistributedCopies[M] = copies or LocalFirstDistributedCopies(
            distributed,
            bus_name=bus_name,
            settings_key=settings_key,
            observer=observer,
            captures=captures,
            backlog_high_water_mark=settings.backlog_high_water_mark,
            hand_off_timeout=settings.hand_off_timeout,
        )
        self._closed = False

    @property
    def topic_kind(self) -> TopicKind:
        return self._local.topic_kind

    @property
    def observer(self) -> LocalFirstObserver | None:
        """What hears this bus's decisions (``None``: nothing is called)."""
        return self._observer

    @property
    def local_bus(self) -> LocalMessageBus[M, E]:
        return self._local

    @property
    def distributed_bus(self) -> MessageBus[M, E]:
        return self._distributed

    def subscriber_count(self, named_aggregate: NamedAggregate) -> int:
        """The local bus's routable receivers for ``named_aggregate`` (0 when not local)."""
        if not self._is_local(named_aggregate):
            return 0
        return self._local.subscriber_count(named_aggregate)

    # -- send ---------------------------------------------------------------------------

    def _skips_local_first(self, message: M) -> bool:
        """Messages that never take the local route (Void commands, see the command bus)."""
        return message.header.local_first_disabled

    async def send(self, message: M) -> None:
        """Send ``message`` local-first; see the module docstring for when this returns.

        ``message`` itself is never modified: the local and the distributed copy each get
        their own header.
        """
        if self._closed:
            raise BusClosedError(f"local-first {self.bus_name} bus is closed")
        if not self._is_local(message.aggregate_id.named_aggregate):
            # Not handed off here, so never admitted here: the copy says so, whatever
            # marker the message came with (copied from a received message, set by a caller).
            if self._observer is not None:
                self._observer.on_send(message, SendRoute.REMOTE)
            remote_copy = message.copy()
            remote_copy.header[Header.LOCAL_FIRST] = "false"
            await self._distributed.send(remote_copy)
            return
        if self.copies.sends_nothing(message):
            # Nothing queued for its aggregate and no receiver on its topic: its copy would
            # go out now and reach nobody, marked or not. Only the local hand-off is left.
            self._hand_off_only(message)
            return
        if self._skips_local_first(message):
            # Distributed only, but still in its turn behind the aggregate's earlier copies.
            if self._observer is not None:
                self._observer.on_send(message, SendRoute.SKIPPED)
            skipped = self.copies.queue(message.copy(), start=False)
            done = skipped.completion()
            self.copies.start(skipped)
            await self._wait_sent(skipped, done)
            return
        # Queued before the hand-off (nothing runs in between); what it holds is settled
        # below, before anything else can run.
        entry = self.copies.queue(message, start=False)
        local_copy = message.copy()
        receipt = self._hand_off_copy(local_copy, message, "sending it distributed")
        if receipt is not None and receipt.accepted and local_copy.header.read_only:
            # The emitted local copy is immutable: the distributed copy is made from it
            # (its own writable header) only if it must go out (LocalFirstDistributedCopies).
            entry.message = local_copy
        else:
            entry.message = message.copy()
        if receipt is None:
            if self._observer is not None:
                self._observer.on_send(message, SendRoute.ERROR)
        elif receipt.accepted:
            self._started_after_hand_off(message, entry, receipt)
            return
        else:
            if self._observer is not None:
                self._observer.on_send(message, SendRoute.REFUSED)
            log.debug(
                "local-first %s: hand-off of %s %s refused (%s); sending it distributed",
                self.bus_name,
                message.name,
                message.aggregate_id,
                receipt.reason or "no reason given",
            )
        done = entry.completion()  # before the queue starts: it may send the copy at once
        self.copies.start(entry)
        await self._wait_sent(entry, done)

    # -- a transactional outbox ----------------------------------------------------------

    def outbox_copy(self, message: M) -> tuple[M, bool]:
        """The distributed copy of ``message`` to write into a transactional outbox together
        with the append, and whether :meth:`send_outboxed` will hand the message off locally.

        The copy is marked ``local_first=true`` when the message will be handed off here
        (a local aggregate with a routable local receiver, local-first not disabled by
        its header): the owning service's receivers then drop the relayed copy, and
        :meth:`send_outboxed` sends a ``false`` copy itself should the local admission not
        confirm. Otherwise it is marked ``false`` and nothing is handed off: the relayed
        copy is the only one.
        """
        copy = message.copy()
        named = message.aggregate_id.named_aggregate
        local = (
            not self._closed
            and self._is_local(named)
            and not self._skips_local_first(message)
            and self._local.subscriber_count(named) > 0
        )
        copy.header[Header.LOCAL_FIRST] = "true" if local else "false"
        return copy, local

    async def send_outboxed(self, message: M) -> None:
        """Hand ``message`` off locally; its distributed copy, marked ``local_first=true``,
        is already committed to a transactional outbox (:meth:`outbox_copy` said to hand
        it off) and the outbox's relay publishes it.

        Returns as :meth:`send` of a handed-off message: at once. If the local admission
        does not confirm (the hand-off refused, a receiver released the message, quiesced
        or closed, the hand-off timeout passed), this bus sends a ``local_first=false``
        copy in its turn, as :meth:`send` would, so the owning service's groups still get
        it from the transport (other services then see it twice: at least once).
        """
        if self._closed:
            raise BusClosedError(f"local-first {self.bus_name} bus is closed")
        entry = self.copies.queue(message.copy(), start=False)
        entry.outboxed = True
        receipt = self._hand_off_marked(message, "sending a local_first=false copy", outboxed=True)
        if receipt is not None and receipt.accepted:
            self._started_after_hand_off(message, entry, receipt)
            return
        if self._observer is not None:
            self._observer.on_send(message, SendRoute.REFUSED if receipt is not None else SendRoute.ERROR)
        done = entry.completion()
        self.copies.start(entry)
        await self._wait_sent(entry, done)

    def _hand_off_marked(self, message: M, instead: str, *, outboxed: bool = False) -> HandOffReceipt | None:
        """Hand a ``local_first=true`` copy of ``message`` to the local bus; None (logged,
        saying what happens ``instead``) when the hand-off raised."""
        return self._hand_off_copy(message.copy(), message, instead, outboxed=outboxed)

    def _hand_off_copy(
        self, local_copy: M, message: M, instead: str, *, outboxed: bool = False
    ) -> HandOffReceipt | None:
        """Mark ``local_copy`` (an independent copy of ``message``) ``local_first=true`` and
        hand it to the local bus, as :meth:`_hand_off_marked`."""
        local_copy.header[Header.LOCAL_FIRST] = "true"
        try:
            return self._local.hand_off(local_copy)
        except Exception as error:
            log.error(
                "local-first %s: handing %s%s %s (id %s) to the local bus failed; %s: %s: %s",
                self.bus_name,
                "the outboxed " if outboxed else "",
                message.name,
                message.aggregate_id,
                message.id,
                instead,
                type(error).__name__,
                error,
            )
            return None

    def _started_after_hand_off(self, message: M, entry: QueuedCopy[M], receipt: HandOffReceipt) -> None:
        """The local bus took ``message``: its queued copy waits for the admission's result."""
        if self._observer is not None:
            self._observer.on_send(message, SendRoute.HANDED_OFF)
        entry.handed_off_with(receipt.admission, asyncio.get_running_loop().time() + self.hand_off_timeout)
        self.copies.start(entry)

    def _hand_off_only(self, message: M) -> None:
        """A send whose distributed copy reaches nobody: hand it off (unless it skips
        local-first), and complete whatever the hand-off result (a refused send completes
        when its copy was sent, and sending to nobody is done at once)."""
        if self._skips_local_first(message):
            if self._observer is not None:
                self._observer.on_send(message, SendRoute.SKIPPED)
            return
        receipt = self._hand_off_marked(message, "no receiver could get its distributed copy")
        if receipt is None:
            if self._observer is not None:
                self._observer.on_send(message, SendRoute.ERROR)
            return
        if self._observer is not None:
            self._observer.on_send(message, SendRoute.HANDED_OFF if receipt.accepted else SendRoute.REFUSED)

    @staticmethod
    async def _wait_sent(entry: QueuedCopy[M], done: asyncio.Future[None] | None = None) -> None:
        """Wait for the copy, not with it: a cancelled sender leaves the copy to be sent once."""
        if done is None:
            done = entry.completion()
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            entry.abandon()
            raise

    # -- receive ------------------------------------------------------------------------

    def receiver(self, subscription: MessageSubscription) -> MessageReceiver[E]:
        """Local and distributed exchanges merged; copies handled locally filtered and acked.

        The local receiver covers only the subscription's local aggregates.
        """
        local_aggregates = [named for named in subscription.named_aggregates if self._is_local(named)]
        local_receiver = (
            self._local.receiver(
                MessageSubscription.of(
                    subscription.group, local_aggregates, runtime_owned=subscription.runtime_owned
                )
            )
            if local_aggregates
            else None
        )
        distributed = self._distributed.receiver(subscription)
        # The merged receiver drops the copies of local aggregates marked handled locally:
        # a transport that sees its receivers (the in-memory one) learns it, so that a copy
        # every receiver would drop is not sent at all (LocalFirstDistributedCopies).
        declare = getattr(distributed, "drop_handled_locally", None)
        if declare is not None:
            declare(self._is_local)
        return LocalFirstReceiver(
            local_receiver,
            distributed,
            is_local=self._is_local,
            observer=self._observer,
        )

    # -- close --------------------------------------------------------------------------

    async def close(self, timeout: float | None = None) -> None:
        """Close every local route first (their pending admissions are rejected), send the
        queued copies within ``timeout`` (default: the hand-off timeout), then close the
        distributed bus.
        """
        if self._closed:
            return
        self._closed = True
        await self._local.close()
        await self.copies.flush(self.hand_off_timeout if timeout is None else timeout)
        await self._distributed.close()


class LocalFirstCommandBus(LocalFirstMessageBus[CommandMessage[Any], ServerCommandExchange]):
    """Local-first for commands. A Void command skips local-first: ``local_first=false``,
    distributed send only (SENT proves the distributed send, nothing about processing).
    """

    def _skips_local_first(self, message: CommandMessage[Any]) -> bool:
        return message.is_void or message.header.local_first_disabled


class LocalFirstDomainEventBus(LocalFirstMessageBus[DomainEventStream, EventStreamExchange]):
    """Local-first for domain event streams."""


class LocalFirstStateEventBus(LocalFirstMessageBus[StateEvent[Any], StateEventExchange]):
    """Local-first for state events."""


if TYPE_CHECKING:

    def _is_command_bus(bus: LocalFirstCommandBus) -> CommandBus:
        return bus

    def _is_domain_event_bus(bus: LocalFirstDomainEventBus) -> DomainEventBus:
        return bus

    def _is_state_event_bus(bus: LocalFirstStateEventBus) -> StateEventBus:
        return bus
