"""Aggregate event dispatchers (spec 003, "Composite Dispatcher" and "Acknowledgement").

An :class:`AbstractAggregateEventDispatcher` consumes one bus for the functions of one
:class:`FunctionKind`:

* It subscribes only to the named aggregates its functions support, with one receiver
  per bounded context of those aggregates (group ``<context>.<dispatcher name>``,
  runtime-owned). An aggregate with no function gets no receiver.
* Each received exchange runs on the :class:`~wow_core.executor.Executor` (the runtime's
  :class:`~wow_core.runtime.keyed_executor.KeyedExecutor`) under its aggregate id: one
  aggregate's messages serially within this dispatcher, different aggregates in
  parallel. Nothing is ordered across dispatchers, processes or external systems.
* The events of one stream are handled in order; the functions matching one event run
  concurrently, in no promised order.
* After all functions terminated, the source exchange is acknowledged, on success and on
  error, unless a function's outcome withholds acknowledgement (RECORDING_FAILED, or
  FAILURE_UNRECORDED with ``ack_on_unrecorded_failure`` off): then the other functions
  still run and the source is released unacknowledged (the backend redelivers it by its
  own rules; on Kafka the partition stops at it until a restart or rebalance). Under
  local-first a released local exchange rejects its admission, so its distributed copy
  goes out unmarked and the transport delivers it again: withholding holds there too.
* :meth:`~AbstractAggregateEventDispatcher.stop` first sets the dispatcher's
  :class:`~wow_core.event.stopping.StopSignal`: a function waiting in a retry backoff or
  for a saga's commands ends at once (``RELEASED``) and its source is released
  unacknowledged for redelivery; then the stop waits for the rest in flight.

:class:`CompositeEventDispatcher` pairs an :class:`EventStreamDispatcher` (EVENT
functions, ``DomainEventBus``) with a :class:`StateEventDispatcher` (STATE_EVENT
functions, ``StateEventBus``); :class:`DomainEventDispatcher`,
:class:`StatelessSagaDispatcher` and :class:`ProjectionDispatcher` are its three forms.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from wow_core.concurrency import start_task, together
from wow_core.event.compensation import CompensationTarget, InvalidCompensationHeaderError
from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import ProcessingOutcome
from wow_core.event.function import ComponentKind, FunctionKind, MessageFunction, MessageFunctionRegistrar
from wow_core.event.handler import EventFunctionHandler, Settled
from wow_core.event.observer import EventProcessingObserver
from wow_core.event.stopping import StopSignal
from wow_core.executor import Executor
from wow_core.messaging.contract import (
    EventStreamExchange,
    MessageBus,
    MessageExchange,
    MessageReceiver,
    MessageSubscription,
    StateEventExchange,
)
from wow_core.model import DomainEvent, DomainEventStream, NamedAggregate, StateEvent

logger = logging.getLogger("wow.event.dispatcher")

E = TypeVar("E", bound=MessageExchange[Any])


class AbstractAggregateEventDispatcher(Generic[E]):
    """One bus, one function kind, one receiver per bounded context. See the module doc.

    ``observer`` hears of every source message rejected without running a function
    (``on_rejected``); ``None`` calls nothing.
    """

    function_kind: FunctionKind

    def __init__(
        self,
        name: str,
        component: ComponentKind,
        functions: Sequence[MessageFunction],
        bus: MessageBus[Any, E],
        handler: EventFunctionHandler,
        executor: Executor,
        *,
        observer: EventProcessingObserver | None = None,
    ) -> None:
        for function in functions:
            if function.kind is not self.function_kind:
                raise ValueError(
                    f"{type(self).__name__} takes {self.function_kind.value} functions, not {function!r}"
                )
        self.name = name
        self.component = component
        self.functions = tuple(functions)
        self.bus = bus
        self.handler = handler
        self.executor = executor
        self.observer = observer
        self.topics: frozenset[NamedAggregate] = frozenset(
            t for f in self.functions for t in f.named_aggregates
        )
        self._receivers: list[MessageReceiver[E]] = []
        self._loops: list[asyncio.Task[None]] = []
        self._selection: dict[tuple[NamedAggregate, Hashable], tuple[MessageFunction, ...]] = {}
        self._running = False
        self._stop = StopSignal()
        # Lanes are per dispatcher: one aggregate is serial here, not across dispatchers.
        self._lane = f"{name}:{self.function_kind.value}"

    @property
    def label(self) -> str:
        """The name and what this dispatcher consumes, for the logs: the event and the
        state-event dispatchers of one component kind share their name (and so their group
        names), ``bank.ProjectionDispatcher (events)`` and ``bank.ProjectionDispatcher
        (state events)``."""
        consumed = "events" if self.function_kind is FunctionKind.EVENT else "state events"
        return f"{self.name} ({consumed})"

    # -- subscriptions ------------------------------------------------------------------

    def subscriptions(self) -> list[MessageSubscription]:
        """One runtime-owned subscription per bounded context of the supported topics."""
        by_context: dict[str, set[NamedAggregate]] = {}
        for topic in sorted(self.topics, key=str):
            by_context.setdefault(topic.context_name, set()).add(topic)
        return [
            MessageSubscription.of(f"{context}.{self.name}", aggregates, runtime_owned=True)
            for context, aggregates in by_context.items()
        ]

    @property
    def receivers(self) -> tuple[MessageReceiver[E], ...]:
        return tuple(self._receivers)

    async def prepare(self) -> None:
        """Open a receiver per bounded context and wait until they are ready, all at once
        (no processing)."""
        if self._receivers:
            return
        for subscription in self.subscriptions():
            self._receivers.append(self.bus.receiver(subscription))
        await together(receiver.ready() for receiver in self._receivers)

    async def start(self) -> None:
        """Prepare if not done yet, then open processing and consume."""
        if self._running:
            return
        await self.prepare()
        self._running = True
        if self._stop.is_set:
            self._stop = StopSignal()
        for receiver in self._receivers:
            receiver.open_processing()
            self._loops.append(asyncio.create_task(self._consume(receiver), name=f"{self.name}:{receiver!r}"))
        logger.info(
            "%s started: %s on %s",
            self.name,
            ", ".join(f.qualified_name for f in self.functions),
            ", ".join(s.group for s in self.subscriptions()),
        )

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop taking messages, let those in flight finish (up to ``timeout``), close.

        Functions that only wait (a retry backoff, a saga's commands) are not waited for:
        they end at once and their source is released for redelivery. Returns True when
        everything in flight settled before the receivers closed.
        """
        if not self._running:
            for receiver in self._receivers:  # prepared, never started
                await receiver.close()
            self._receivers.clear()
            return True
        self._running = False
        self._stop.set()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        settled = True
        for receiver in self._receivers:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            settled = await receiver.quiesce(left) and settled
        for consumer in self._loops:
            consumer.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        for receiver in self._receivers:
            await receiver.close()
        self._loops.clear()
        self._receivers.clear()
        return settled

    async def _consume(self, receiver: MessageReceiver[E]) -> None:
        executor = self.executor
        # Admit without awaiting when a slot is free (the runtime's KeyedExecutor can).
        submit_nowait: Callable[[Hashable, Callable[[], Awaitable[None]]], bool] | None = getattr(
            executor, "submit_nowait", None
        )
        try:
            async for exchange in receiver:
                key = (self._lane, exchange.message.aggregate_id)
                work = _bind(self.dispatch, exchange)
                try:
                    if submit_nowait is None or not submit_nowait(key, work):
                        await executor.submit(key, work)
                except BaseException:
                    exchange.release()  # not admitted: leave it to the backend's redelivery
                    raise
        except asyncio.CancelledError:
            raise
        except Exception:
            # A receiver is not supposed to fail; if it does, say so loudly: this receiver
            # takes no more messages until the runtime restarts.
            logger.exception("%s: consuming %r failed; it takes no more messages", self.name, receiver)

    # -- one source exchange ------------------------------------------------------------

    async def dispatch(self, exchange: E) -> None:
        """Run every selected function of ``exchange``; then acknowledge it (or withhold)."""
        withhold = released = False
        try:
            compensation = CompensationTarget.from_header(exchange.message.header)
        except InvalidCompensationHeaderError as error:
            logger.error("%s: %r rejected: %s", self.name, exchange, error)
            if self.observer is not None:
                self.observer.on_rejected(self.component.value, exchange, "header")
            await self._finish(exchange, withhold=False)
            return
        try:
            pairs = self.work(exchange.message, compensation)
            last_of = (
                dict.fromkeys(pairs[0][1], 0)
                if len(pairs) == 1
                else {function: index for index, (_, functions) in enumerate(pairs) for function in functions}
            )
            for index, (message, functions) in enumerate(pairs):
                settled = await self._run(exchange, message, functions, compensation, last_of, index)
                withhold = withhold or any(not item.acknowledges for item in settled)
                released = released or any(item.outcome is ProcessingOutcome.RELEASED for item in settled)
        except Exception:
            logger.exception("%s: dispatching %r failed", self.name, exchange)
            withhold = True
        await self._finish(exchange, withhold=withhold, released=released)

    def work(
        self, message: Any, compensation: CompensationTarget | None
    ) -> list[tuple[DomainEvent[Any] | StateEvent[Any], tuple[MessageFunction, ...]]]:
        """The (message, functions) pairs of one source message, in order."""
        raise NotImplementedError

    def _selected(
        self,
        topic: NamedAggregate,
        key: Any,
        bodies: Sequence[object],
        compensation: CompensationTarget | None,
    ) -> tuple[MessageFunction, ...]:
        cache_key = (topic, key)
        functions = self._selection.get(cache_key)
        if functions is None:
            functions = tuple(
                f
                for f in self.functions
                if f.supports_topic(topic) and any(f.supports_body(body) for body in bodies)
            )
            self._selection[cache_key] = functions
        if compensation is not None:
            functions = tuple(f for f in functions if f.matches_target(compensation))
        return functions

    async def _run(
        self,
        source: E,
        message: DomainEvent[Any] | StateEvent[Any],
        functions: tuple[MessageFunction, ...],
        compensation: CompensationTarget | None,
        last_of: dict[MessageFunction, int],
        index: int,
    ) -> list[Settled]:
        handle = self.handler.handle
        component = self.component
        stop = self._stop
        if len(functions) == 1:
            function = functions[0]
            exchange = FunctionExchange(
                component, source, message, function, compensation, last=last_of[function] == index, stop=stop
            )
            return [await handle(exchange)]
        # The first function runs in this task, the others as tasks: all run concurrently
        # (each starts while another waits), and one task per event is saved.
        exchanges = [
            FunctionExchange(component, source, message, f, compensation, last=last_of[f] == index, stop=stop)
            for f in functions
        ]
        # On Python 3.12+ eager tasks: a function that does not wait costs no scheduling
        # round trip (on 3.11 ordinary tasks, cheaper there than a backport: start_task).
        others = [start_task(handle(exchange)) for exchange in exchanges[1:]]
        try:
            settled = [await handle(exchanges[0])]
            # Every task is already running; awaiting them in turn only collects the
            # outcomes (cheaper than gather's bookkeeping).
            for task in others:
                settled.append(await task)
        except BaseException:
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            raise
        return settled

    async def _finish(self, exchange: E, *, withhold: bool, released: bool = False) -> None:
        """Acknowledge the source, or release it when an outcome withholds acknowledgement.

        A source a function already acknowledged itself (the snapshot function acknowledges
        its own state event) cannot be withheld any more: the log says it was acknowledged
        and will not be delivered again, rather than "left unacknowledged".
        """
        if withhold:
            if exchange.acked:
                logger.warning(
                    "%s: %r was acknowledged by its function already (the snapshot function "
                    "acknowledges its own state event), although a function outcome withholds "
                    "acknowledgement: it will not be delivered again",
                    self.name,
                    exchange,
                )
                return
            if released:
                logger.info("%s: %r released unacknowledged for redelivery (stopping)", self.name, exchange)
            else:
                logger.warning(
                    "%s: %r left unacknowledged (a function outcome withholds it)", self.name, exchange
                )
            exchange.release()
            return
        try:
            await exchange.ack()
        except Exception:
            logger.exception("%s: acknowledging %r failed", self.name, exchange)
            exchange.release()


def _bind(dispatch: Callable[[E], Awaitable[None]], exchange: E) -> Callable[[], Awaitable[None]]:
    def work() -> Awaitable[None]:
        return dispatch(exchange)

    return work


class EventStreamDispatcher(AbstractAggregateEventDispatcher[EventStreamExchange]):
    """``FunctionKind.EVENT`` functions on the ``DomainEventBus``; one call per matching event."""

    function_kind = FunctionKind.EVENT

    def work(
        self, message: Any, compensation: CompensationTarget | None
    ) -> list[tuple[DomainEvent[Any] | StateEvent[Any], tuple[MessageFunction, ...]]]:
        stream: DomainEventStream = message
        topic = stream.aggregate_id.named_aggregate
        pairs: list[tuple[DomainEvent[Any] | StateEvent[Any], tuple[MessageFunction, ...]]] = []
        for event in stream.events:
            body = event.body
            functions = self._selected(topic, type(body), (body,), compensation)
            if functions:
                pairs.append((event, functions))
        return pairs


class StateEventDispatcher(AbstractAggregateEventDispatcher[StateEventExchange]):
    """``FunctionKind.STATE_EVENT`` functions on the ``StateEventBus``.

    A function runs once per state event when the stream holds an event of a body type it
    supports (``object``: every state event).
    """

    function_kind = FunctionKind.STATE_EVENT

    def work(
        self, message: Any, compensation: CompensationTarget | None
    ) -> list[tuple[DomainEvent[Any] | StateEvent[Any], tuple[MessageFunction, ...]]]:
        state_event: StateEvent[Any] = message
        bodies = [event.body for event in state_event.stream.events]
        functions = self._selected(
            state_event.aggregate_id.named_aggregate, tuple(type(b) for b in bodies), bodies, compensation
        )
        return [(state_event, functions)] if functions else []


class CompositeEventDispatcher:
    """An EVENT and a STATE_EVENT dispatcher over one component's registrar.

    A child exists only when the registrar holds functions of its kind.
    """

    component: ComponentKind

    def __init__(
        self,
        name: str,
        registrar: MessageFunctionRegistrar,
        *,
        domain_event_bus: MessageBus[DomainEventStream, EventStreamExchange],
        state_event_bus: MessageBus[StateEvent[Any], StateEventExchange],
        handler: EventFunctionHandler,
        executor: Executor,
        observer: EventProcessingObserver | None = None,
    ) -> None:
        if registrar.component is not self.component:
            raise ValueError(f"{type(self).__name__} takes {self.component.value} functions")
        self.name = name
        self.registrar = registrar
        event_functions = registrar.of_kind(FunctionKind.EVENT)
        state_functions = registrar.of_kind(FunctionKind.STATE_EVENT)
        self.event_stream_dispatcher = (
            EventStreamDispatcher(
                name, self.component, event_functions, domain_event_bus, handler, executor, observer=observer
            )
            if event_functions
            else None
        )
        self.state_event_dispatcher = (
            StateEventDispatcher(
                name, self.component, state_functions, state_event_bus, handler, executor, observer=observer
            )
            if state_functions
            else None
        )

    @property
    def children(self) -> list[AbstractAggregateEventDispatcher[Any]]:
        return [d for d in (self.event_stream_dispatcher, self.state_event_dispatcher) if d is not None]

    async def prepare(self) -> None:
        await together(child.prepare() for child in self.children)

    async def start(self) -> None:
        for child in self.children:
            await child.start()

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop both children at once: ``timeout`` bounds the whole stop, not each child
        (one after the other, a stop could take twice the runtime's shutdown budget)."""
        results = await asyncio.gather(*(child.stop(timeout) for child in self.children))
        return all(results)


class DomainEventDispatcher(CompositeEventDispatcher):
    """Event processors; signals EVENT_HANDLED."""

    component = ComponentKind.EVENT_PROCESSOR


class StatelessSagaDispatcher(CompositeEventDispatcher):
    """Stateless sagas; signals SAGA_HANDLED; the functions' commands go through the gateway."""

    component = ComponentKind.STATELESS_SAGA


class ProjectionDispatcher(CompositeEventDispatcher):
    """Projections; signals PROJECTED."""

    component = ComponentKind.PROJECTION
