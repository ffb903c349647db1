"""The in-memory buses: ``InMemoryCommandBus``, ``InMemoryDomainEventBus``, ``InMemoryStateEventBus``.

They are the local buses of this process (:class:`~wow_core.messaging.LocalMessageBus`):
besides ``send`` and ``receiver`` they offer ``subscriber_count`` and ``hand_off`` for
local-first delivery.

What they guarantee:

* ``send`` returns once the message entered the sink of every routed receiver (one
  receiver per group; members of a group share the messages, each aggregate id sticks
  to one member so its messages stay in order). A member that is quiescing or closed is
  never given a message to yield: its aggregate ids move to the other members of its
  group, and what its sink held and will never yield moves with them, ahead of anything
  sent later for those ids. While it quiesces with exchanges in flight (*draining*) it
  still holds its ids: what arrives for them waits, in order, until it settled them or
  closed, so the next member never starts on an id's next message while the earlier one
  is still processed. A group with no other member is a group without subscriber. SENT
  proves only that the in-process sink emission ended; with no subscriber it logs at
  debug and completes, so it does not prove that a processor exists.
* A message is marked read-only before it is emitted.
* Sinks are unbounded: a sender never waits for a receiver to pull.
* Nothing reaches a consumer before ``open_processing()``.
* Nothing is kept for an aggregate nobody subscribes to.

What they do not: durability. A message in a sink exists only in this process; a receiver
that quiesces or closes with no other member in its group to take over drops what it did
not yield (logged at warning; closing the bus drops everything), and rejects the hand-off
admissions still pending in any case. There is no redelivery: ``ack`` only settles the
exchange. A hand-off for an id a draining member holds is refused (its local-first copy
goes out in its turn, behind the copy of the message still in flight).

A handed-off message is admitted by a receiver when its consumer *acknowledges* the
exchange, after processing it; releasing the exchange without ``ack`` (a function outcome
that withholds acknowledgement, a failed command, a shutdown) rejects the admission, so the
local-first copy goes out unmarked and the transport delivers the message again.

The command bus is a multi-producer, single-consumer route per named aggregate: one
consuming receiver per named aggregate at a time, a second concurrent one raises
:class:`~wow_core.messaging.ReceiverConflictError`.

Routes decide under their own lock: ``send`` and ``hand_off`` are synchronous from the
moment they pick targets to the moment every target sink holds the message, so on the
event loop nothing interleaves with a decision (the asyncio form of a per-route monitor);
routes of different named aggregates share no state. Closing the bus closes every route
first, rejecting every pending admission, before refusing new sends.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar

from wow_core.messaging.contract import (
    EXCHANGE_TYPES,
    BusClosedError,
    EventStreamExchange,
    HandOffReceipt,
    MessageSubscription,
    ReceiverConflictError,
    ServerCommandExchange,
    SimpleExchange,
    StateEventExchange,
)
from wow_core.messaging.in_flight import InFlight
from wow_core.model import CommandMessage, DomainEventStream, Message, NamedAggregate, StateEvent, TopicKind

_log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=SimpleExchange[Any])


class AdmissionFuture(asyncio.Future[bool]):
    """The admission future of a hand-off (:attr:`HandOffReceipt.admission`), which also
    calls *listeners* synchronously, in the call that decides it (an acknowledgement, a
    release, a quiescence or a close), right after its result is set: a local-first copy
    queue learns the result without a loop turn. Its done-callbacks run as any future's
    (scheduled on the loop). A listener that raises is logged; the others still run."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self._listeners: list[Callable[[], object]] = []

    def listen(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` when the admission is decided (at once if it is)."""
        if self.done():
            listener()
        else:
            self._listeners.append(listener)

    def unlisten(self, listener: Callable[[], object]) -> None:
        """Forget ``listener`` (equal bound methods match); nothing when it is not there."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def decide(self, admitted: bool) -> None:
        if self.done():
            return
        self.set_result(admitted)
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            try:
                listener()
            except Exception:
                _log.exception("a listener of an admission failed")


class _Admission:
    """The admission of one hand-off: true once every counted receiver confirmed it."""

    __slots__ = ("future", "pending")

    def __init__(self, future: AdmissionFuture, pending: int) -> None:
        self.future = future
        self.pending = pending

    def confirm(self) -> None:
        if self.future.done():
            return
        self.pending -= 1
        if self.pending <= 0:
            self.future.decide(True)

    def reject(self) -> None:
        self.future.decide(False)


class _Settlement:
    """How a pulled, handed-off delivery settles its admission: ``ack`` confirms it, a
    release without ``ack`` rejects it (the message was not handled here, so its
    distributed copy must stay eligible)."""

    __slots__ = ("admission", "confirmed", "receiver")

    def __init__(self, admission: _Admission, receiver: InMemoryReceiver[Any]) -> None:
        self.admission = admission
        self.receiver = receiver
        self.confirmed = False

    async def ack(self) -> None:
        self.confirmed = True
        self.admission.confirm()

    def settle(self) -> None:
        if not self.confirmed:
            self.admission.reject()
        receiver = self.receiver
        receiver._unsettled.discard(self)
        receiver._settled_one()


class _Delivery:
    __slots__ = ("admission", "message")

    def __init__(self, message: Message, admission: _Admission | None) -> None:
        self.message = message
        self.admission = admission


class ReceivedCount:
    """The exchanges of one named aggregate a receiver yielded
    (:meth:`InMemoryReceiver.count_received`)."""

    __slots__ = ("count", "named_aggregate")

    def __init__(self, named_aggregate: NamedAggregate) -> None:
        self.named_aggregate = named_aggregate
        self.count = 0


class InMemoryReceiver(Generic[E]):
    """A receiver of an in-memory bus: an unbounded sink and its consumer side.

    It is routed (and so ready) from the moment it is created. Its iteration yields only
    after :meth:`open_processing`; acknowledging a handed-off message confirms that
    delivery's admission, releasing it unacknowledged rejects it. :meth:`quiesce` stops
    it taking new work (it is chosen for nothing any more, leaves the local-first routes
    at once, rejects the admissions in its sink and hands its other messages to the
    group's remaining members) and waits for in-flight exchanges; :meth:`close` does the
    same without waiting, rejects the admissions of the exchanges still in flight too and
    ends the iteration.
    """

    __slots__ = (
        "_bus",
        "_closed",
        "_exchange_type",
        "_in_flight",
        "_opened",
        "_parked",
        "_quiescing",
        "_received",
        "_received_counts",
        "_salt",
        "_sink",
        "_unsettled",
        "_waiter",
        "_watchers",
        "subscription",
    )

    def __init__(
        self, bus: _InMemoryBus[Any, E], subscription: MessageSubscription, exchange_type: type[E]
    ) -> None:
        self._bus = bus
        self.subscription = subscription
        self._exchange_type = exchange_type
        self._sink: deque[_Delivery] = deque()
        self._parked: deque[_Delivery] = deque()
        """Messages for its aggregate ids that arrived while it quiesces with exchanges in
        flight: they wait here, in order, until it drained or closed, then move on."""
        self._waiter: asyncio.Future[None] | None = None
        self._watchers: list[Callable[[], None]] = []
        self._opened = False
        self._quiescing = False
        self._closed = False
        self._in_flight = InFlight()
        self._unsettled: set[_Settlement] = set()
        self._salt = next(_salts)
        self._received: Callable[[E, MessageSubscription], None] | None = None
        self._received_counts: dict[str, ReceivedCount] | None = None

    def count_received(self) -> dict[str, ReceivedCount] | None:
        """Count the exchanges it yields here, per named aggregate (keyed by
        ``named_aggregate.key``), and return the counts, read by the caller when it
        needs them (a metrics backend collecting, possibly on another thread): a count
        a :meth:`hook_received` hook would keep, without a call per exchange. None if
        the counts were asked for already."""
        if self._received_counts is not None:
            return None
        self._received_counts = {}
        return self._received_counts

    def hook_received(self, received: Callable[[E, MessageSubscription], None]) -> bool:
        """Call ``received(exchange, subscription)`` for each exchange it yields, just
        before yielding it (what a :class:`~wow_core.middleware.MessageReceiverDecorator`
        does, without its coroutine frame on every pull). One hook: False if it has one
        already (the caller wraps the receiver instead)."""
        if self._received is not None:
            return False
        self._received = received
        return True

    # -- routing side (called by the bus, synchronously) ---------------------------------

    @property
    def routable(self) -> bool:
        """Open for local-first deliveries: runtime-owned, processing open, not stopping."""
        return self.subscription.runtime_owned and self._opened and not self._quiescing and not self._closed

    @property
    def accepting(self) -> bool:
        """Takes new messages: neither quiescing nor closed (a member that will yield nothing
        more is never chosen, so nothing is emitted where it would never be yielded)."""
        return not self._quiescing and not self._closed

    @property
    def draining(self) -> bool:
        """Quiescing with exchanges still in flight: it still holds its aggregate ids, so
        that another member does not start on the next message of one of them before this
        one settled the earlier; what arrives for them waits (parked) meanwhile."""
        return self._quiescing and not self._closed and self._in_flight.count > 0

    def _emit(self, delivery: _Delivery) -> None:
        self._sink.append(delivery)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._watchers:
            self._notify_watchers()

    def call_when_pullable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, synchronously, as soon as ``__anext__`` would return without
        waiting: a message is in the sink while processing is open, or the iteration ended.

        Called at once when that already holds; registering the same callback twice is one
        registration. Nothing is taken from the sink, so nothing is admitted: the local-first
        merged receiver waits for local and distributed messages together this way.
        """
        if callback not in self._watchers:
            self._watchers.append(callback)
        self._notify_watchers()

    def _notify_watchers(self) -> None:
        if self._closed or self._quiescing or (self._opened and self._sink):
            watchers, self._watchers = self._watchers, []
            for callback in watchers:
                callback()

    # -- consumer side -------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[E]:
        return self

    async def __anext__(self) -> E:
        while True:
            if self._closed or self._quiescing:
                raise StopAsyncIteration
            if self._opened and self._sink:
                delivery = self._sink.popleft()
                self._in_flight.enter()
                admission = delivery.admission
                if admission is None:
                    exchange = self._exchange_type(delivery.message, None, self._on_settle)
                else:
                    # Admission is decided when the exchange settles, not when it is pulled.
                    settlement = _Settlement(admission, self)
                    self._unsettled.add(settlement)
                    exchange = self._exchange_type(delivery.message, settlement.ack, settlement.settle)
                received = self._received
                if received is not None:
                    received(exchange, self.subscription)
                counts = self._received_counts
                if counts is not None:
                    named_aggregate = delivery.message.aggregate_id.named_aggregate
                    count = counts.get(named_aggregate.key)
                    if count is None:
                        count = counts[named_aggregate.key] = ReceivedCount(named_aggregate)
                    count.count += 1
                return exchange
            if self._waiter is not None:
                raise RuntimeError(f"{self!r} is already being iterated by another task")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _on_settle(self) -> None:
        self._settled_one()

    def _settled_one(self) -> None:
        self._in_flight.leave()
        if self._quiescing and self._parked and self._in_flight.count == 0:
            # Drained: the aggregate ids it still held move on, with what waited for them.
            self._bus._hand_back(self)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._watchers:
            self._notify_watchers()

    async def ready(self) -> None:
        """Complete at once: the receiver is routed since it was created."""
        if self._closed:
            raise BusClosedError("receiver is closed")

    @property
    def processing_open(self) -> bool:
        return self._opened and not self._closed

    def open_processing(self) -> None:
        if self._closed:
            raise BusClosedError("receiver is closed")
        self._opened = True
        self._wake()

    @property
    def in_flight(self) -> int:
        return self._in_flight.count

    @property
    def pending(self) -> int:
        """Messages in the sink, not pulled yet."""
        return len(self._sink)

    async def quiesce(self, timeout: float | None = None) -> bool:
        """Stop taking new work, then wait up to ``timeout`` for in-flight exchanges.

        The iteration ends at once and this receiver is chosen for nothing any more, so
        what its sink holds would never be yielded here: its pending admissions are
        rejected now, not at close, and a local-first copy waiting for one of them (and
        every later copy of that aggregate, a refused send's included) goes out unmarked
        without waiting for this receiver's demand. Its other messages go, in order, to
        the members of its group that take their aggregate ids now (dropped and logged
        when no other member is left), ahead of anything sent later for those ids; while
        exchanges are in flight here, the ids stay here and their messages wait (parked,
        not yielded) until the last one settled or this receiver closed.
        """
        if not self._quiescing and not self._closed:
            self._quiescing = True
            self._bus._hand_back(self)
        self._wake()
        return await self._in_flight.settled(timeout)

    async def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._bus._unroute(self)
        self._bus._hand_back(self)
        for settlement in self._unsettled:
            # Still in flight at close: nobody waits for it any more here, so its copy goes
            # out unmarked (acknowledging it later changes nothing).
            settlement.admission.reject()
        self._wake()

    def __repr__(self) -> str:
        names = sorted(map(str, self.subscription.named_aggregates))
        return f"InMemoryReceiver({self.subscription.group}, {names})"


class _Route:
    """The receivers of one named aggregate, by group (insertion order kept)."""

    __slots__ = ("groups",)

    def __init__(self) -> None:
        self.groups: dict[str, list[InMemoryReceiver[Any]]] = {}

    def __bool__(self) -> bool:
        return bool(self.groups)


_salts = itertools.count(1)
"""Each receiver's own salt for choosing members: stable for its lifetime."""

_MASK = (1 << 64) - 1


def _score(key_hash: int, salt: int) -> int:
    """How much a member with ``salt`` wants a key (splitmix64 of the pair)."""
    z = (key_hash ^ (salt * 0x9E3779B97F4A7C15)) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _choose(
    members: list[InMemoryReceiver[Any]], key: str, eligible: Callable[[InMemoryReceiver[Any]], bool]
) -> InMemoryReceiver[Any] | None:
    """The member of a group that holds ``key``: of the eligible and the draining members,
    the one scoring highest for it (rendezvous hashing); ``None`` when no member is
    eligible (a draining member alone hands its ids to nobody).

    A key's member changes only when that member stops being eligible (its keys spread
    over the others, once it drained) or a new member scores higher for it: a member
    leaving moves no key between two members that stay, so their keys keep their order.
    The caller parks a message whose member is draining.
    """
    if len(members) == 1:
        member = members[0]
        return member if eligible(member) else None
    key_hash = zlib.crc32(key.encode("utf-8"))
    best: InMemoryReceiver[Any] | None = None
    best_score = -1
    any_eligible = False
    for member in members:
        if eligible(member):
            any_eligible = True
        elif not member.draining:
            continue
        score = _score(key_hash, member._salt)
        if score > best_score:
            best, best_score = member, score
    return best if any_eligible else None


def _accepting(member: InMemoryReceiver[Any]) -> bool:
    return member.accepting


def _routable(member: InMemoryReceiver[Any]) -> bool:
    return member.routable


def _deliver(member: InMemoryReceiver[Any], delivery: _Delivery) -> None:
    """Into ``member``'s sink, or parked with it while it drains."""
    if member.draining:
        member._parked.append(delivery)
    else:
        member._emit(delivery)


class HandOffCount:
    """The admitted hand-offs of one named aggregate and message name
    (:meth:`_InMemoryBus.count_hand_offs`)."""

    __slots__ = ("count", "message_name", "named_aggregate")

    def __init__(self, named_aggregate: NamedAggregate, message_name: str) -> None:
        self.named_aggregate = named_aggregate
        self.message_name = message_name
        self.count = 0


_MAX_HAND_OFF_COUNTS = 10_000
"""Counted series per bus (named aggregates times message names: bounded by the
application; past it a hand-off is counted under its named aggregate and ``""``)."""


def _hand_off_count(
    counts: dict[tuple[str, str], HandOffCount], named_aggregate: NamedAggregate, name: str
) -> HandOffCount:
    if len(counts) >= _MAX_HAND_OFF_COUNTS:
        name = ""
        found = counts.get((named_aggregate.key, name))
        if found is not None:
            return found
    count = counts[(named_aggregate.key, name)] = HandOffCount(named_aggregate, name)
    return count


class _InMemoryBus(Generic[M, E]):
    """Shared machinery of the three in-memory buses."""

    topic_kind: TopicKind
    _single_consumer = False

    def __init__(self) -> None:
        self._routes: dict[NamedAggregate, _Route] = {}
        self._closed = False
        self._closing = False
        self._exchange_type: type[E] = EXCHANGE_TYPES[self.topic_kind]  # type: ignore[assignment]
        self._hand_off_counts: dict[tuple[str, str], HandOffCount] | None = None

    def count_hand_offs(self) -> dict[tuple[str, str], HandOffCount] | None:
        """Count the admitted hand-offs here, per named aggregate and message name
        (keyed by ``(named_aggregate.key, message.name)``), and return the counts, which
        the caller reads when it needs them (a metrics backend collecting, possibly on
        another thread): what a :class:`~wow_core.middleware.LocalMessageBusDecorator`
        counting them would do, without its frame on every hand-off. One counter: None
        if the counts were asked for already (the caller then counts them itself)."""
        if self._hand_off_counts is not None:
            return None
        self._hand_off_counts = {}
        return self._hand_off_counts

    @property
    def closed(self) -> bool:
        return self._closed

    def receiver(self, subscription: MessageSubscription) -> InMemoryReceiver[E]:
        if self._closed:
            raise BusClosedError(f"{type(self).__name__} is closed")
        if self._single_consumer:
            for named_aggregate in subscription.named_aggregates:
                route = self._routes.get(named_aggregate)
                if route:
                    holder = next(iter(route.groups.values()))[0]
                    raise ReceiverConflictError(
                        f"{named_aggregate} already has a consuming receiver (group "
                        f"{holder.subscription.group!r}); {type(self).__name__} allows one "
                        "consumer per named aggregate at a time: close it first"
                    )
        receiver = InMemoryReceiver(self, subscription, self._exchange_type)
        for named_aggregate in subscription.named_aggregates:
            route = self._routes.setdefault(named_aggregate, _Route())
            route.groups.setdefault(subscription.group, []).append(receiver)
        return receiver

    def _unroute(self, receiver: InMemoryReceiver[Any]) -> None:
        for named_aggregate in receiver.subscription.named_aggregates:
            route = self._routes.get(named_aggregate)
            if route is None:
                continue
            members = route.groups.get(receiver.subscription.group)
            if members is not None and receiver in members:
                members.remove(receiver)
                if not members:
                    del route.groups[receiver.subscription.group]
            if not route:
                del self._routes[named_aggregate]

    async def send(self, message: M) -> None:
        """Emit ``message`` into the sink of one member of every subscribed group."""
        if self._closed:
            raise BusClosedError(f"{type(self).__name__} is closed; cannot send {message.name}")
        aggregate_id = message.aggregate_id
        route = self._routes.get(aggregate_id.named_aggregate)
        if not route:
            _log.debug(
                "no subscriber for %s: %s %s not kept", aggregate_id.named_aggregate, message.name, message.id
            )
            return
        message.with_read_only()
        delivery = _Delivery(message, None)
        for group, members in route.groups.items():
            member = _choose(members, aggregate_id.id, _accepting)
            if member is None:
                _log.debug(
                    "no subscriber for %s in group %r (its members are stopping): %s %s not kept",
                    aggregate_id.named_aggregate,
                    group,
                    message.name,
                    message.id,
                )
                continue
            _deliver(member, delivery)

    def _hand_back(self, receiver: InMemoryReceiver[Any]) -> None:
        """Empty the sink of ``receiver``, which stopped taking messages (quiescing, closed),
        and, once it is not draining any more, what was parked with it.

        A handed-off message's admission is rejected (its distributed copy goes out
        unmarked). Every other message goes, sink first and in order, to the member of the
        group that now holds its key (parked with ``receiver`` itself while it drains), so
        it is yielded before anything sent later for that key; with no member left it is
        dropped, as a send without subscriber keeps nothing, and the drop is logged.
        """
        deliveries = receiver._sink
        if not receiver.draining and receiver._parked:
            deliveries.extend(receiver._parked)
            receiver._parked = deque()
        if not deliveries:
            return
        receiver._sink = deque()
        group = receiver.subscription.group
        dropped = 0
        for delivery in deliveries:
            if delivery.admission is not None:
                delivery.admission.reject()
                continue
            aggregate_id = delivery.message.aggregate_id
            route = self._routes.get(aggregate_id.named_aggregate)
            members = route.groups.get(group) if route and not self._closing else None
            member = _choose(members, aggregate_id.id, _accepting) if members else None
            if member is None:
                dropped += 1
            else:
                _deliver(member, delivery)
        if dropped:
            _log.log(
                logging.DEBUG if self._closing else logging.WARNING,
                "%r stopped and no other member of group %r takes what it did not yield: dropped %d messages",
                receiver,
                group,
                dropped,
            )

    def subscriber_count(self, named_aggregate: NamedAggregate) -> int:
        """Runtime-owned, processing-open receivers routed for ``named_aggregate``."""
        route = self._routes.get(named_aggregate)
        if not route:
            return 0
        return sum(1 for members in route.groups.values() for member in members if member.routable)

    def hand_off(self, message: M) -> HandOffReceipt:
        """Put ``message`` into the sink of the routed receivers without waiting for a pull.

        Every group that holds a runtime-owned receiver must have a processing-open,
        runtime-owned member, or the hand-off is refused (a group left out would filter
        the distributed copy as handled locally and never see the message). Groups of
        plain receivers get the message too but do not count for admission. A refused
        receipt emits nothing.
        """
        if self._closed:
            return HandOffReceipt.refused(f"{type(self).__name__} is closed")
        aggregate_id = message.aggregate_id
        route = self._routes.get(aggregate_id.named_aggregate)
        if not route:
            return HandOffReceipt.refused(f"no receiver for {aggregate_id.named_aggregate}")
        counted: list[InMemoryReceiver[Any]] = []
        plain: list[InMemoryReceiver[Any]] = []
        for group, members in route.groups.items():
            if len(members) == 1:  # the common case, without the scans below
                member = members[0]
                if not member.subscription.runtime_owned:
                    if member.accepting:
                        plain.append(member)
                elif member.routable:
                    counted.append(member)
                else:
                    return HandOffReceipt.refused(
                        f"group {group!r} of {aggregate_id.named_aggregate} has no processing-open receiver"
                    )
                continue
            if any(member.subscription.runtime_owned for member in members):
                chosen = _choose(members, aggregate_id.id, _routable)
                if chosen is None:
                    return HandOffReceipt.refused(
                        f"group {group!r} of {aggregate_id.named_aggregate} has no processing-open receiver"
                    )
                if chosen.draining:
                    # Refused: its copy goes out in its turn, behind the copy of the message
                    # the draining member still processes, so the order is kept.
                    return HandOffReceipt.refused(
                        f"the member of group {group!r} holding {aggregate_id} is stopping "
                        "with a message of it in flight"
                    )
                counted.append(chosen)
            else:
                chosen = _choose(members, aggregate_id.id, _accepting)
                if chosen is not None:
                    plain.append(chosen)
        if not counted:
            return HandOffReceipt.refused(f"no runtime-owned receiver for {aggregate_id.named_aggregate}")
        future = AdmissionFuture(loop=asyncio.get_running_loop())
        admission = _Admission(future, len(counted))
        message.with_read_only()
        for receiver in counted:
            receiver._emit(_Delivery(message, admission))
        if plain:
            delivery = _Delivery(message, None)
            for receiver in plain:
                _deliver(receiver, delivery)
        counts = self._hand_off_counts
        if counts is not None:
            name = message.name
            count = counts.get((aggregate_id.named_aggregate.key, name))
            if count is None:
                count = _hand_off_count(counts, aggregate_id.named_aggregate, name)
            count.count += 1
        return HandOffReceipt(True, future, receivers=len(counted))

    async def close(self) -> None:
        """Close every route (rejecting pending admissions, dropping what no receiver
        yielded), then refuse new sends."""
        self._closing = True
        for route in list(self._routes.values()):
            for members in list(route.groups.values()):
                for receiver in list(members):
                    receiver._close()
        self._routes.clear()
        self._closed = True


class InMemoryCommandBus(_InMemoryBus[CommandMessage[Any], ServerCommandExchange]):
    """Commands inside one process: one consuming receiver per named aggregate."""

    topic_kind = TopicKind.COMMAND
    _single_consumer = True


class InMemoryDomainEventBus(_InMemoryBus[DomainEventStream, EventStreamExchange]):
    """Domain event streams inside one process: every subscribed group receives each one."""

    topic_kind = TopicKind.EVENT


class InMemoryStateEventBus(_InMemoryBus[StateEvent[Any], StateEventExchange]):
    """State events inside one process: every subscribed group receives each one."""

    topic_kind = TopicKind.STATE


LocalCommandBus = InMemoryCommandBus
"""The spec's name for the local command bus of local-first delivery."""
LocalDomainEventBus = InMemoryDomainEventBus
LocalStateEventBus = InMemoryStateEventBus
