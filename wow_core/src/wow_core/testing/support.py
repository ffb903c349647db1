"""Helpers of the conformance suites, usable in any test: waiting, messages, a rig.

Nothing here sleeps for a fixed time: every wait is on a condition, bounded by a
timeout, and fails with a message that says what did not happen.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from wow_core.messaging.contract import MessageBus, MessageReceiver
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware.metrics import MetricDecodeFailureHandler
from wow_core.model import (
    AggregateId,
    BodyTypeRegistry,
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    Header,
    Message,
    MessageCodec,
    NamedAggregate,
    StateEvent,
    TopicKind,
)
from wow_core.transport.bus import (
    TransportCommandBus,
    TransportDomainEventBus,
    TransportMessageBus,
    TransportStateEventBus,
)
from wow_core.transport.decode_failure import (
    DecodeFailure,
    DecodeFailureAction,
    DefaultDecodeFailureHandler,
    TransportDecodeFailureHandler,
)
from wow_core.transport.spi import Transport, TransportReceiver, TransportRecord

T = TypeVar("T")
R_co = TypeVar("R_co", bound=TransportReceiver, covariant=True)

TransportFactory = Callable[[], "Transport | Awaitable[Transport]"]
"""What ``wow_transport_factory`` returns: a fresh transport per call (sync or async)."""


class ConformanceTimeout(AssertionError):
    """A condition of the conformance suite did not hold in time."""


async def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until ``predicate()`` holds, checking after every loop iteration.

    For state that changes without an event to wait on (a counter, a task set). Fails
    with :class:`ConformanceTimeout` naming ``what`` after ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.0
    while not predicate():
        if loop.time() >= deadline:
            raise ConformanceTimeout(f"timed out after {timeout}s waiting until {what}")
        # Back off from yielding to short waits: a condition check, not a fixed sleep.
        await asyncio.sleep(delay)
        delay = min(0.05, delay * 2 or 0.001)


async def eventually(
    check: Callable[[], Awaitable[bool]],
    timeout: float = 10.0,
    what: str = "the condition to hold",
    every: float = 0.02,
) -> None:
    """Await ``check()`` every ``every`` seconds until it is true.

    For state only a query shows (a broker's pending list, a stream's length). Fails
    with :class:`ConformanceTimeout` naming ``what`` after ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() >= deadline:
            raise ConformanceTimeout(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


class OpensReceivers(Protocol[R_co]):
    """What :func:`opened` needs of a transport: ``open(group, topics)``."""

    def open(self, group: str, topics: Sequence[str], /) -> R_co: ...


async def opened(
    transport: OpensReceivers[R_co], group: str, topics: Iterable[str], timeout: float = 10.0
) -> R_co:
    """A receiver of ``group`` on ``topics``: ready (within ``timeout``), processing open."""
    receiver = transport.open(group, list(topics))
    await within(receiver.ready(), timeout, f"receiver of {group} to be ready")
    receiver.open_processing()
    return receiver


async def within(awaitable: Awaitable[T], timeout: float, what: str) -> T:
    """Await ``awaitable`` for at most ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            return await awaitable
    except TimeoutError:
        raise ConformanceTimeout(f"timed out after {timeout}s waiting for {what}") from None


@dataclass
class Note:
    """The body of every conformance message."""

    __wow_type__ = "wow.conformance.Note"

    text: str
    n: int = 0


@dataclass
class Balance:
    """The state of conformance state events."""

    __wow_type__ = "wow.conformance.Balance"

    amount: int


def conformance_codec() -> MessageCodec:
    return MessageCodec(BodyTypeRegistry([Note, Balance]))


def command(
    named: NamedAggregate, aggregate_id: str, n: int = 0, text: str = "", header: dict[str, str] | None = None
) -> CommandMessage[Note]:
    return CommandMessage(
        AggregateId(named, aggregate_id),
        Note(text or f"{aggregate_id}#{n}", n),
        "note",
        header=Header(header),
    )


def event_stream(
    named: NamedAggregate, aggregate_id: str, n: int = 1, text: str = "", header: dict[str, str] | None = None
) -> DomainEventStream:
    target = AggregateId(named, aggregate_id)
    event = DomainEvent(target, Note(text or f"{aggregate_id}#{n}", n), "noted", n)
    return DomainEventStream(target, n, (event,), f"c-{n}", f"r-{n}", header=Header(header))


def state_event(
    named: NamedAggregate, aggregate_id: str, n: int = 1, text: str = "", header: dict[str, str] | None = None
) -> StateEvent[Balance]:
    return StateEvent(event_stream(named, aggregate_id, n, text), Balance(n), header=Header(header))


def message_of(
    kind: TopicKind,
    named: NamedAggregate,
    aggregate_id: str,
    n: int = 0,
    text: str = "",
    header: dict[str, str] | None = None,
) -> Message:
    """A message of ``kind`` whose ordinal is ``n`` (read back with :func:`ordinal`)."""
    if kind is TopicKind.COMMAND:
        return command(named, aggregate_id, n, text, header)
    if kind is TopicKind.EVENT:
        return event_stream(named, aggregate_id, n + 1, text, header)
    return state_event(named, aggregate_id, n + 1, text, header)


def note_of(message: Message) -> Note:
    if isinstance(message, CommandMessage):
        body = message.body
    elif isinstance(message, DomainEventStream):
        body = message.events[0].body
    elif isinstance(message, StateEvent):
        body = message.stream.events[0].body
    else:  # pragma: no cover - the suites send only these
        raise TypeError(type(message).__name__)
    assert isinstance(body, Note)
    return body


def ordinal(message: Message) -> int:
    return note_of(message).n


class RecordingDecodeFailureHandler:
    """A handler (the default one, counted) remembering every failure it saw."""

    def __init__(self, inner: TransportDecodeFailureHandler) -> None:
        self.inner = inner
        self.failures: list[DecodeFailure] = []
        self.actions: list[DecodeFailureAction] = []
        self.changed = asyncio.Event()

    async def handle(self, failure: DecodeFailure, transport: Transport) -> DecodeFailureAction:
        action = await self.inner.handle(failure, transport)
        self.failures.append(failure)
        self.actions.append(action)
        self.changed.set()
        return action


class BusFactory(Protocol):
    """Builds the buses the :class:`~wow_core.testing.MessageBusConformance` suite runs on."""

    async def bus(self, kind: TopicKind, rig: Rig) -> MessageBus[Any, Any]:
        """A new bus of ``kind`` (each call a new one: a new "process")."""
        ...

    async def close(self) -> None:
        """Release what the buses used (called after the buses were closed)."""
        ...


_BUS_TYPES: dict[TopicKind, type[TransportMessageBus[Any, Any]]] = {
    TopicKind.COMMAND: TransportCommandBus,
    TopicKind.EVENT: TransportDomainEventBus,
    TopicKind.STATE: TransportStateEventBus,
}


class TransportBusFactory:
    """The default :class:`BusFactory`: ``Transport*Bus`` over the rig's transports."""

    async def bus(self, kind: TopicKind, rig: Rig) -> MessageBus[Any, Any]:
        return rig.transport_bus(await rig.transport(), kind)

    async def close(self) -> None:
        pass


class InMemoryBusFactory:
    """A :class:`BusFactory` of the in-memory (local) buses."""

    async def bus(self, kind: TopicKind, rig: Rig) -> MessageBus[Any, Any]:
        from wow_core.messaging.in_memory import (
            InMemoryCommandBus,
            InMemoryDomainEventBus,
            InMemoryStateEventBus,
        )

        types: dict[TopicKind, type[Any]] = {
            TopicKind.COMMAND: InMemoryCommandBus,
            TopicKind.EVENT: InMemoryDomainEventBus,
            TopicKind.STATE: InMemoryStateEventBus,
        }
        bus: MessageBus[Any, Any] = types[kind]()
        rig.buses.append(bus)
        return bus

    async def close(self) -> None:
        pass


@dataclass
class Rig:
    """What one conformance test works with; closes everything it handed out.

    Names are unique per test: every topic is under the bounded context
    :attr:`context` (``wow_conformance_context``) and every group starts with it.
    """

    transport_factory: TransportFactory
    timeout: float
    context: str
    codec: MessageCodec = field(default_factory=conformance_codec)
    metrics: InMemoryMetrics = field(default_factory=InMemoryMetrics)
    transports: list[Transport] = field(default_factory=list)
    buses: list[Any] = field(default_factory=list)
    receivers: list[Any] = field(default_factory=list)
    collectors: list[Collector] = field(default_factory=list)
    finalizers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def named(self, aggregate: str = "note") -> NamedAggregate:
        return NamedAggregate(self.context, aggregate)

    def group(self, name: str = "processor") -> str:
        return f"{self.context}.{name}"

    @staticmethod
    def unique(prefix: str = "") -> str:
        return prefix + uuid.uuid4().hex[:10]

    async def transport(self) -> Transport:
        """A new, started transport from the factory; closed when the test ends."""
        made = self.transport_factory()
        transport: Transport = await made if inspect.isawaitable(made) else made
        self.transports.append(transport)
        await within(transport.start(), self.timeout, f"{transport.name} to start")
        return transport

    def transport_bus(
        self,
        transport: Transport,
        kind: TopicKind,
        handler: RecordingDecodeFailureHandler | None = None,
    ) -> TransportMessageBus[Any, Any]:
        """A plain transport bus (no middleware); its default decode-failure policy counts on
        :attr:`metrics` (decorated as the metrics middleware decorates it)."""
        bus = _BUS_TYPES[kind](
            transport,
            self.codec,
            decode_failure_handler=(
                handler if handler is not None else self._counted(DefaultDecodeFailureHandler())
            ),
        )
        self.buses.append(bus)
        return bus

    def recording_handler(self) -> RecordingDecodeFailureHandler:
        return RecordingDecodeFailureHandler(self._counted(DefaultDecodeFailureHandler()))

    def _counted(self, handler: DefaultDecodeFailureHandler) -> MetricDecodeFailureHandler:
        return MetricDecodeFailureHandler(handler, self.metrics)

    def track(self, receiver: T) -> T:
        self.receivers.append(receiver)
        return receiver

    async def open(self, transport: Transport, group: str, topics: Iterable[str]) -> TransportReceiver:
        """A ready transport receiver, processing open."""
        receiver = self.track(transport.open(group, list(topics)))
        await within(receiver.ready(), self.timeout, f"receiver of {group} to be ready")
        receiver.open_processing()
        return receiver

    async def subscribe(self, bus: MessageBus[Any, Any], subscription: Any) -> MessageReceiver[Any]:
        """A ready bus receiver, processing open."""
        receiver = self.track(bus.receiver(subscription))
        await within(receiver.ready(), self.timeout, f"receiver of {subscription.group} to be ready")
        receiver.open_processing()
        return receiver

    async def take(self, source: AsyncIterable[T], count: int, what: str = "") -> list[T]:
        """The next ``count`` items of ``source`` (a receiver), within the timeout."""
        items: list[T] = []
        iterator = aiter(source)

        async def pull() -> None:
            while len(items) < count:
                items.append(await anext(iterator))

        try:
            await within(pull(), self.timeout, what or f"{count} items")
        except StopAsyncIteration:
            raise AssertionError(f"the receiver ended after {len(items)} of {count} items") from None
        except ConformanceTimeout as error:
            raise ConformanceTimeout(f"{error} (got {len(items)} of {count})") from None
        return items

    async def take_until(
        self, source: AsyncIterable[T], done: Callable[[list[T]], bool], what: str, *, limit: int = 10_000
    ) -> list[T]:
        """Items of ``source`` until ``done(items_so_far)`` holds."""
        items: list[T] = []
        iterator = aiter(source)

        async def pull() -> None:
            while not done(items):
                if len(items) >= limit:
                    raise AssertionError(f"{what}: not done after {limit} items")
                items.append(await anext(iterator))

        try:
            await within(pull(), self.timeout, what)
        except StopAsyncIteration:
            raise AssertionError(f"the receiver ended before {what} (got {len(items)} items)") from None
        return items

    @staticmethod
    async def settle(rounds: int = 20) -> None:
        """Let every task that is ready run (yields to the loop; no timed wait)."""
        for _ in range(rounds):
            await asyncio.sleep(0)

    def consume(self, source: AsyncIterable[Any], *, ack: bool = True) -> Collector:
        """Collect everything ``source`` yields in a task (acking each item) until it ends."""
        collector = Collector(source, ack)
        self.collectors.append(collector)
        return collector

    async def aclose(self) -> None:
        for receiver in reversed(self.receivers):
            await within(receiver.close(), self.timeout, f"{receiver!r} to close")
        for collector in self.collectors:
            await collector.stop(self.timeout)
        for bus in reversed(self.buses):
            await within(bus.close(), self.timeout, f"{bus!r} to close")
        for transport in reversed(self.transports):
            await within(transport.close(), self.timeout, f"{transport.name} to close")
        for finalizer in reversed(self.finalizers):
            await within(finalizer(), self.timeout, "a finalizer")

    @staticmethod
    def record_text(record: TransportRecord) -> str:
        return record.payload


class Collector:
    """A task draining a receiver into :attr:`items`; it ends when the receiver ends."""

    def __init__(self, source: AsyncIterable[Any], ack: bool) -> None:
        self.items: list[Any] = []
        self.error: BaseException | None = None
        self._source = source
        self._ack = ack
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for item in self._source:
                self.items.append(item)
                if self._ack:
                    await item.ack()
                self._changed.set()
        except Exception as error:
            self.error = error
            self._changed.set()
            raise

    async def wait_for(self, predicate: Callable[[list[Any]], bool], timeout: float, what: str) -> None:
        """Wait until ``predicate(items)`` holds."""

        async def watch() -> None:
            while not predicate(self.items):
                if self.error is not None:
                    raise AssertionError(f"the consumer failed: {self.error!r}") from self.error
                if self.task.done():
                    raise AssertionError(f"the receiver ended before {what} (got {len(self.items)} items)")
                self._changed.clear()
                await self._changed.wait()

        self.task.add_done_callback(lambda _: self._changed.set())
        await within(watch(), timeout, what)

    async def stop(self, timeout: float) -> None:
        """Wait for the task to end (its receiver must have been closed) or cancel it."""
        if self.task.done():
            if not self.task.cancelled():
                self.task.exception()  # retrieved: the test saw it through wait_for
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except TimeoutError:
            self.task.cancel()
            raise ConformanceTimeout(
                f"a receiver's iteration did not end within {timeout}s of close"
            ) from None
        except Exception:
            pass


async def next_of(source: AsyncIterable[T]) -> T:
    """The next item of ``source`` (a coroutine, so it can become a task)."""
    return await anext(aiter(source))


async def ack_all(items: Iterable[Any]) -> None:
    for item in items:
        await item.ack()
