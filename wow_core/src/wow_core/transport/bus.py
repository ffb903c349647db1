"""``TransportMessageBus``: a message bus over any :class:`~wow_core.transport.Transport`.

Everything a broker does not need to know lives here, once for every backend:

* topic names, through the bus's :class:`~wow_core.transport.TopicNaming` (the one
  the transport asks for, if it asks: :func:`~wow_core.transport.defaults.naming_of`),
  memoised per named aggregate (bounded context and aggregate name);
* JSON encoding through :class:`~wow_core.model.MessageCodec`: a message is marked
  read-only before it is encoded, the record key is the aggregate id;
* decoding with key and topic checks: a record whose key or topic does not match the
  message inside is a decode failure, not a message;
* the decode-failure policy (:class:`~wow_core.transport.TransportDecodeFailureHandler`):
  an undecodable record never stops the receiver and is never silently dropped;
* one exchange type per message kind, whose ``ack`` acknowledges the record;
* no metrics: ``wow.bus.sent`` / ``wow.bus.received`` are counted by the metrics
  middleware that decorates the bus (:mod:`wow_core.middleware`);
* the ``local_first`` marker: only a local-first bus in front of this bus may send it as
  ``true`` (it is the admission result of that bus). A bus with none in front
  (``keeps_local_first_marker=False``, local-first off for that bus) sends every message
  marked ``local_first=false``, whatever marker the message came with, so a marker
  copied from a received message or set by a caller never makes an owner drop it.

``send`` returns when ``transport.send`` returned: SENT proves what the transport's send
proves (a producer ack, a stream add...), never that a consumer received or processed it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, Generic, TypeVar

from wow_core.messaging.contract import (
    BusClosedError,
    EventStreamExchange,
    MessageSubscription,
    ServerCommandExchange,
    StateEventExchange,
)
from wow_core.messaging.in_flight import InFlight
from wow_core.model import (
    CommandMessage,
    DecodeError,
    DecodeFailureKind,
    DomainEventStream,
    Header,
    Message,
    MessageCodec,
    NamedAggregate,
    StateEvent,
    TopicKind,
)
from wow_core.transport.decode_failure import (
    DecodeFailure,
    DecodeFailureAction,
    DefaultDecodeFailureHandler,
    TransportDecodeFailureHandler,
    decide_decode_failure,
)
from wow_core.transport.defaults import TopicNaming, naming_of
from wow_core.transport.spi import Transport, TransportMessage, TransportReceiver, TransportRecord

_log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound="TransportExchange")

SENT_COUNTER = "wow.bus.sent"
"""Messages a bus sent; tags ``kind``, ``aggregate``, ``transport``, ``source``, ``outcome``
(counted by :class:`~wow_core.middleware.MetricMessageBus`)."""
RECEIVED_COUNTER = "wow.bus.received"
"""Exchanges a receiver handed to its consumer; tags ``kind``, ``aggregate``, ``group``
(counted by :class:`~wow_core.middleware.MetricMessageBus`)."""


class TransportExchange:
    """Mixin of the transport exchanges: the received record, acknowledged by ``ack``;
    ``release`` hands it back to its transport where the record offers it
    (:class:`~wow_core.transport.spi.ReleasingRecord`), else it waits for the backend's
    own redelivery."""

    __slots__ = ()

    record: TransportRecord


class TransportServerCommandExchange(ServerCommandExchange, TransportExchange):
    """A command received from a transport; ``ack`` acknowledges its record."""

    __slots__ = ("record",)

    def __init__(self, message: CommandMessage[Any], record: TransportRecord, on_settle: Any) -> None:
        super().__init__(message, record.ack, on_settle, getattr(record, "release", None))
        self.record = record


class TransportEventStreamExchange(EventStreamExchange, TransportExchange):
    """A domain event stream received from a transport; ``ack`` acknowledges its record."""

    __slots__ = ("record",)

    def __init__(self, message: DomainEventStream, record: TransportRecord, on_settle: Any) -> None:
        super().__init__(message, record.ack, on_settle, getattr(record, "release", None))
        self.record = record


class TransportStateEventExchange(StateEventExchange, TransportExchange):
    """A state event received from a transport; ``ack`` acknowledges its record."""

    __slots__ = ("record",)

    def __init__(self, message: StateEvent[Any], record: TransportRecord, on_settle: Any) -> None:
        super().__init__(message, record.ack, on_settle, getattr(record, "release", None))
        self.record = record


class TransportMessageBus(Generic[M, E]):
    """A bus of one message kind over a transport.

    The bus does not own the transport: ``close`` closes the bus's receivers and refuses
    new sends; the runtime closes the transport after every bus over it. ``naming``
    defaults to the transport's (:func:`~wow_core.transport.defaults.naming_of`).
    """

    topic_kind: ClassVar[TopicKind]
    exchange_type: ClassVar[type[Any]]

    def __init__(
        self,
        transport: Transport,
        codec: MessageCodec,
        *,
        decode_failure_handler: TransportDecodeFailureHandler | None = None,
        naming: TopicNaming | None = None,
        keeps_local_first_marker: bool = True,
    ) -> None:
        self.transport = transport
        self.codec = codec
        self.naming: TopicNaming = naming if naming is not None else naming_of(transport)
        #: False when no local-first bus is in front of this one: see the module docstring.
        self.keeps_local_first_marker = keeps_local_first_marker
        self.decode_failure_handler: TransportDecodeFailureHandler = (
            decode_failure_handler if decode_failure_handler is not None else DefaultDecodeFailureHandler()
        )
        self._topics: dict[NamedAggregate, str] = {}
        self._receivers: set[TransportBusReceiver[E]] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: sends and new receivers are refused."""
        return self._closed

    def topic(self, named_aggregate: NamedAggregate) -> str:
        """The topic of ``named_aggregate`` for this bus's kind (memoised)."""
        topic = self._topics.get(named_aggregate)
        if topic is None:
            topic = self._topics[named_aggregate] = self.naming.topic(named_aggregate, self.topic_kind)
        return topic

    def delivers(self, message: M, *, handled_locally: bool) -> bool:
        """Whether a copy of ``message`` sent now (marked ``local_first: "true"`` when
        ``handled_locally``) could be processed by any receiver.

        True unless the transport can tell otherwise (the in-memory transport's ``takes``:
        no group on the topic, or every receiver would drop a copy handled locally); other
        transports cannot see their receivers, so a local-first bus always sends its copies
        over them.
        """
        takes = getattr(self.transport, "takes", None)
        if takes is None:
            return True
        topic = self.topic(message.aggregate_id.named_aggregate)
        return bool(takes(topic, handled_locally=handled_locally))

    def encode(self, message: M) -> TransportMessage:
        """The record of ``message``: marked read-only first, keyed by aggregate id."""
        if not self.keeps_local_first_marker and message.header.local_first:
            # Never admitted by a local-first bus: the record says so (module docstring).
            message = message.copy()
            message.header[Header.LOCAL_FIRST] = "false"
        message.with_read_only()
        aggregate_id = message.aggregate_id
        return TransportMessage(
            topic=self.topic(aggregate_id.named_aggregate),
            key=aggregate_id.id,
            payload=self.codec.encode(message),
            timestamp=message.create_time,
        )

    async def send(self, message: M) -> None:
        """Return when the transport accepted ``message``; raise what it raised otherwise."""
        if self._closed:
            raise BusClosedError(f"{type(self).__name__} is closed; cannot send {message.name}")
        await self.transport.send(self.encode(message))

    def decode(self, record: TransportRecord, topics: dict[str, NamedAggregate]) -> M:
        """The message in ``record``; raise :class:`DecodeError` for anything else.

        ``topics`` are the topics the receiver subscribed to: a record from another topic,
        or whose message belongs to another topic or has another key, is a failure.
        """
        if record.topic not in topics:
            raise DecodeError(
                DecodeFailureKind.TOPIC_MISMATCH, f"record from {record.topic!r}, which was not subscribed"
            )
        try:
            message = self.codec.decode(record.payload, self.topic_kind)
        except DecodeError:
            raise
        except (RecursionError, MemoryError, TypeError, ValueError) as error:
            # Hostile payloads (deep nesting...) fail below the codec's own checks.
            raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"{type(error).__name__}: {error}") from None
        aggregate_id = message.aggregate_id
        expected = self.topic(aggregate_id.named_aggregate)
        if expected != record.topic:
            raise DecodeError(
                DecodeFailureKind.TOPIC_MISMATCH,
                f"message of {aggregate_id.named_aggregate} belongs on {expected!r}, got {record.topic!r}",
            )
        if record.key != aggregate_id.id:
            raise DecodeError(
                DecodeFailureKind.KEY_MISMATCH,
                f"record key {record.key!r} is not the aggregate id {aggregate_id.id!r}",
            )
        message.with_read_only()  # as emitted by a local bus: copy() to change it
        return message  # type: ignore[return-value]

    def receiver(self, subscription: MessageSubscription) -> TransportBusReceiver[E]:
        """One transport receiver: ``transport.open(subscription.group, topics)``."""
        if self._closed:
            raise BusClosedError(f"{type(self).__name__} is closed")
        receiver: TransportBusReceiver[E] = TransportBusReceiver(self, subscription)
        self._receivers.add(receiver)
        return receiver

    def _forget(self, receiver: TransportBusReceiver[E]) -> None:
        self._receivers.discard(receiver)

    async def close(self) -> None:
        """Close every receiver of this bus, then refuse new sends (the transport stays open)."""
        self._closed = True
        receivers = list(self._receivers)
        if receivers:
            await asyncio.gather(*(receiver.close() for receiver in receivers))


class TransportBusReceiver(Generic[E]):
    """A bus receiver over one transport receiver (one group member).

    Readiness and processing admission are the transport receiver's. Decode failures go
    to the bus's policy and the iteration goes on. After :meth:`quiesce` no new exchange
    reaches the consumer (a record pulled meanwhile is left unacknowledged, so it is
    delivered again); :meth:`close` closes the transport receiver, whose unacknowledged
    records are delivered again to the group.
    """

    def drop_handled_locally(self, is_local: Callable[[NamedAggregate], bool]) -> None:
        """This receiver's consumer drops the records marked handled locally of the
        aggregates ``is_local`` owns (a local-first receiver): told to the transport
        receiver when it can use it (the in-memory transport's ``drop_handled_locally``)."""
        declare = getattr(self._receiver, "drop_handled_locally", None)
        if declare is not None:
            declare([topic for topic, named in self.topics.items() if is_local(named)])

    def __init__(self, bus: TransportMessageBus[Any, E], subscription: MessageSubscription) -> None:
        self.bus = bus
        self.subscription = subscription
        self.topics: dict[str, NamedAggregate] = {
            bus.topic(named_aggregate): named_aggregate
            for named_aggregate in sorted(subscription.named_aggregates, key=str)
        }
        self._receiver: TransportReceiver = bus.transport.open(subscription.group, list(self.topics))
        self._records: AsyncIterator[TransportRecord] | None = None
        self._opened = False
        self._quiescing = False
        self._closed = False
        self._in_flight = InFlight()

    @property
    def transport_receiver(self) -> TransportReceiver:
        return self._receiver

    def __aiter__(self) -> AsyncIterator[E]:
        return self

    async def __anext__(self) -> E:
        if self._records is None:
            self._records = aiter(self._receiver)
        while True:
            if self._closed or self._quiescing:
                raise StopAsyncIteration
            record = await anext(self._records)
            if self._closed or self._quiescing:
                raise StopAsyncIteration  # left unacknowledged: delivered again
            try:
                message = self.bus.decode(record, self.topics)
            except DecodeError as error:
                await self._decode_failed(record, error)
                continue
            self._in_flight.enter()
            exchange: E = self.bus.exchange_type(message, record, self._on_settle)
            return exchange

    async def _decode_failed(self, record: TransportRecord, error: DecodeError) -> None:
        """Run the policy, its observer and the acknowledgement as one unit.

        A cancellation of the consumer (closing, a timeout around ``anext``) does not
        split the unit: the unit runs in its own task, the cancellation waits until it
        finished (bounded by the policy's own work, for a dead letter the transport's
        send deadline) and is raised after it. Without this a record could be
        dead-lettered and counted, yet left unacknowledged: delivered, dead-lettered and
        counted again, and on Kafka holding its partition's commit watermark.
        """
        unit = asyncio.ensure_future(self._settle_decode_failure(record, error))
        cancelled: asyncio.CancelledError | None = None
        while not unit.done():
            try:
                await asyncio.shield(unit)
            except asyncio.CancelledError as cancellation:
                if unit.cancelled():
                    raise  # the unit itself was cancelled (the loop is shutting down)
                cancelled = cancellation
        if cancelled is not None:
            raise cancelled
        unit.result()

    async def _settle_decode_failure(self, record: TransportRecord, error: DecodeError) -> None:
        failure = DecodeFailure(self.subscription.group, record, error)
        action = await decide_decode_failure(self.bus.decode_failure_handler, failure, self.bus.transport)
        if action is DecodeFailureAction.ACK:
            try:
                await record.ack()
            except Exception:
                _log.exception(
                    "could not acknowledge undecodable record %s at %s", record.topic, record.position
                )

    def _on_settle(self) -> None:
        self._in_flight.leave()

    async def ready(self) -> None:
        await self._receiver.ready()

    @property
    def processing_open(self) -> bool:
        return self._opened and not self._closed

    def open_processing(self) -> None:
        if self._closed:
            raise BusClosedError("receiver is closed")
        self._opened = True
        self._receiver.open_processing()

    @property
    def in_flight(self) -> int:
        return self._in_flight.count

    async def quiesce(self, timeout: float | None = None) -> bool:
        self._quiescing = True
        return await self._in_flight.settled(timeout)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.bus._forget(self)
        await self._receiver.close()


class TransportCommandBus(TransportMessageBus[CommandMessage[Any], TransportServerCommandExchange]):
    """The distributed command bus: ``KafkaCommandBus`` is this over ``KafkaTransport``."""

    topic_kind = TopicKind.COMMAND
    exchange_type = TransportServerCommandExchange


class TransportDomainEventBus(TransportMessageBus[DomainEventStream, TransportEventStreamExchange]):
    """The distributed domain-event bus."""

    topic_kind = TopicKind.EVENT
    exchange_type = TransportEventStreamExchange


class TransportStateEventBus(TransportMessageBus[StateEvent[Any], TransportStateEventExchange]):
    """The distributed state-event bus."""

    topic_kind = TopicKind.STATE
    exchange_type = TransportStateEventExchange
