"""The middleware layer: :class:`Middleware` and the decorator base classes it builds on.

Order: the first middleware of a list is the outermost decorator (its hooks run first
on the way in, last on the way out), like dramatiq's middleware list.

What a decorator guarantees: every member it does not override behaves exactly as the
decorated component's (attributes it does not define are read from the decorated
component). What it does not: a hook that raises makes the decorated call raise; a
``received`` hook that raises loses nothing (the exchange stays in flight on the
receiver) but the iteration raises, so hooks must not raise for an ordinary message.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wow_core.command.gateway import CommandGateway
from wow_core.command.stages import CommandResult, CommandWait, WaitPlan
from wow_core.event.handler import EventFunctionHandler
from wow_core.event.observer import EventProcessingObserver, combine_event_observers
from wow_core.eventsourcing.store import AppendedRequest, EventStore
from wow_core.messaging.contract import (
    HandOffReceipt,
    LocalMessageBus,
    MessageBus,
    MessageExchange,
    MessageReceiver,
    MessageSubscription,
)
from wow_core.messaging.local_first.observer import LocalFirstObserver, combine_observers
from wow_core.model import (
    AggregateId,
    CommandMessage,
    DomainEventStream,
    Message,
    NamedAggregate,
    TopicKind,
)
from wow_core.modeling.kernel import CommandKernel, CommandOutcome
from wow_core.transport.decode_failure import (
    DecodeFailure,
    DecodeFailureAction,
    TransportDecodeFailureHandler,
)

if TYPE_CHECKING:
    from wow_core.metrics import Metrics
    from wow_core.transport.settings import ProcessSettings
    from wow_core.transport.spi import Transport

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=MessageExchange[Any])
C = TypeVar("C")


class BusLayer(enum.Enum):
    """Which bus of the runtime's stack a ``decorate_bus`` call is given."""

    LOCAL = "local"
    """The in-process bus (in-memory); it can ``hand_off`` (a ``LocalMessageBus``)."""
    TRANSPORT = "transport"
    """A :class:`~wow_core.transport.bus.TransportMessageBus` over the selected transport."""
    LOCAL_FIRST = "local_first"
    """The local-first bus in front of the two (built from their decorated forms)."""


class Middleware:
    """Cross-cutting behaviour: one ``decorate_*`` hook per decorated component, and one
    ``observe_*`` hook per component whose decisions no decorator can see.

    Every ``decorate_*`` hook returns its argument by default and every ``observe_*`` hook
    ``None``, so a middleware overrides only what it decorates or observes and the runtime
    pays nothing for the rest. The container calls the hooks once per component, while it
    assembles the runtime.
    """

    def decorate_bus(self, bus: MessageBus[Any, Any], layer: BusLayer) -> MessageBus[Any, Any]:
        """The bus to use instead of ``bus`` (a :class:`MessageBusDecorator`, or ``bus``).

        A bus of the ``LOCAL`` layer must stay a ``LocalMessageBus`` (decorate it with a
        :class:`LocalMessageBusDecorator`).
        """
        return bus

    def decorate_gateway(self, gateway: CommandGateway) -> CommandGateway:
        """The gateway to use instead of ``gateway`` (a :class:`CommandGatewayDecorator`)."""
        return gateway

    def decorate_command_handler(self, handler: CommandKernel) -> CommandKernel:
        """The command handler to use instead of ``handler`` (a :class:`CommandHandlerDecorator`)."""
        return handler

    def decorate_event_store(self, store: EventStore) -> EventStore:
        """The event store to use instead of ``store`` (an :class:`EventStoreDecorator`)."""
        return store

    def decorate_decode_failure_handler(
        self, handler: TransportDecodeFailureHandler
    ) -> TransportDecodeFailureHandler:
        """The decode-failure policy every transport bus uses instead of ``handler`` (a
        :class:`DecodeFailureHandlerDecorator`): called once per transport bus."""
        return handler

    def decorate_event_handler(self, handler: EventFunctionHandler) -> EventFunctionHandler:
        """The handler each event function of one component runs through instead of
        ``handler`` (``handle(exchange) -> Settled``, which settles the outcome and never
        raises for a function error): called once per component kind of the app."""
        return handler

    def observe_local_first(self, kind: TopicKind) -> LocalFirstObserver | None:
        """An observer of the local-first bus of ``kind`` (its sends, copies, filtered
        copies, hand-off timeouts and backlog; see
        :mod:`wow_core.messaging.local_first.observer`), or ``None``."""
        return None

    def observe_event_processing(self) -> EventProcessingObserver | None:
        """An observer of the event dispatch pipeline (each function's settled outcome
        and its duration, each rejected message; see :mod:`wow_core.event.observer`), or
        ``None``."""
        return None


MiddlewareFactory = Callable[["ProcessSettings", "Metrics"], "Middleware | None"]
"""``factory(settings, metrics) -> Middleware | None`` (``None``: not active), the value
a plugin gives ``register(name, factory)`` in its ``register_middleware`` hook."""


def _fold(middleware: Sequence[Middleware], component: C, decorate: Callable[[Middleware, C], C]) -> C:
    for item in reversed(middleware):  # the first one ends up outermost
        component = decorate(item, component)
    return component


def decorate_bus(
    middleware: Sequence[Middleware], bus: MessageBus[Any, Any], layer: BusLayer
) -> MessageBus[Any, Any]:
    """``bus`` decorated by every middleware (the first outermost); ``bus`` itself for none."""
    return _fold(middleware, bus, lambda item, inner: item.decorate_bus(inner, layer))


def decorate_local_bus(middleware: Sequence[Middleware], bus: LocalMessageBus[M, E]) -> LocalMessageBus[M, E]:
    """``bus`` (layer ``LOCAL``) decorated by every middleware; each must keep it local."""
    decorated: Any = bus
    for item in reversed(middleware):
        decorated = item.decorate_bus(decorated, BusLayer.LOCAL)
        if not isinstance(decorated, LocalMessageBus):
            raise TypeError(
                f"{type(item).__name__}.decorate_bus turned a local bus into {type(decorated).__name__}, "
                "which cannot hand off: decorate local buses with a LocalMessageBusDecorator"
            )
    result: LocalMessageBus[M, E] = decorated
    return result


def decorate_gateway(middleware: Sequence[Middleware], gateway: CommandGateway) -> CommandGateway:
    return _fold(middleware, gateway, lambda item, inner: item.decorate_gateway(inner))


def decorate_command_handler(middleware: Sequence[Middleware], handler: CommandKernel) -> CommandKernel:
    return _fold(middleware, handler, lambda item, inner: item.decorate_command_handler(inner))


def decorate_event_store(middleware: Sequence[Middleware], store: EventStore) -> EventStore:
    return _fold(middleware, store, lambda item, inner: item.decorate_event_store(inner))


def decorate_decode_failure_handler(
    middleware: Sequence[Middleware], handler: TransportDecodeFailureHandler
) -> TransportDecodeFailureHandler:
    return _fold(middleware, handler, lambda item, inner: item.decorate_decode_failure_handler(inner))


def local_first_observer(middleware: Sequence[Middleware], kind: TopicKind) -> LocalFirstObserver | None:
    """What every middleware observes of the local-first bus of ``kind`` (the first
    middleware's observer called first); ``None`` when none observes it."""
    return combine_observers([item.observe_local_first(kind) for item in middleware])


def event_processing_observer(middleware: Sequence[Middleware]) -> EventProcessingObserver | None:
    """What every middleware observes of the event dispatch pipeline; ``None`` for none."""
    return combine_event_observers([item.observe_event_processing() for item in middleware])


def undecorated(component: Any) -> Any:
    """The component under every decorator of this module (``component`` if none)."""
    while isinstance(
        component,
        MessageBusDecorator
        | CommandGatewayDecorator
        | CommandHandlerDecorator
        | EventStoreDecorator
        | DecodeFailureHandlerDecorator,
    ):
        component = component.inner
    return component


# -- buses ------------------------------------------------------------------------------


class MessageBusDecorator(Generic[M, E]):
    """A bus that forwards to ``inner``; hooks: :meth:`send`, :meth:`received`.

    ``receiver`` hands back the inner receiver itself unless a subclass overrides
    :meth:`received`; then a receiver that takes the hook itself (``hook_received``: the
    in-memory one, once) calls it and is handed back, any other is wrapped in a
    :class:`MessageReceiverDecorator`, which
    keeps readiness, admission, in-flight counts, quiescence and close the inner
    receiver's. ``close`` takes what the inner ``close`` takes (a local-first bus's
    ``timeout``). Any other attribute (``transport``, ``copies``, ``bus_name``...) is
    the inner bus's.
    """

    def __init__(self, inner: MessageBus[M, E]) -> None:
        self.inner = inner
        self._wraps_receivers = type(self).received is not MessageBusDecorator.received

    @property
    def topic_kind(self) -> TopicKind:
        return self.inner.topic_kind

    async def send(self, message: M) -> None:
        """Hook: send ``message`` (forwards to the inner bus)."""
        await self.inner.send(message)

    def received(self, exchange: E, subscription: MessageSubscription) -> None:
        """Hook: ``exchange`` is about to reach the consumer of ``subscription``.

        Synchronous on purpose: nothing can be lost between the inner receiver handing
        the exchange over and the consumer getting it.
        """

    def receiver(self, subscription: MessageSubscription) -> MessageReceiver[E]:
        receiver = self.inner.receiver(subscription)
        if not self._wraps_receivers:
            return receiver
        hook = getattr(receiver, "hook_received", None)
        if hook is not None and hook(self.received):
            return receiver  # it calls the hook itself (the in-memory receiver)
        return MessageReceiverDecorator(receiver, subscription, self.received)

    async def close(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.close(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a half-built instance): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class LocalMessageBusDecorator(MessageBusDecorator[M, E]):
    """A decorator of a ``LocalMessageBus``; adds the hook :meth:`hand_off`.

    ``subscriber_count`` is the inner bus's; ``hand_off`` returns the inner bus's
    receipt (accepted, admission future, reason) unchanged unless overridden.
    """

    inner: LocalMessageBus[M, E]

    def __init__(self, inner: LocalMessageBus[M, E]) -> None:
        super().__init__(inner)

    def subscriber_count(self, named_aggregate: NamedAggregate) -> int:
        return self.inner.subscriber_count(named_aggregate)

    def hand_off(self, message: M) -> HandOffReceipt:
        """Hook: hand ``message`` to the local sinks (forwards to the inner bus)."""
        return self.inner.hand_off(message)


class MessageReceiverDecorator(Generic[E]):
    """A receiver that calls ``received(exchange, subscription)`` for each exchange it yields.

    Everything else is the inner receiver's, including the optional members other
    layers look for (``pending``, ``call_when_pullable``, ``transport_receiver``). A
    pending ``__anext__`` that is cancelled takes nothing (the hook runs only after the
    inner receiver returned, with no suspension between).
    """

    def __init__(
        self,
        inner: MessageReceiver[E],
        subscription: MessageSubscription,
        received: Callable[[E, MessageSubscription], None],
    ) -> None:
        self.inner = inner
        self.subscription = subscription
        self._received = received
        self._iterator: AsyncIterator[E] | None = None

    def __aiter__(self) -> AsyncIterator[E]:
        return self

    async def __anext__(self) -> E:
        iterator = self._iterator
        if iterator is None:
            iterator = self._iterator = self.inner.__aiter__()
        exchange = await iterator.__anext__()
        self._received(exchange, self.subscription)
        return exchange

    async def ready(self) -> None:
        await self.inner.ready()

    @property
    def processing_open(self) -> bool:
        return self.inner.processing_open

    def open_processing(self) -> None:
        self.inner.open_processing()

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight

    async def quiesce(self, timeout: float | None = None) -> bool:
        return await self.inner.quiesce(timeout)

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


# -- gateway, command handler, event store ----------------------------------------------


class CommandGatewayDecorator(CommandGateway):
    """A gateway that forwards to ``inner``; hooks: :meth:`send`, :meth:`send_and_wait`,
    :meth:`send_and_wait_stream`.

    ``send`` of the gateway is ``send_and_wait(command, CommandWait.sent())``: a
    decorator that overrides only :meth:`send_and_wait` sees every call.
    """

    __slots__ = ("inner",)

    def __init__(self, inner: CommandGateway) -> None:  # no super().__init__: all is inner's
        self.inner = inner

    @property
    def coordinator(self) -> Any:
        return self.inner.coordinator

    @property
    def default_timeout(self) -> float:
        return self.inner.default_timeout

    @default_timeout.setter
    def default_timeout(self, value: float) -> None:
        self.inner.default_timeout = value

    async def send(self, command: CommandMessage[Any]) -> CommandResult:
        """Hook: send and return the ``SENT`` result (calls this decorator's ``send_and_wait``)."""
        return await self.send_and_wait(command, CommandWait.sent())

    async def send_and_wait(
        self,
        command: CommandMessage[Any],
        wait: WaitPlan | None = None,
        *,
        timeout: float | None = None,
    ) -> CommandResult:
        """Hook: send ``command`` and wait for ``wait`` (forwards to the inner gateway)."""
        return await self.inner.send_and_wait(command, wait, timeout=timeout)

    def send_and_wait_stream(
        self,
        command: CommandMessage[Any],
        wait: WaitPlan | None = None,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[CommandResult]:
        """Hook: send ``command`` and yield each stage reached (forwards to the inner
        gateway's stream: closing this iterator closes the inner one)."""
        return self.inner.send_and_wait_stream(command, wait, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class CommandHandlerDecorator(CommandKernel):
    """A command handler that forwards to ``inner``; hooks: :meth:`process`, :meth:`dropped`.

    :meth:`process` returns the inner handler's :class:`~wow_core.modeling.CommandOutcome`
    (the business outcome: a success, a rejection and its code, a duplicate, the
    version conflicts met, the buses whose publication failed); a failure of the handler
    itself raises through it. Every other member is the inner handler's.
    """

    def __init__(self, inner: CommandKernel) -> None:  # no super().__init__: all is inner's
        self.inner = inner

    async def process(self, command: CommandMessage[Any]) -> CommandOutcome:
        """Hook: decide ``command`` (forwards to the inner handler)."""
        return await self.inner.process(command)

    def dropped(self, command: CommandMessage[Any]) -> None:
        """Hook: the dispatcher acknowledged the Void ``command`` without deciding it."""
        self.inner.dropped(command)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class EventStoreDecorator:
    """An event store that forwards to ``inner``; hooks: :meth:`append`, :meth:`load`.

    The append rules (version check, request-id de-duplication, nothing written on a
    conflict) are the inner store's; a decorator sees its exceptions as they are.
    """

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner

    async def append(self, stream: DomainEventStream) -> None:
        """Hook: append ``stream`` (forwards to the inner store)."""
        await self.inner.append(stream)

    async def load(
        self, aggregate_id: AggregateId, head_version: int = 1, tail_version: int | None = None
    ) -> list[DomainEventStream]:
        """Hook: load the streams of ``aggregate_id`` (forwards to the inner store)."""
        return await self.inner.load(aggregate_id, head_version, tail_version)

    async def last_version(self, aggregate_id: AggregateId) -> int:
        return await self.inner.last_version(aggregate_id)

    async def find_request(self, named_aggregate: NamedAggregate, request_id: str) -> AppendedRequest | None:
        return await self.inner.find_request(named_aggregate, request_id)

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class DecodeFailureHandlerDecorator:
    """A decode-failure policy that forwards to ``inner``; hook: :meth:`handle`.

    The action is the inner policy's; an exception of the inner policy raises through
    (the bus then leaves the record pending). A decorator runs inside the unit the bus
    keeps whole (policy, transport observer, acknowledgement): a cancellation of the
    receiver does not split it.
    """

    def __init__(self, inner: TransportDecodeFailureHandler) -> None:
        self.inner = inner

    async def handle(self, failure: DecodeFailure, transport: Transport) -> DecodeFailureAction:
        """Hook: decide what becomes of ``failure`` (forwards to the inner policy)."""
        return await self.inner.handle(failure, transport)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
