"""Test doubles for the dispatch tests: a bus of queues, a keyed executor, a recorder.

The account's commands and events come from :mod:`tests.accounts`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wow_core.event.failure import ProcessingFailure, ProcessingSuccess, RecordResult
from wow_core.event.notifier import ProcessingSignal
from wow_core.messaging.contract import (
    EventStreamExchange,
    MessageSubscription,
    SimpleExchange,
    StateEventExchange,
)
from wow_core.model import (
    AggregateId,
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    NamedAggregate,
    StateEvent,
    TopicKind,
)

TRANSFER = NamedAggregate("bank", "transfer")
CUSTOMER = NamedAggregate("crm", "customer")


@dataclass(frozen=True)
class Registered:
    name: str


def stream(
    aggregate: NamedAggregate,
    agg_id: str,
    version: int,
    *bodies: object,
    header: dict[str, str] | None = None,
) -> DomainEventStream:
    aid = AggregateId(aggregate, agg_id)
    events = tuple(
        DomainEvent(aid, body, type(body).__name__, version, sequence=i + 1, is_last=i == len(bodies) - 1)
        for i, body in enumerate(bodies)
    )
    s = DomainEventStream(
        aid, version, events, command_id=f"cmd-{agg_id}-{version}", request_id=f"req-{agg_id}-{version}"
    )
    if header:
        s.header.update(header)
    return s


class QueueReceiver:
    """A receiver over an asyncio queue; records acks and releases."""

    def __init__(self, bus: QueueBus, subscription: MessageSubscription) -> None:
        self.bus = bus
        self.subscription = subscription
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.opened = False
        self.is_ready = False
        self.closed = False
        self._in_flight = 0
        self._settled = asyncio.Event()
        self._stop = asyncio.Event()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        assert self.opened, "iterated before open_processing"
        while not self._stop.is_set():
            getter = asyncio.ensure_future(self.queue.get())
            stopper = asyncio.ensure_future(self._stop.wait())
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                stopper.cancel()
                return
            stopper.cancel()
            message = getter.result()
            self._in_flight += 1
            self._settled.clear()
            exchange_type = (
                EventStreamExchange if message.topic_kind is TopicKind.EVENT else StateEventExchange
            )
            exchange = exchange_type(message, self._acker(message), self._on_settle)
            self.bus.exchanges.append(exchange)
            yield exchange

    def _acker(self, message: Any) -> Callable[[], Awaitable[None]]:
        async def ack() -> None:
            if self.bus.fail_ack:
                raise ConnectionError("ack refused")
            self.bus.acked.append(message)

        return ack

    def _on_settle(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._settled.set()

    async def ready(self) -> None:
        self.is_ready = True

    @property
    def processing_open(self) -> bool:
        return self.opened

    def open_processing(self) -> None:
        assert self.is_ready, "processing opened before ready"
        self.opened = True

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def quiesce(self, timeout: float | None = None) -> bool:
        self._stop.set()
        if self._in_flight == 0:
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self.closed = True
        self._stop.set()


class QueueBus:
    """A bus that routes a message to every receiver subscribed to its aggregate."""

    def __init__(self, topic_kind: TopicKind) -> None:
        self.topic_kind = topic_kind
        self.receivers: list[QueueReceiver] = []
        self.exchanges: list[SimpleExchange[Any]] = []
        self.acked: list[Any] = []
        self.fail_ack = False

    def receiver(self, subscription: MessageSubscription) -> QueueReceiver:
        receiver = QueueReceiver(self, subscription)
        self.receivers.append(receiver)
        return receiver

    async def send(self, message: Any) -> None:
        for receiver in self.receivers:
            if message.aggregate_id.named_aggregate in receiver.subscription.named_aggregates:
                receiver.queue.put_nowait(message)

    async def close(self) -> None:
        for receiver in self.receivers:
            await receiver.close()

    def released_unacked(self) -> list[Any]:
        return [e.message for e in self.exchanges if not e.acked and e._settled]

    def settled(self) -> int:
        return sum(1 for e in self.exchanges if e._settled)


@dataclass
class RecordingNotifier:
    signals: list[ProcessingSignal] = field(default_factory=list)
    event: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self, signal: ProcessingSignal) -> None:
        self.signals.append(signal)
        self.event.set()


@dataclass
class ScriptedRecorder:
    """A recorder whose answer to a failure is scripted (a result or an error)."""

    answer: RecordResult | Exception = RecordResult.RECORDED
    fail_times: int = 10**9
    records_failures: bool = True
    failures: list[ProcessingFailure] = field(default_factory=list)
    successes: list[ProcessingSuccess] = field(default_factory=list)
    calls: int = 0

    async def record_failure(self, failure: ProcessingFailure) -> RecordResult:
        self.calls += 1
        if isinstance(self.answer, Exception) and self.calls <= self.fail_times:
            raise self.answer
        self.failures.append(failure)
        if isinstance(self.answer, Exception):
            return RecordResult.RECORDED
        if self.answer is RecordResult.RECORDED and not failure.retry_enabled:
            return RecordResult.WAIVED
        return self.answer

    async def record_success(self, success: ProcessingSuccess) -> None:
        self.successes.append(success)


@dataclass
class RecordingSender:
    commands: list[CommandMessage[Any]] = field(default_factory=list)
    fail: Exception | None = None

    async def send(self, command: CommandMessage[Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.commands.append(command)


async def no_sleep(delay: float) -> None:
    await asyncio.sleep(0)


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition each loop turn, up to ``timeout`` (no fixed sleep)."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - plain state, no event to await
            await asyncio.sleep(0.001)


def state_event(s: DomainEventStream, state: object) -> StateEvent[Any]:
    return StateEvent(s, state)


def names(items: Sequence[Any]) -> list[str]:
    return [type(i).__name__ for i in items]
