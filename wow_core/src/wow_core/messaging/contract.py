"""The messaging contract every bus implements (spec 000, "CommandBus contract").

``send`` returns when the concrete transport accepted the message, and no later: it
proves nothing about processing. ``receiver(subscription)`` is the one receive entry; the
:class:`MessageReceiver` it returns separates *readiness* (the receiver can no longer
miss a message sent after it), *processing admission* (nothing reaches the consumer
before processing is opened) and *quiescence* (stop taking new work, wait for in-flight
exchanges to settle).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from wow_core.model import (
    CommandMessage,
    DomainEventStream,
    Message,
    NamedAggregate,
    StateEvent,
    TopicKind,
)

M = TypeVar("M", bound=Message)
M_co = TypeVar("M_co", bound=Message, covariant=True)
M_contra = TypeVar("M_contra", bound=Message, contravariant=True)
E = TypeVar("E", bound="MessageExchange[Any]")
E_co = TypeVar("E_co", bound="MessageExchange[Any]", covariant=True)

_log = logging.getLogger(__name__)


class BusClosedError(RuntimeError):
    """A send or a new receiver on a bus (or transport) that was closed."""


class ReceiverConflictError(RuntimeError):
    """A second concurrent consumer where the bus allows only one (in-memory commands)."""


@dataclass(frozen=True, slots=True)
class MessageSubscription:
    """Who receives what.

    ``group`` names the consumer group, ``<context>.<processor>`` by convention; every
    group receives every message, members of one group share them. ``runtime_owned``
    marks a :class:`~wow_core.runtime.WowRuntime` dispatcher's receiver: local buses let
    only such receivers take part in local-first delivery receipts.
    """

    group: str
    named_aggregates: frozenset[NamedAggregate]
    runtime_owned: bool = False

    def __post_init__(self) -> None:
        if not self.group:
            raise ValueError("a subscription needs a group name")
        if not self.named_aggregates:
            raise ValueError(f"subscription {self.group!r} names no aggregate")

    @classmethod
    def of(
        cls, group: str, named_aggregates: Iterable[NamedAggregate], *, runtime_owned: bool = False
    ) -> MessageSubscription:
        return cls(group, frozenset(named_aggregates), runtime_owned)

    def copy(self, *, runtime_owned: bool) -> MessageSubscription:
        return replace(self, runtime_owned=runtime_owned)


@runtime_checkable
class MessageExchange(Protocol[M_co]):
    """One received message on its way through a pipeline.

    ``ack()`` tells the bus the message was handled (idempotent; the concrete bus maps
    it to its own acknowledgement: a Kafka offset, an XACK, a JetStream ack).
    ``release()`` ends the exchange without acknowledging: the backend redelivers it
    according to its own rules. Either settles the exchange for quiescence.
    """

    @property
    def message(self) -> M_co: ...

    @property
    def attributes(self) -> dict[str, Any]: ...

    @property
    def acked(self) -> bool: ...

    async def ack(self) -> None: ...

    def release(self) -> None: ...


class SimpleExchange(Generic[M]):
    """An exchange whose ack and release call back into the receiver that produced it."""

    __slots__ = ("_acked", "_attributes", "_message", "_on_ack", "_on_release", "_on_settle", "_settled")

    def __init__(
        self,
        message: M,
        on_ack: Callable[[], Awaitable[None]] | None = None,
        on_settle: Callable[[], None] | None = None,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        self._message = message
        self._attributes: dict[str, Any] = {}
        self._acked = False
        self._settled = False
        self._on_ack = on_ack
        self._on_settle = on_settle
        self._on_release = on_release

    @property
    def message(self) -> M:
        return self._message

    @property
    def attributes(self) -> dict[str, Any]:
        return self._attributes

    @property
    def acked(self) -> bool:
        return self._acked

    async def ack(self) -> None:
        if self._acked:
            return
        self._acked = True
        try:
            if self._on_ack is not None:
                await self._on_ack()
        finally:
            self._settle()

    def release(self) -> None:
        """Settle without acknowledging; ``on_release`` (the record's hand-back to its
        transport, where it has one) runs once, and not after an ``ack``."""
        if self._settled:
            return
        self._settle()
        if self._on_release is not None:
            try:
                self._on_release()
            except Exception:  # the backend's own redelivery still brings it back
                _log.exception("handing back %r failed; it stays unacknowledged", self)

    def _settle(self) -> None:
        if not self._settled:
            self._settled = True
            if self._on_settle is not None:
                self._on_settle()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._message.name} {self._message.aggregate_id})"


class ServerCommandExchange(SimpleExchange[CommandMessage[Any]]):
    """A received command."""

    __slots__ = ()


class EventStreamExchange(SimpleExchange[DomainEventStream]):
    """A received domain event stream."""

    __slots__ = ()


class StateEventExchange(SimpleExchange[StateEvent[Any]]):
    """A received state event."""

    __slots__ = ()


EXCHANGE_TYPES: dict[TopicKind, type[SimpleExchange[Any]]] = {
    TopicKind.COMMAND: ServerCommandExchange,
    TopicKind.EVENT: EventStreamExchange,
    TopicKind.STATE: StateEventExchange,
}


class MessageReceiver(Protocol[E_co]):
    """What ``MessageBus.receiver(subscription)`` returns.

    Iterating yields exchanges, but only after :meth:`open_processing`; before that the
    receiver may connect and become ready, it never hands a message to the consumer.
    """

    def __aiter__(self) -> AsyncIterator[E_co]: ...

    async def ready(self) -> None:
        """Complete once no message sent after this returns can be missed."""
        ...

    @property
    def processing_open(self) -> bool: ...

    def open_processing(self) -> None:
        """Admit processing: from now on exchanges reach the consumer."""
        ...

    @property
    def in_flight(self) -> int:
        """Exchanges handed to the consumer and not yet acked or released."""
        ...

    async def quiesce(self, timeout: float | None = None) -> bool:
        """Stop taking new work; wait (up to ``timeout``) for in-flight exchanges.

        Returns True when nothing is in flight any more.
        """
        ...

    async def close(self) -> None:
        """Release every task and connection; unacknowledged messages stay redeliverable."""
        ...


class MessageBus(Protocol[M_contra, E_co]):
    """A bus of one message kind."""

    @property
    def topic_kind(self) -> TopicKind: ...

    async def send(self, message: M_contra) -> None:
        """Return when the concrete transport accepted ``message``; raise if it refused."""
        ...

    def receiver(self, subscription: MessageSubscription) -> MessageReceiver[E_co]:
        """The one receive entry."""
        ...

    async def close(self) -> None: ...


def opened_messages(bus: MessageBus[Any, E]) -> Callable[[MessageSubscription], AsyncIterator[E]]:
    """``opened_messages(bus)(subscription)``: the plain exchange stream, processing open.

    The receiver is closed when the stream ends: exhausted, or closed (``aclose()``,
    ``contextlib.aclosing``). Leaving an ``async for`` over it early (``break``,
    ``return``) does not close an async generator at once: Python leaves that to the event
    loop's finalizer, some steps later. To release the receiver as the loop is left::

        async with contextlib.aclosing(opened_messages(bus)(subscription)) as stream:
            async for exchange in stream:
                ...
    """

    async def stream(subscription: MessageSubscription) -> AsyncIterator[E]:
        receiver = bus.receiver(subscription)
        try:
            await receiver.ready()
            receiver.open_processing()
            async for exchange in receiver:
                yield exchange
        finally:
            await receiver.close()

    return stream


# -- the three buses --------------------------------------------------------------------

CommandBus = MessageBus[CommandMessage[Any], ServerCommandExchange]
DomainEventBus = MessageBus[DomainEventStream, EventStreamExchange]
StateEventBus = MessageBus[StateEvent[Any], StateEventExchange]


# -- local buses and hand-off -----------------------------------------------------------


@dataclass(slots=True)
class HandOffReceipt:
    """The result of ``LocalMessageBus.hand_off`` for one delivery.

    ``accepted`` is true when the message entered the local sink of *every* routed,
    processing-open, runtime-owned receiver. ``admission`` resolves to true only when
    all of those receivers handled this delivery (each confirms when its dispatcher
    acknowledges the message, after processing it; rejects when the exchange is released
    unacknowledged, or the receiver quiesces or closes first). Sink acceptance, a pull or
    a subscriber count alone never counts as admission.
    A refused receipt (``accepted`` false) has an admission already resolved to false.
    """

    accepted: bool
    admission: asyncio.Future[bool]
    reason: str = ""
    receivers: int = 0

    @classmethod
    def refused(cls, reason: str) -> HandOffReceipt:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        future.set_result(False)
        return cls(False, future, reason)


@runtime_checkable
class LocalMessageBus(Protocol[M_contra, E_co]):
    """A bus inside this process that can take part in local-first delivery."""

    @property
    def topic_kind(self) -> TopicKind: ...

    async def send(self, message: M_contra) -> None: ...

    def receiver(self, subscription: MessageSubscription) -> MessageReceiver[E_co]: ...

    async def close(self) -> None: ...

    def subscriber_count(self, named_aggregate: NamedAggregate) -> int:
        """Runtime-owned, processing-open receivers routed for ``named_aggregate``."""
        ...

    def hand_off(self, message: M_contra) -> HandOffReceipt:
        """Put ``message`` into the local sinks without waiting for any receiver to pull it.

        Raises only for a local error (a terminated sink, a bug): local-first treats
        that as a refusal.
        """
        ...
