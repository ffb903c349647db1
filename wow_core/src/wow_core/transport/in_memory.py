"""``InMemoryTransport``: the embedded default transport, with real consumer-group semantics.

What it guarantees, inside one process:

* every group sees every record sent after it first opened on the topic; a group
  outlives its members, so a receiver stopped and restarted in the same group loses
  nothing;
* inside a group each record goes to one member: a topic is split into ``partitions``
  by a hash of the key, each partition owned by one member, so one key's records keep
  their order;
* a record not acknowledged when its receiver closes is delivered again (first, in its
  order) to the member that owns its partition next, with ``delivery_count`` raised;
* a record its consumer releases (``release()``: its processing failed) goes back to the
  front of its partition after ``release_delay`` seconds, doubled per delivery up to
  ``release_delay_max``, and is delivered again with ``delivery_count`` raised; records
  of its partition delivered meanwhile are not held back;
* when a partition moves to a new member while the old one still holds unacknowledged
  records of it, the new member waits for those to be acknowledged or redelivered, so
  a key's records never overtake one another;
* ``ready()`` completes at once: a receiver is a group member from ``open()`` on;
  nothing is yielded before ``open_processing()``;
* ``send`` after ``close`` raises :class:`~wow_core.messaging.BusClosedError`.

What it does not: durability across processes, or retention for groups that did not
exist yet. A record sent to a topic no group opened is not kept; a group whose members
all left keeps accumulating records (in memory) until a member comes back.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from wow_core.messaging.contract import BusClosedError
from wow_core.transport.base import TransportBase
from wow_core.transport.defaults import DecodeFailureDefault, DefaultTopicNaming, TopicNaming
from wow_core.transport.spi import TransportMessage

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings

DEFAULT_PARTITIONS = 16


class InMemoryRecord:
    """One record as one group sees it; it acknowledges itself for that group."""

    __slots__ = ("_message", "acked", "delivery_count", "holder", "offset", "partition")

    def __init__(self, message: TransportMessage, partition: _Partition, offset: int) -> None:
        self._message = message
        self.partition = partition
        self.offset = offset
        self.delivery_count = 0
        self.acked = False
        self.holder: InMemoryTransportReceiver | None = None

    @property
    def topic(self) -> str:
        return self._message.topic

    @property
    def key(self) -> str:
        return self._message.key

    @property
    def payload(self) -> str:
        return self._message.payload

    @property
    def timestamp(self) -> int:
        return self._message.timestamp

    @property
    def position(self) -> str:
        return f"{self.partition.index}:{self.offset}"

    async def ack(self) -> None:
        holder = self.holder
        if holder is not None and holder._releases:
            holder._cancel_release(self)
        self.partition.ack(self)

    def release(self) -> None:
        """Deliver this unfinished record again after the transport's release delay."""
        holder = self.holder
        if holder is not None and not self.acked:
            holder._released(self)

    def __repr__(self) -> str:
        return f"InMemoryRecord({self.topic} {self.key!r} @{self.position})"


class _Partition:
    """One partition of a topic for one group: records not yet delivered, and in flight."""

    __slots__ = ("holders", "in_flight", "index", "owner", "queue", "scheduled_for")

    def __init__(self, index: int) -> None:
        self.index = index
        self.queue: deque[InMemoryRecord] = deque()
        self.in_flight: dict[int, InMemoryRecord] = {}
        self.holders: dict[InMemoryTransportReceiver, int] = {}
        self.owner: InMemoryTransportReceiver | None = None
        self.scheduled_for: InMemoryTransportReceiver | None = None

    def deliverable_to(self, member: InMemoryTransportReceiver) -> bool:
        if self.owner is not member or not self.queue:
            return False
        holders = self.holders
        return not holders or (len(holders) == 1 and member in holders)

    def schedule(self) -> None:
        owner = self.owner
        if owner is not None and self.scheduled_for is not owner and self.deliverable_to(owner):
            self.scheduled_for = owner
            owner._schedule(self)

    def take(self, member: InMemoryTransportReceiver) -> InMemoryRecord | None:
        while self.queue:
            record = self.queue.popleft()
            if record.acked:
                continue
            record.holder = member
            record.delivery_count += 1
            self.in_flight[record.offset] = record
            self.holders[member] = self.holders.get(member, 0) + 1
            return record
        return None

    def _release(self, record: InMemoryRecord) -> None:
        holder = record.holder
        record.holder = None
        del self.in_flight[record.offset]
        if holder is not None:
            left = self.holders[holder] - 1
            if left:
                self.holders[holder] = left
            else:
                del self.holders[holder]

    def ack(self, record: InMemoryRecord) -> None:
        if record.acked:
            return
        record.acked = True
        if record.holder is not None:
            self._release(record)
            self.schedule()

    def give_back_one(self, record: InMemoryRecord) -> None:
        """Put one released record back among the queued ones, in offset order."""
        self._release(record)
        queue = self.queue
        index = 0
        while index < len(queue) and queue[index].offset < record.offset:
            index += 1
        queue.insert(index, record)
        self.schedule()

    def give_back(self, member: InMemoryTransportReceiver) -> None:
        """Put ``member``'s unacknowledged records back in front, in their order."""
        if member not in self.holders:
            return
        held = sorted((r for r in self.in_flight.values() if r.holder is member), key=lambda r: r.offset)
        for record in held:
            self._release(record)
        self.queue.extendleft(reversed(held))


class _GroupTopic:
    """One group's view of one topic: partitions and the members subscribed to it."""

    __slots__ = ("members", "partitions")

    def __init__(self, partitions: int) -> None:
        self.partitions = [_Partition(index) for index in range(partitions)]
        self.members: list[InMemoryTransportReceiver] = []

    def publish(self, record_of: TransportMessage, offset: int) -> None:
        partitions = self.partitions
        partition = partitions[zlib.crc32(record_of.key.encode("utf-8")) % len(partitions)]
        partition.queue.append(InMemoryRecord(record_of, partition, offset))
        partition.schedule()

    def rebalance(self) -> None:
        members = self.members
        for index, partition in enumerate(self.partitions):
            partition.owner = members[index % len(members)] if members else None
            partition.schedule()


class InMemoryBroker:
    """The records and consumer groups that :class:`InMemoryTransport` clients share.

    One transport makes its own broker; give several transports the same broker to play
    several processes of one system (a restarted receiver on a new client finds its
    group's records).
    """

    def __init__(self, partitions: int = DEFAULT_PARTITIONS) -> None:
        if partitions < 1:
            raise ValueError("an in-memory topic needs at least one partition")
        self.partitions = partitions
        self._groups: dict[tuple[str, str], _GroupTopic] = {}
        self._by_topic: dict[str, list[_GroupTopic]] = {}
        self._offsets: dict[str, int] = {}

    def view(self, group: str, topic: str) -> _GroupTopic:
        view = self._groups.get((group, topic))
        if view is None:
            view = self._groups[(group, topic)] = _GroupTopic(self.partitions)
            self._by_topic.setdefault(topic, []).append(view)
        return view

    def publish(self, message: TransportMessage) -> None:
        if not isinstance(message, TransportMessage):
            raise TypeError(f"expected a TransportMessage, got {type(message).__name__}")
        if not message.topic:
            raise ValueError("a record needs a topic")
        offset = self._offsets.get(message.topic, 0)
        self._offsets[message.topic] = offset + 1
        for view in self._by_topic.get(message.topic, ()):
            view.publish(message, offset)

    def takes(self, topic: str, *, handled_locally: bool = False) -> bool:
        """Whether a record of ``topic`` sent now could be processed by anyone.

        A record reaches the groups of its topic that exist when it is sent, so with no
        group it reaches nobody: False. A record marked ``local_first: "true"``
        (``handled_locally``) is also False when every member of every group said it drops
        such records unprocessed (a local-first receiver of a service owning the topic's
        aggregate, :meth:`InMemoryTransportReceiver.drop_handled_locally`). A group without
        members (its records wait for one), or with a member that processes such records,
        makes it True. Decided against the groups and members of the moment, as ``send``
        delivers.
        """
        views = self._by_topic.get(topic)
        if not views:
            return False
        if not handled_locally:
            return True
        for view in views:
            members = view.members
            if not members:
                return True
            for member in members:
                if topic not in member.drops_handled_locally:
                    return True
        return False

    def backlog(self, group: str, topic: str) -> int:
        """Records of ``topic`` that ``group`` has not acknowledged (queued or in flight)."""
        view = self._groups.get((group, topic))
        if view is None:
            return 0
        return sum(
            sum(1 for record in p.queue if not record.acked) + len(p.in_flight) for p in view.partitions
        )


class InMemoryTransportReceiver:
    """A member of a group on some topics of an :class:`InMemoryTransport`."""

    def __init__(self, transport: InMemoryTransport, group: str, topics: Sequence[str]) -> None:
        self.transport = transport
        self.group = group
        self.topics = tuple(dict.fromkeys(topics))
        self._ready: deque[_Partition] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._opened = False
        self._closed = False
        self._views: list[_GroupTopic] = []
        self._releases: dict[InMemoryRecord, asyncio.TimerHandle] = {}
        """Released records waiting for their delay."""
        self.drops_handled_locally: frozenset[str] = frozenset()
        """The topics of which this member acknowledges and drops, unprocessed, every record
        marked ``local_first: "true"`` (see :meth:`drop_handled_locally`)."""

    def drop_handled_locally(self, topics: Sequence[str]) -> None:
        """Declare that this member drops the records of ``topics`` marked handled locally.

        A local-first receiver says so for the topics of the aggregates its service owns;
        when every member of every group of a topic said it,
        :meth:`InMemoryBroker.takes` is False for such records and a local-first bus does
        not send such copies at all (nobody would process them).
        """
        self.drops_handled_locally = frozenset(topic for topic in topics if topic in self.topics)

    def _join(self, broker: InMemoryBroker) -> None:
        for topic in self.topics:
            view = broker.view(self.group, topic)
            view.members.append(self)
            self._views.append(view)
            view.rebalance()

    def _released(self, record: InMemoryRecord) -> None:
        delay = self.transport.release_delay_for(record.delivery_count)
        if delay is None or self._closed:
            return
        previous = self._releases.pop(record, None)
        if previous is not None:
            previous.cancel()
        loop = asyncio.get_running_loop()
        self._releases[record] = loop.call_later(delay, self._give_back_released, record)

    def _give_back_released(self, record: InMemoryRecord) -> None:
        if self._releases.pop(record, None) is None or self._closed:
            return
        if not record.acked and record.holder is self:
            record.partition.give_back_one(record)

    def _cancel_release(self, record: InMemoryRecord) -> None:
        handle = self._releases.pop(record, None)
        if handle is not None:
            handle.cancel()

    def _schedule(self, partition: _Partition) -> None:
        self._ready.append(partition)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> AsyncIterator[InMemoryRecord]:
        return self

    def poll(self) -> InMemoryRecord | None:
        """The next record if one can be delivered to this member now, else ``None``.

        What the iteration yields, without waiting (for tests and tools). Nothing before
        ``open_processing()``, nothing after ``close()``.
        """
        if self._closed or not self._opened:
            return None
        ready = self._ready
        while ready:
            partition = ready.popleft()
            if partition.scheduled_for is self:
                partition.scheduled_for = None
            if not partition.deliverable_to(self):
                continue
            record = partition.take(self)
            partition.schedule()  # more of it: back to the end of the line
            if record is not None:
                return record
        return None

    async def __anext__(self) -> InMemoryRecord:
        while True:
            if self._closed:
                raise StopAsyncIteration
            record = self.poll()
            if record is not None:
                return record
            if self._waiter is not None:
                raise RuntimeError(f"{self!r} is already being iterated by another task")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def ready(self) -> None:
        """Complete at once: this receiver joined its group when it was opened."""
        if self._closed:
            raise BusClosedError(f"receiver of {self.group!r} is closed")

    def open_processing(self) -> None:
        if self._closed:
            raise BusClosedError(f"receiver of {self.group!r} is closed")
        self._opened = True
        self._wake()

    @property
    def processing_open(self) -> bool:
        return self._opened and not self._closed

    @property
    def in_flight(self) -> int:
        """Records yielded by this receiver and not acknowledged."""
        return sum(p.holders.get(self, 0) for view in self._views for p in view.partitions)

    async def close(self) -> None:
        """Leave the group; what this receiver did not acknowledge is delivered again."""
        self._leave()

    def _leave(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ready.clear()
        for handle in self._releases.values():
            handle.cancel()  # given back with the rest below
        self._releases.clear()
        for view in self._views:
            view.members.remove(self)
            for partition in view.partitions:
                if partition.scheduled_for is self:
                    partition.scheduled_for = None
                partition.give_back(self)
            view.rebalance()
        self._views.clear()
        self.transport.receiver_closed(self)
        self._wake()

    def __repr__(self) -> str:
        return f"InMemoryTransportReceiver({self.group!r}, {list(self.topics)})"


class InMemoryTransport(TransportBase["InMemoryTransportReceiver"]):
    """The embedded default transport (see the module docstring for its guarantees).

    ``send`` proves the record entered the partition queue of every group of its topic
    that exists, nothing more. ``close`` closes this client's receivers (their
    unacknowledged records are delivered again) and refuses sends; the broker and its
    groups stay for other clients. ``release_delay`` (seconds, None: a released record
    waits for its receiver to close) and ``release_delay_max`` time the redelivery of a
    released record.
    """

    name = "in_memory"
    label = "in-memory"
    owns_partitions = True
    """Each key partition of a group's topic belongs to one member (the cluster intake needs it)."""

    def __init__(
        self,
        naming: TopicNaming | None = None,
        *,
        broker: InMemoryBroker | None = None,
        partitions: int = DEFAULT_PARTITIONS,
        decode_failure_default: DecodeFailureDefault = DecodeFailureDefault.DEAD_LETTER,
        release_delay: float | None = 1.0,
        release_delay_max: float = 30.0,
    ) -> None:
        super().__init__(naming if naming is not None else DefaultTopicNaming(), decode_failure_default)
        if release_delay is not None and release_delay <= 0:
            raise ValueError(f"a release delay must be positive, not {release_delay}")
        self.broker = broker if broker is not None else InMemoryBroker(partitions)
        self.release_delay = release_delay
        self.release_delay_max = max(release_delay_max, release_delay or 0.0)

    def release_delay_for(self, deliveries: int) -> float | None:
        """Seconds before a record released after its ``deliveries``-th delivery goes back
        to its partition: ``release_delay`` doubled per delivery after the first, at most
        ``release_delay_max``; None: it waits for its receiver to close."""
        first = self.release_delay
        if first is None:
            return None
        return min(first * 2.0 ** min(max(deliveries - 1, 0), 32), self.release_delay_max)

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> InMemoryTransport:
        """Topic prefix and context aliases from ``WOW_MESSAGING__*``."""
        messaging = settings.messaging
        return cls(DefaultTopicNaming(messaging.topic_prefix, messaging.context_aliases))

    async def start(self) -> None:
        self._check_open()

    async def send(self, message: TransportMessage) -> None:
        if self._closed:
            raise self._closed_error(message.topic)
        self.broker.publish(message)

    def takes(self, topic: str, *, handled_locally: bool = False) -> bool:
        """Whether a record of ``topic`` sent now could be processed by a member of this
        client's broker (:meth:`InMemoryBroker.takes`)."""
        return self.broker.takes(topic, handled_locally=handled_locally)

    def open(self, group: str, topics: Sequence[str]) -> InMemoryTransportReceiver:
        self._check_open()
        if not group:
            raise ValueError("a receiver needs a group name")
        if not topics or not all(isinstance(topic, str) and topic for topic in topics):
            raise ValueError(f"receiver of {group!r} needs non-empty topic names, got {list(topics)!r}")
        receiver = InMemoryTransportReceiver(self, group, topics)
        receiver._join(self.broker)
        return self._track(receiver)

    async def close(self) -> None:
        """Close every receiver of this client, then refuse sends and opens."""
        self._mark_closed()
        for receiver in self._open_receivers():
            receiver._leave()
