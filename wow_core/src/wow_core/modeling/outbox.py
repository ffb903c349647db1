"""The kernel's events through a transactional outbox.

A :class:`TransactionalOutbox` appends a stream and writes outgoing transport messages in
one transaction of the event store (``wow_postgres.PostgresOutbox`` is one; a relay
publishes what it wrote). With an :class:`OutboxPublisher` the
:class:`~wow_core.modeling.CommandKernel` appends each stream through it, writing with
the stream the distributed copies the runtime would otherwise publish after the append:
the stream for the domain event bus and its state event for the state event bus. Then:

- a bus with local-first on hands the message off to this process's receivers at once,
  as before (:meth:`~wow_core.messaging.local_first.LocalFirstMessageBus.send_outboxed`);
  its outboxed copy is marked ``local_first=true`` when it is handed off here (the owning
  service drops the relayed copy), ``false`` when there is no local receiver to hand it
  to (then nothing is handed off). A hand-off whose admission does not confirm (a
  receiver released it, closed, the hand-off timeout) sends a ``local_first=false`` copy
  as local-first always does, so the owning service's groups still get it;
- a bus with local-first off sends nothing itself: the relayed copy is the only one;
- a bus that is not over a transport (the in-process buses) is published as before.

What it closes: a crash after the append's commit no longer loses the distributed copy
(the relay publishes it, at least once); the kernel never publishes an admitted message
a second time. What stays: the local hand-off is in memory, so a crash before this
process's own receivers processed it loses that local processing (turn local-first off
for the bus to have the owning service take it from the transport too).

The outbox's append bypasses the event-store middleware's ``append`` hook (its ``load``
and the others still run); the local-first bus's middleware hooks are bypassed too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from wow_core.messaging.local_first.bus import LocalFirstMessageBus
from wow_core.model import DomainEventStream, Message, StateEvent
from wow_core.transport.bus import TransportMessageBus
from wow_core.transport.spi import TransportMessage


@runtime_checkable
class TransactionalOutbox(Protocol):
    """Appends a stream and writes ``messages`` in the same transaction: both or neither.

    Raises as :meth:`~wow_core.eventsourcing.EventStore.append` (a version conflict, a
    duplicate request id), writing nothing then.
    """

    async def append(self, stream: DomainEventStream, messages: Sequence[TransportMessage]) -> None: ...


@dataclass(slots=True)
class OutboxedPublication:
    """What one append wrote to the outbox, and what is still to do in this process."""

    messages: list[TransportMessage]
    local: list[tuple[str, Callable[[], Awaitable[None]]]] = field(default_factory=list)
    """(bus name, the local step) run after the commit, in order."""


class _Route:
    """How one kernel bus publishes through the outbox."""

    def __init__(self, name: str, bus: Any, unwrap: Callable[[Any], Any]) -> None:
        self.name = name
        self.bus = bus
        inner = unwrap(bus)
        self.local_first: LocalFirstMessageBus[Any, Any] | None = None
        self.encoder: TransportMessageBus[Any, Any] | None = None
        if isinstance(inner, LocalFirstMessageBus):
            distributed = unwrap(inner.distributed_bus)
            if isinstance(distributed, TransportMessageBus):
                self.local_first, self.encoder = inner, distributed
        elif isinstance(inner, TransportMessageBus):
            self.encoder = inner

    def prepare(self, message: Message, publication: OutboxedPublication) -> None:
        if self.encoder is None:  # not over a transport: published as before
            publication.local.append((self.name, lambda: self.bus.send(message)))
            return
        if self.local_first is None:
            publication.messages.append(self.encoder.encode(message.copy()))
            return
        copy, hand_off = self.local_first.outbox_copy(message)
        publication.messages.append(self.encoder.encode(copy))
        if hand_off:
            local_first = self.local_first
            publication.local.append((self.name, lambda: local_first.send_outboxed(message)))


class OutboxPublisher:
    """The kernel's publication through ``outbox``; see the module docstring.

    ``domain_event_bus`` and ``state_event_bus`` are the kernel's buses (decorated or
    not); ``unwrap`` takes a decorated bus to the bus under its decorators (the runtime
    passes ``wow_core.middleware.undecorated``).
    """

    def __init__(
        self,
        outbox: TransactionalOutbox,
        domain_event_bus: Any = None,
        state_event_bus: Any = None,
        *,
        unwrap: Callable[[Any], Any] = lambda bus: bus,
    ) -> None:
        self.outbox = outbox
        self._routes: list[tuple[str, _Route]] = []
        if domain_event_bus is not None:
            self._routes.append(("event", _Route("event", domain_event_bus, unwrap)))
        if state_event_bus is not None:
            self._routes.append(("state", _Route("state", state_event_bus, unwrap)))

    def prepare(self, stream: DomainEventStream, state: Any) -> OutboxedPublication:
        """The messages of ``stream`` (and of its state event) for the outbox, and the
        local steps that follow the commit."""
        publication = OutboxedPublication([])
        for kind, route in self._routes:
            message: Message = (
                stream
                if kind == "event"
                else StateEvent(stream=stream, state=state, create_time=stream.create_time)
            )
            route.prepare(message, publication)
        return publication

    async def append(self, stream: DomainEventStream, state: Any) -> OutboxedPublication:
        """Append ``stream`` with its messages in one transaction; raises as the store's append."""
        publication = self.prepare(stream, state)
        await self.outbox.append(stream, publication.messages)
        return publication
