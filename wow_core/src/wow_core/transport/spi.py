"""The Transport SPI (spec 000, "Transport SPI"): what a transport must do, and no more.

A transport moves strings and nothing else: ``send`` publishes a topic, a key, a
payload and a timestamp; ``open(group, topics)`` returns a :class:`TransportReceiver`
with the records, readiness, processing admission and close; ``start`` and ``close``
bound its life; ``name`` labels it in logs and metrics. At this layer there are only
plain primitives: no message, no codec, no named aggregate, no policy. Everything else
(topic names, JSON, key and topic checks, the decode-failure policy, exchanges,
acknowledgement per exchange, metrics) lives once in
:class:`~wow_core.transport.bus.TransportMessageBus`.

The line is drawn here, strictly, so that a new broker is one small class whose
semantics one conformance suite proves, and so that what the bus decides cannot drift
between backends. What a transport *may* say to the bus (its own topic naming, its
decode-failure default) is the optional :class:`~wow_core.transport.defaults.TransportDefaults`,
not part of this protocol; a batch send (``send_many`` of the Kafka, Redis and NATS
transports) is a method of those classes, not of the SPI: nothing above a transport
calls it.

One optional receiver method, for transports whose groups move partitions between
members (a rebalance): ``set_revocation_listener(listener)``, see
:class:`RevocationListening` and :func:`set_revocation_listener`. A transport without it
keeps the default: nothing is called, and its records of a moved partition are simply
redelivered to the new owner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class TransportMessage:
    """What a transport publishes: ``key`` is the aggregate id, ``payload`` the JSON."""

    topic: str
    key: str
    payload: str
    timestamp: int


@runtime_checkable
class TransportRecord(Protocol):
    """One received record; it acknowledges itself.

    ``position`` identifies the record in its backend for logs and dead letters (a
    Kafka ``partition:offset``, a stream entry id, a JetStream sequence).
    ``delivery_count`` is 1 on first delivery when the backend knows it.
    """

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def payload(self) -> str: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def position(self) -> str: ...
    @property
    def delivery_count(self) -> int: ...

    async def ack(self) -> None:
        """Acknowledge: the record is done for this group and is not delivered again."""
        ...


@runtime_checkable
class ReleasingRecord(Protocol):
    """The optional record method of a transport that can hand a record back itself.

    The consumer releases a record it did not finish (its processing failed: the event
    store could not be reached; a stop): without this method the record stays
    unacknowledged until the backend's own redelivery brings it back (an ack wait, a
    lease, the next owner of a partition). With it (every built-in transport),
    ``release()`` asks the transport to deliver the record again to this group soon,
    after a delay that grows with its ``delivery_count``, so a failure that passes (a
    short outage) is retried in seconds, and one that does not is not retried in a hot
    loop: it reaches the transport's delivery limit (its dead letter) at the backend's
    pace. It returns at once and never raises; a release after ``ack()`` or of a
    receiver that closes does nothing more than the backend would.

    For a third-party transport author: implement it when your backend can redeliver
    one record early (a negative acknowledgement with a delay, a claim); leave it out
    otherwise.
    """

    def release(self) -> None: ...


@runtime_checkable
class TransportReceiver(Protocol):
    """A group member's view of some topics.

    ``ready()`` completes when a record sent after it returns cannot be missed. No
    record is yielded before ``open_processing()``. ``close()`` releases every task and
    connection; records not acknowledged by then are delivered again (to this group)
    later.
    """

    def __aiter__(self) -> AsyncIterator[TransportRecord]: ...

    async def ready(self) -> None: ...

    def open_processing(self) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class Transport(Protocol):
    """A message broker, reduced to strings (see the module docstring for why the line is here).

    ``send`` returns when the backend accepted the record (what that means is the
    transport's SENT evidence: a producer ack, a stream add, a JetStream publish ack)
    and raises the backend's error otherwise; after ``close`` it raises
    :class:`~wow_core.messaging.BusClosedError`.
    """

    @property
    def name(self) -> str: ...

    async def start(self) -> None:
        """Connect; idempotent. ``send`` and ``open`` may start lazily too."""
        ...

    async def send(self, message: TransportMessage) -> None: ...

    def open(self, group: str, topics: Sequence[str]) -> TransportReceiver: ...

    async def close(self) -> None: ...


RevocationListener = Callable[[Sequence[tuple[str, int]]], Awaitable[None]]
"""Called with the ``(topic, partition)`` pairs a member is about to lose."""


@runtime_checkable
class RevocationListening(Protocol):
    """The optional receiver method of a transport whose groups move partitions.

    A receiver that offers ``set_revocation_listener`` calls the listener during each
    revocation of partitions it owns, after it stopped handing out their records and
    before it commits their offsets and lets the group give them to another member. The
    listener returns once the consumer is done with the records of those partitions it
    was handed: it drops the ones it has not started (they are not acknowledged, so the
    new owner gets them from the committed offset) and finishes or abandons the ones in
    flight, so the new owner never works on a record in parallel with the old one. The
    receiver bounds the call (Kafka: ``revocation_drain_timeout_ms``) and, when a listener
    returned, does not wait for the records the listener dropped. One listener per
    receiver; setting it again replaces it.

    For a third-party transport author: implement it if your groups rebalance (call the
    listener from your rebalance callback, before the commit that hands partitions over);
    leave it out otherwise. Callers use :func:`set_revocation_listener`, which is a no-op
    for a receiver without the method.
    """

    def set_revocation_listener(self, listener: RevocationListener | None) -> None: ...


def set_revocation_listener(receiver: TransportReceiver, listener: RevocationListener | None) -> bool:
    """Install ``listener`` on ``receiver`` if it offers revocations (see
    :class:`RevocationListening`); False (and nothing installed) for one that does not,
    the default of the SPI."""
    install = getattr(receiver, "set_revocation_listener", None)
    if install is None:
        return False
    install(listener)
    return True
