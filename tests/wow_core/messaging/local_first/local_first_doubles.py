"""Test doubles for local-first: a local bus whose admissions the test decides, a
distributed bus that records what reached it, and a queue receiver."""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from wow_core.messaging.contract import (
    HandOffReceipt,
    MessageSubscription,
    ServerCommandExchange,
    SimpleExchange,
)
from wow_core.metrics import metrics_source
from wow_core.model import AggregateId, CommandMessage, Header, NamedAggregate, TopicKind

ORDERS = NamedAggregate("shop", "order")
CARTS = NamedAggregate("shop", "cart")

request_var: contextvars.ContextVar[str] = contextvars.ContextVar("test_request", default="")


def command(aggregate: str = "a1", named: NamedAggregate = ORDERS, **kwargs: Any) -> CommandMessage[Any]:
    return CommandMessage(AggregateId(named, aggregate), {"n": kwargs.pop("n", 0)}, "Do", **kwargs)


class QueueReceiver:
    """A receiver over an asyncio queue; cancelling a pending ``__anext__`` loses nothing."""

    def __init__(self, subscription: MessageSubscription) -> None:
        self.subscription = subscription
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.is_ready = asyncio.Event()
        self._open = False
        self.closed = False
        self.acked: list[str] = []
        self.pulled: list[str] = []
        self.on_pull: Callable[[Any], None] | None = None
        self._in_flight = 0

    def put(self, message: Any) -> SimpleExchange[Any]:
        async def on_ack() -> None:
            self.acked.append(message.id)

        def on_settle() -> None:
            self._in_flight -= 1

        exchange: SimpleExchange[Any] = ServerCommandExchange(message, on_ack, on_settle)
        self.queue.put_nowait(exchange)
        return exchange

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self.closed:
            raise StopAsyncIteration
        exchange = await self.queue.get()
        if exchange is None:
            raise StopAsyncIteration
        self._in_flight += 1
        self.pulled.append(exchange.message.id)
        if self.on_pull is not None:
            self.on_pull(exchange)
        return exchange

    async def ready(self) -> None:
        self.is_ready.set()

    @property
    def processing_open(self) -> bool:
        return self._open

    def open_processing(self) -> None:
        self._open = True

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def quiesce(self, timeout: float | None = None) -> bool:
        return self._in_flight == 0

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class WatchableQueueReceiver(QueueReceiver):
    """A queue receiver that tells when a pull would not wait (``call_when_pullable``)."""

    def __init__(self, subscription: MessageSubscription) -> None:
        super().__init__(subscription)
        self.watchers: list[Callable[[], None]] = []

    def _notify(self) -> None:
        if self.closed or not self.queue.empty():
            watchers, self.watchers = self.watchers, []
            for callback in watchers:
                callback()

    def call_when_pullable(self, callback: Callable[[], None]) -> None:
        if callback not in self.watchers:
            self.watchers.append(callback)
        self._notify()

    def put(self, message: Any) -> SimpleExchange[Any]:
        exchange = super().put(message)
        self._notify()
        return exchange

    async def close(self) -> None:
        await super().close()
        self._notify()


@dataclass
class Delivery:
    message: CommandMessage[Any]
    admission: asyncio.Future[bool]
    decided: bool | None = None


@dataclass
class Route:
    open: bool = True
    mode: str = "accept"  # accept | refuse | raise
    pending: list[Delivery] = field(default_factory=list)


class ControlledLocalBus:
    """A ``LocalMessageBus`` whose hand-offs and admissions the test decides.

    Per named aggregate a route: ``accept`` hands off (the admission stays pending until
    :meth:`admit`/:meth:`reject`/:meth:`fail`), ``refuse`` refuses, ``raise`` raises.
    :meth:`close_route` rejects every pending admission of the route, then refuses.
    """

    topic_kind = TopicKind.COMMAND

    def __init__(self) -> None:
        self.routes: dict[NamedAggregate, Route] = {}
        self.deliveries: list[Delivery] = []
        self.receivers: list[QueueReceiver] = []
        self.closed = False
        self.hand_off_calls = 0

    def route(self, named: NamedAggregate) -> Route:
        return self.routes.setdefault(named, Route())

    def subscriber_count(self, named_aggregate: NamedAggregate) -> int:
        route = self.routes.get(named_aggregate)
        return 1 if route is not None and route.open and route.mode == "accept" else 0

    def hand_off(self, message: CommandMessage[Any]) -> HandOffReceipt:
        self.hand_off_calls += 1
        route = self.route(message.aggregate_id.named_aggregate)
        if route.mode == "raise":
            raise RuntimeError("sink terminated")
        if self.closed or not route.open or route.mode == "refuse":
            return HandOffReceipt.refused("no routable receiver")
        message.with_read_only()
        admission: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        delivery = Delivery(message, admission)
        self.deliveries.append(delivery)
        route.pending.append(delivery)
        for receiver in self.receivers:
            if message.aggregate_id.named_aggregate in receiver.subscription.named_aggregates:
                receiver.put(message)
        return HandOffReceipt(True, admission, receivers=1)

    def _decide(self, delivery: Delivery, value: bool | BaseException) -> None:
        if delivery.admission.done():
            return
        route = self.route(delivery.message.aggregate_id.named_aggregate)
        if delivery in route.pending:
            route.pending.remove(delivery)
        if isinstance(value, BaseException):
            delivery.decided = False
            delivery.admission.set_exception(value)
        else:
            delivery.decided = value
            delivery.admission.set_result(value)

    def admit(self, delivery: Delivery) -> None:
        self._decide(delivery, True)

    def reject(self, delivery: Delivery) -> None:
        self._decide(delivery, False)

    def fail(self, delivery: Delivery, error: BaseException | None = None) -> None:
        self._decide(delivery, error or RuntimeError("receiver failed"))

    def close_route(self, named: NamedAggregate) -> None:
        route = self.route(named)
        route.open = False
        for delivery in list(route.pending):
            self.reject(delivery)

    def pending(self) -> list[Delivery]:
        return [d for d in self.deliveries if not d.admission.done()]

    async def send(self, message: CommandMessage[Any]) -> None:
        self.hand_off(message)

    def receiver(self, subscription: MessageSubscription) -> QueueReceiver:
        receiver = QueueReceiver(subscription)
        self.receivers.append(receiver)
        return receiver

    async def close(self) -> None:
        self.closed = True
        for named in list(self.routes):
            self.close_route(named)


@dataclass
class Arrival:
    message: CommandMessage[Any]
    local_first: str
    request: str
    source: str
    header: Header


class RecordingDistributedBus:
    """A distributed bus that records every send in call order.

    ``gate`` (message id -> event) holds a send until the event is set; ``failing``
    message ids fail; ``yields`` (message id -> n) makes the send yield n times, so
    concurrent sends would interleave if anything sent them concurrently.
    """

    topic_kind = TopicKind.COMMAND

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self.completed: list[str] = []
        self.failing: set[str] = set()
        self.gate: dict[str, asyncio.Event] = {}
        self.yields: dict[str, int] = {}
        self.in_send: dict[AggregateId, int] = {}
        self.overlaps = 0
        self.receivers: list[QueueReceiver] = []
        self.closed = False
        self.sent_event = asyncio.Event()

    async def send(self, message: CommandMessage[Any]) -> None:
        key = message.aggregate_id
        if self.in_send.get(key):
            self.overlaps += 1
        self.in_send[key] = self.in_send.get(key, 0) + 1
        try:
            self.arrivals.append(
                Arrival(
                    message,
                    message.header.get(Header.LOCAL_FIRST, ""),
                    request_var.get(),
                    metrics_source.get(),
                    message.header,
                )
            )
            for _ in range(self.yields.get(message.id, 0)):
                await asyncio.sleep(0)
            gate = self.gate.get(message.id)
            if gate is not None:
                await gate.wait()
            if message.id in self.failing:
                raise ConnectionError(f"broker refused {message.id}")
            message.with_read_only()
            self.completed.append(message.id)
            for receiver in self.receivers:
                if message.aggregate_id.named_aggregate in receiver.subscription.named_aggregates:
                    receiver.put(message)
            self.sent_event.set()
        finally:
            self.in_send[key] -= 1

    def marks(self) -> dict[str, str]:
        return {a.message.id: a.local_first for a in self.arrivals}

    def ids(self, aggregate: AggregateId | None = None) -> list[str]:
        return [
            a.message.id for a in self.arrivals if aggregate is None or a.message.aggregate_id == aggregate
        ]

    async def wait_for(self, count: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.completed) < count:
                self.sent_event.clear()
                await self.sent_event.wait()

    def receiver(self, subscription: MessageSubscription) -> QueueReceiver:
        receiver = QueueReceiver(subscription)
        self.receivers.append(receiver)
        return receiver

    async def close(self) -> None:
        self.closed = True


def pending_ids(queue: deque[Any]) -> list[str]:
    return [entry.message.id for entry in queue]
