"""``OtelMiddleware``: metrics and tracing on the middleware layer of ``wow_core``.

One decorator per component records both (one wrapper per call, not two):

* **buses** (:class:`TracingMessageBus`, :class:`TracingLocalMessageBus`): per send
  ``messaging.client.sent.messages`` and ``messaging.client.operation.duration``
  (operation ``send``; ``hand_off`` on the local bus, counted when admitted), per
  exchange a receiver hands its consumer ``messaging.client.consumed.messages``. The bus
  a caller sends on (the local-first bus, or the transport bus when local-first is off,
  or the in-process bus) starts the producer span ``send <destination>`` of a command
  and injects its W3C trace context into the message header; an event or state event
  stream gets the current span's context (the ``process`` span that publishes it) and no
  span of its own unless ``event_send_spans``; the layers below add no span (a
  local-first copy carries the producer span's context, and restores it around its
  deferred send: :class:`~wow_otel.context.LocalFirstContextCapture`).
* **command handler** (:class:`TracingCommandHandler`): the consumer span
  ``process <destination>``, child of the producer span in the command's header, current
  while the kernel loads, decides, appends and publishes; ``messaging.process.duration``
  with ``wow.outcome``.
* **event store** (:class:`TracingEventStore`): the span ``append <aggregate>``;
  ``wow.eventstore.operation.duration`` (``append``, ``load``) with the outcome
  (``ok``, ``conflict``, ``duplicate``, ``error``) and ``wow.eventstore.conflicts``.
* **gateway** (:class:`TracingCommandGateway`): the waiting span ``wait <command>``
  around ``send_and_wait`` with the stages reached as span events (``SENT`` when the
  send completed, then the stage of the result); ``wow.command.waits`` and
  ``wow.command.wait.duration`` by stage waited for, stage reached and outcome.
* **event functions** (:class:`TracingEventHandler`): one consumer span per function and
  message, ``<component> <context>.<processor>.<function>``, child of the span in the
  source message's header (the ``process`` span of its command), with the settled
  outcome; ``messaging.process.duration``.

Durations go to :class:`~wow_otel.histograms.DurationHistogram` instruments (bucketed in
the process, exported by the SDK's readers as the SDK's histogram would); counts to
observable counters summed here. With metrics only, each decorator resolves the cell of a
count and the point of a duration once per attribute set and keeps them: a measured
operation is one ``perf_counter_ns`` pair, one lookup, an int addition and one bucket
update. The command handler decorator also counts the core's ``wow.command.*`` outcomes
(:class:`~wow_core.middleware.CommandOutcomeCounts`): the core's metrics middleware then
leaves the handler alone, one decorator frame per command. Spans go through
:func:`~wow_otel.lean.lean_tracer` (a recording span is the SDK's ``ReadableSpan``
the processors receive at its end, sampling decided once at the root; the SDK's tracer
itself when its pipeline needs it); the decorators pass every attribute in the start
call and set the rest in one call at the end. Below a root that was not sampled (a
``parentbased_*`` sampler) no span is started: the sends write the current trace context
into the header, the handler and the event functions make the header's context current
(:func:`_parent`), so the trace stays unsampled everywhere at the cost of its
propagation only. The current context goes through :mod:`wow_otel.current`.

Attributes are bounded: named aggregates, message and function names, groups, stages and
outcomes, never an aggregate or message id (ids go on spans only).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable, Iterable
from typing import Any, TypeVar

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer

from wow_core.command.errors import CommandValidationError, CommandWaitTimeoutError
from wow_core.command.gateway import CommandGateway
from wow_core.command.stages import CommandResult, CommandStage, WaitPlan
from wow_core.event.exchange import FunctionExchange
from wow_core.event.handler import EventFunctionHandler, Settled
from wow_core.eventsourcing.store import DuplicateRequestIdError, EventStore, EventVersionConflictError
from wow_core.messaging.contract import HandOffReceipt, MessageBus, MessageExchange, MessageSubscription
from wow_core.metrics import Metrics
from wow_core.middleware import (
    BusLayer,
    CommandGatewayDecorator,
    CommandHandlerDecorator,
    CommandOutcomeCounts,
    EventStoreDecorator,
    LocalMessageBusDecorator,
    MessageBusDecorator,
    MessageReceiverDecorator,
    Middleware,
    undecorated,
)
from wow_core.model import AggregateId, CommandMessage, DomainEventStream, Message, NamedAggregate, TopicKind
from wow_core.modeling.kernel import CommandKernel, CommandOutcome
from wow_core.transport.bus import TransportMessageBus
from wow_core.transport.defaults import DefaultTopicNaming, TopicNaming
from wow_otel import semconv as sc
from wow_otel.current import (
    attach,
    attach_span,
    current_span_context,
    detach,
    flags_of,
    is_valid_of,
)
from wow_otel.histograms import duration_histogram
from wow_otel.lean import LeanTracer, lean_tracer
from wow_otel.propagation import ROOT, Waiting, inject, remote_parent, waiting

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=MessageExchange[Any])
T = TypeVar("T")

Attributes = dict[str, Any]

_MAX_CACHED = 10_000
"""Attribute sets per decorator (bounded like the series themselves)."""


def _error_type(error: BaseException) -> str:
    return type(error).__qualname__


def _fail(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{_error_type(error)}: {error}"))
    span.set_attribute(sc.ERROR_TYPE, _error_type(error))


def _unsampled(context: SpanContext) -> bool:
    """Whether ``context`` is of a trace whose root was not sampled."""
    return is_valid_of(context) and not flags_of(context) & 1


def _parent(middleware: OtelMiddleware, message: Message) -> tuple[Any, bool]:
    """The context a consumer span of ``message`` starts in (its header's span context,
    else none) and whether no span needs starting there (a trace not sampled)."""
    found = remote_parent(message.header)
    if found is None:
        return ROOT, False
    return found[1], middleware.skips_unsampled and not flags_of(found[0]) & 1


_clock = time.perf_counter_ns
"""One reading before and one after each measured operation (nanoseconds)."""

_PAST_PROCESSED = frozenset(stage for stage in CommandStage if stage.rank > CommandStage.PROCESSED.rank)
"""The stages a wait reaches through the stream (the event stages, in parallel)."""

_SENT = CommandStage.SENT._value_
"""The ``SENT`` span event's name."""

_OVERFLOW: Attributes = {"otel.metric.overflow": True}
"""The attributes of every series past ``_MAX_CACHED`` of one decorator (the SDK's name)."""


class _Cache:
    """Attribute dicts by key, built once and kept for the process's life, so that an
    :class:`Accumulator` can count by the dict's identity. Past ``_MAX_CACHED`` keys,
    :data:`_OVERFLOW` (which bounds the series even if a name were unbounded)."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[Hashable, Attributes] = {}

    def find(self, key: Hashable) -> Attributes | None:
        """The dict of ``key`` if built (the hot path: no closure to make)."""
        return self._items.get(key)

    def get(self, key: Hashable, build: Callable[[], Attributes]) -> Attributes:
        found = self._items.get(key)
        if found is None:
            if len(self._items) >= _MAX_CACHED:
                return _OVERFLOW
            found = self._items[key] = build()
        return found


def _keep(entries: dict[Hashable, T], key: Hashable, entry: T) -> T:
    """``entry``, kept under ``key`` unless ``entries`` holds ``_MAX_CACHED`` already."""
    if len(entries) < _MAX_CACHED:
        entries[key] = entry
    return entry


class Accumulator:
    """A monotonic counter summed here and reported by an observable counter.

    Adding is a dict lookup and an addition, where the SDK's synchronous counter cleans
    and hashes the attributes of every measurement (tens of microseconds on the hot path
    of every message); the SDK reads the totals when it collects. Totals are kept per
    key (at most ``_MAX_CACHED``; later keys count under ``otel.metric.overflow``).
    """

    __slots__ = ("_sources", "_totals")

    def __init__(self, meter: Meter, name: str, unit: str, description: str) -> None:
        self._totals: dict[int, list[Any]] = {}
        self._sources: list[Callable[[], Iterable[tuple[Attributes, int]]]] = []
        meter.create_observable_counter(name, callbacks=[self._observe], unit=unit, description=description)

    def read(self, source: Callable[[], Iterable[tuple[Attributes, int]]]) -> None:
        """Also report the ``(attributes, total)`` pairs of ``source()`` at each
        collection (totals kept elsewhere: the in-memory bus's hand-off counts), added to
        those counted here under the same attribute dict."""
        self._sources.append(source)

    def add(self, attributes: Attributes, amount: float = 1) -> None:
        """Count ``amount`` under ``attributes``, a dict from a :class:`_Cache` (counted by
        identity: the cache keeps it for the process's life)."""
        self.cell(attributes)[1] += amount

    def cell(self, attributes: Attributes) -> list[Any]:
        """``[attributes, total]`` of ``attributes`` (a :class:`_Cache`'s dict): a
        decorator keeps it and counts with ``cell[1] += 1`` on its hot path, a plain
        int addition; the SDK reads the totals when it collects."""
        entry = self._totals.get(id(attributes))
        if entry is None:
            entry = self._totals[id(attributes)] = [attributes, 0]
        return entry

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        totals: dict[int, list[Any]] = {key: [a, t] for key, (a, t) in list(self._totals.items())}
        for source in list(self._sources):
            for attributes, total in source():
                entry = totals.get(id(attributes))
                if entry is None:
                    totals[id(attributes)] = [attributes, total]
                else:
                    entry[1] += total
        return [Observation(total, attributes) for attributes, total in totals.values()]


class Instruments:
    """The middleware's instruments of one meter."""

    def __init__(self, meter: Meter) -> None:
        buckets = sc.DURATION_BUCKETS
        self.sent = Accumulator(
            meter, sc.SENT_MESSAGES, "{message}", "Messages a producer attempted to send."
        )
        self.operation_duration = duration_histogram(
            meter, sc.OPERATION_DURATION, "s", "Duration of a messaging operation (send, hand_off).", buckets
        )
        self.consumed = Accumulator(
            meter, sc.CONSUMED_MESSAGES, "{message}", "Messages a receiver delivered to its consumer."
        )
        self.process_duration = duration_histogram(
            meter,
            sc.PROCESS_DURATION,
            "s",
            "Duration of processing one message (a command, one event function).",
            buckets,
        )
        self.waits = Accumulator(
            meter, sc.WAITS, "{wait}", "send_and_wait calls, by stage waited for and outcome."
        )
        self.wait_duration = duration_histogram(
            meter,
            sc.WAIT_DURATION,
            "s",
            "Duration of send_and_wait until its result (or its failure).",
            buckets,
        )
        self.store_duration = duration_histogram(
            meter, sc.STORE_DURATION, "s", "Duration of an event store operation (append, load).", buckets
        )
        self.store_conflicts = Accumulator(
            meter, sc.STORE_CONFLICTS, "{conflict}", "Appends refused for a version conflict."
        )


class OtelMiddleware(Middleware):
    """Metrics (``meter``) and tracing (``tracer``) of every component (module docstring).

    ``system`` is the ``messaging.system`` of the process's transport (``kafka``,
    ``redis``, ``nats``, ``in_memory``). Either of ``tracer`` and ``meter`` may be
    ``None`` (that part off); the plugin installs no middleware when both are.
    ``event_send_spans`` (``WOW_OTEL__EVENT_SEND_SPANS``): a producer span for each send
    of an event or state event stream too; off, such a send carries the current span
    (the command's ``process`` span) as its ``traceparent`` and starts no span.
    ``command_outcomes``: the metrics backend whose command-handler counts
    (``wow.command.rejections``...) this middleware's handler decorator records in the
    core's place (:data:`~wow_core.metrics.RECORDS_COMMAND_OUTCOMES`): one decorator
    frame per command, not two.
    """

    def __init__(
        self,
        *,
        tracer: Tracer | None,
        meter: Meter | None,
        system: str = "in_memory",
        event_send_spans: bool = False,
        command_outcomes: Metrics | None = None,
    ) -> None:
        self.tracer = None if tracer is None else lean_tracer(tracer)
        self.start_span: Callable[[str, Any, SpanKind, Attributes], Span] = (
            self.tracer.start_owning if isinstance(self.tracer, LeanTracer) else self._sdk_start
        )
        """Start a span of ``tracer`` with (name, context, kind, attributes), the attributes
        a fresh dict handed over (:meth:`~wow_otel.lean.LeanTracer.start_owning`)."""
        self.start_lazy: Callable[[str, Any, SpanKind, Callable[[], Attributes]], Span] = (
            self.tracer.start_lazy if isinstance(self.tracer, LeanTracer) else self._sdk_start_lazy
        )
        """:attr:`start_span` with the attributes built by a function, only for a span that
        records where the sampler decides without them (:meth:`~wow_otel.lean.LeanTracer.start_lazy`)."""
        self.lazy_roots = isinstance(self.tracer, LeanTracer) and not (
            self.tracer.samples_roots and self.tracer.follows_sampled
        )
        """Whether a wait span (a root, or a child of the caller's span) may be decided not
        to record before its attributes are built (a sampler other than always-on)."""
        self.skips_unsampled = isinstance(self.tracer, LeanTracer) and self.tracer.drops_unsampled
        """A trace not sampled at its root records nothing below it: no span is started
        there, its context propagates as it came (module docstring)."""
        self.command_outcomes = None if command_outcomes is None else CommandOutcomeCounts(command_outcomes)
        self.event_send_spans = event_send_spans
        self.instruments = Instruments(meter) if meter is not None else None
        self.system = system
        self.naming: TopicNaming = DefaultTopicNaming()
        self._named_by_transport = False
        self.local_first_kinds: set[TopicKind] = set()
        self._destinations: dict[tuple[str, TopicKind], str] = {}

    def _sdk_start(self, name: str, context: Any, kind: SpanKind, attributes: Attributes) -> Span:
        assert self.tracer is not None
        return self.tracer.start_span(name, context, kind, attributes)

    def _sdk_start_lazy(
        self, name: str, context: Any, kind: SpanKind, build: Callable[[], Attributes]
    ) -> Span:
        assert self.tracer is not None
        return self.tracer.start_span(name, context, kind, build())

    def destination(self, named_aggregate: NamedAggregate, kind: TopicKind) -> str:
        """The topic of ``named_aggregate`` and ``kind`` (``messaging.destination.name``)."""
        key = (named_aggregate.key, kind)
        found = self._destinations.get(key)
        if found is None:
            found = self._destinations[key] = self.naming.topic(named_aggregate, kind)
        return found

    # -- decorate -------------------------------------------------------------------------

    def decorate_bus(self, bus: MessageBus[Any, Any], layer: BusLayer) -> MessageBus[Any, Any]:
        kind = bus.topic_kind
        if layer is BusLayer.TRANSPORT:
            transport_bus = undecorated(bus)
            system = self.system
            if isinstance(transport_bus, TransportMessageBus):
                system = transport_bus.transport.name
                if not self._named_by_transport:
                    self.naming, self._named_by_transport = transport_bus.naming, True
                    self._destinations.clear()
            return TracingMessageBus(bus, self, layer, system, lambda: kind not in self.local_first_kinds)
        if layer is BusLayer.LOCAL_FIRST:
            self.local_first_kinds.add(kind)
            if self.tracer is None:
                return bus
            return TracingMessageBus(bus, self, layer, self.system, lambda: True)
        local: Any = bus
        top = lambda: kind not in self.local_first_kinds  # noqa: E731
        return TracingLocalMessageBus(local, self, sc.LOCAL_SYSTEM, top)

    def decorate_gateway(self, gateway: CommandGateway) -> CommandGateway:
        return TracingCommandGateway(gateway, self)

    def decorate_command_handler(self, handler: CommandKernel) -> CommandKernel:
        return TracingCommandHandler(handler, self)

    def decorate_event_store(self, store: EventStore) -> EventStore:
        decorated: Any = TracingEventStore(store, self)
        return decorated  # type: ignore[no-any-return]

    def decorate_event_handler(self, handler: EventFunctionHandler) -> EventFunctionHandler:
        return TracingEventHandler(handler, self)


# -- buses ------------------------------------------------------------------------------


class _BusRecorder:
    """What the bus decorators share: attributes, the producer span, the counts."""

    def __init__(
        self, middleware: OtelMiddleware, kind: TopicKind, system: str, top: Callable[[], bool], counts: bool
    ) -> None:
        self.middleware = middleware
        self.kind = kind
        self.system = system
        self._top = top
        self._traced: bool | None = None
        self.spans = kind is TopicKind.COMMAND or middleware.event_send_spans
        """A producer span per send (else the current span's context is injected)."""
        self.instruments = middleware.instruments if counts else None
        self._send_attributes = _Cache()
        self._duration_attributes = _Cache()
        self._receive_attributes = _Cache()
        self._failed = _Cache()
        # hot entries, resolved once per attribute set: (sent cell, duration point) of a
        # send, the sent cell of a hand-off, the consumed cell of a receive
        self._sends: dict[Hashable, tuple[list[Any], Any]] = {}
        self._hand_offs: dict[Hashable, list[Any]] = {}
        self._receives: dict[Hashable, list[Any]] = {}

    @property
    def tracer(self) -> Tracer | None:
        traced = self._traced
        if traced is None:  # decided at the first send, once the runtime is assembled
            traced = self._traced = self.middleware.tracer is not None and self._top()
        return self.middleware.tracer if traced else None

    def send_attributes(self, message: Message, operation: str) -> Attributes:
        return self.send_attributes_of(message.aggregate_id.named_aggregate, message.name, operation)

    def send_attributes_of(self, named: NamedAggregate, name: str, operation: str) -> Attributes:
        found = self._send_attributes.find((named.key, name, operation))
        if found is not None:
            return found

        def build() -> Attributes:
            return {
                sc.SYSTEM: self.system,
                sc.DESTINATION: self.middleware.destination(named, self.kind),
                sc.OPERATION_TYPE: "send",
                sc.OPERATION_NAME: operation,
                sc.KIND: self.kind.value,
                sc.MESSAGE: name,
            }

        return self._send_attributes.get((named.key, name, operation), build)

    def duration_attributes(self, message: Message) -> Attributes:
        """The few attributes of ``messaging.client.operation.duration`` (the SDK's
        histogram costs microseconds per attribute and measurement)."""
        named = message.aggregate_id.named_aggregate
        found = self._duration_attributes.find(named.key)
        if found is not None:
            return found
        return self._duration_attributes.get(
            named.key,
            lambda: {
                sc.SYSTEM: self.system,
                sc.DESTINATION: self.middleware.destination(named, self.kind),
                sc.OPERATION_NAME: "send",
            },
        )

    def receive_attributes(self, message: Message, group: str) -> Attributes:
        return self.receive_attributes_of(message.aggregate_id.named_aggregate, group)

    def receive_attributes_of(self, named: NamedAggregate, group: str) -> Attributes:
        found = self._receive_attributes.find((named.key, group))
        if found is not None:
            return found

        def build() -> Attributes:
            return {
                sc.SYSTEM: self.system,
                sc.DESTINATION: self.middleware.destination(named, self.kind),
                sc.GROUP: group,
                sc.OPERATION_TYPE: "receive",
                sc.OPERATION_NAME: "receive",
                sc.KIND: self.kind.value,
            }

        return self._receive_attributes.get((named.key, group), build)

    def _send_entry(self, message: Message) -> tuple[list[Any], Any]:
        assert self.instruments is not None
        entry = (
            self.instruments.sent.cell(self.send_attributes(message, "send")),
            self.instruments.operation_duration.series(self.duration_attributes(message)),
        )
        return _keep(self._sends, (message.aggregate_id.named_aggregate.key, message.name), entry)

    def hand_off_cell(self, message: Message) -> list[Any]:
        """The ``messaging.client.sent.messages`` cell of an admitted hand-off."""
        key = (message.aggregate_id.named_aggregate.key, message.name)
        cell = self._hand_offs.get(key)
        if cell is None:
            assert self.instruments is not None
            cell = _keep(
                self._hand_offs, key, self.instruments.sent.cell(self.send_attributes(message, "hand_off"))
            )
        return cell

    async def send(self, inner: Callable[[Any], Any], message: Any) -> None:
        traced = self._traced  # decided at the first send (the property), then read here
        tracer = self.tracer if traced is None else (self.middleware.tracer if traced else None)
        instruments = self.instruments
        if tracer is not None and (not self.spans or self.middleware.skips_unsampled):
            active = current_span_context()
            if not self.spans:
                # an event stream sent by the kernel: its functions are children of the
                # current (process) span; no producer span of its own
                tracer = None
                if is_valid_of(active):
                    message = inject(message, span_context=active)
            elif _unsampled(active):  # nothing records: the trace's context goes on
                tracer = None
                message = inject(message, span_context=active)
        if tracer is None:
            if instruments is None:
                await inner(message)
                return
            # metrics only: one reading before and after, two additions
            started = _clock()
            try:
                await inner(message)
            except BaseException as error:
                self._failed_send(message, error, _clock() - started)
                raise
            ns = _clock() - started
            entry = self._sends.get((message.aggregate_id.named_aggregate.key, message.name))
            if entry is None:
                entry = self._send_entry(message)
            entry[0][1] += 1
            entry[1].record_ns(ns)
            return
        attributes = self.send_attributes(message, "send")
        span: Span | None = None
        token: object | None = None
        current: Waiting | None = None
        if tracer is not None:
            span = self.middleware.start_span(
                f"send {attributes[sc.DESTINATION]}",
                None,
                SpanKind.PRODUCER,
                {**attributes, sc.MESSAGE_ID: message.id, sc.AGGREGATE_ID: message.aggregate_id.id},
            )
            token = attach_span(span)
            message = inject(message, span_context=span.get_span_context())
            if span.is_recording():
                current = waiting.get()
        started = _clock()
        try:
            await inner(message)
        except BaseException as error:
            if instruments is not None:
                self._failed_send(message, error, _clock() - started)
            if span is not None:
                _fail(span, error)
            raise
        else:
            if instruments is not None:
                ns = _clock() - started
                entry = self._sends.get((message.aggregate_id.named_aggregate.key, message.name))
                if entry is None:
                    entry = self._send_entry(message)
                entry[0][1] += 1
                entry[1].record_ns(ns)
            if current is not None and current.command_id == message.id:
                current.span.add_event(_SENT)
        finally:
            if span is not None:
                detach(token)
                span.end()

    def _failed_send(self, message: Message, error: BaseException, ns: int) -> None:
        instruments = self.instruments
        assert instruments is not None
        attributes = self.send_attributes(message, "send")
        error_type = _error_type(error)
        failed = self._failed.get(
            (id(attributes), error_type), lambda: {**attributes, sc.ERROR_TYPE: error_type}
        )
        durations = self.duration_attributes(message)
        failed_duration = self._failed.get(
            (id(durations), error_type), lambda: {**durations, sc.ERROR_TYPE: error_type}
        )
        instruments.sent.add(failed)
        instruments.operation_duration.series(failed_duration).record_ns(ns)

    def received(self, exchange: MessageExchange[Any], subscription: MessageSubscription) -> None:
        """Count ``exchange`` (the receivers' hook; only set when counting)."""
        message = exchange.message
        key = (message.aggregate_id.named_aggregate.key, subscription.group)
        cell = self._receives.get(key)
        if cell is None:
            assert self.instruments is not None
            cell = _keep(
                self._receives,
                key,
                self.instruments.consumed.cell(self.receive_attributes(message, subscription.group)),
            )
        cell[1] += 1


class TracingMessageBus(MessageBusDecorator[M, E]):
    """A transport or local-first bus (module docstring). The local-first layer only
    traces (its sends and receives are counted by the two buses under it)."""

    def __init__(
        self,
        inner: MessageBus[M, E],
        middleware: OtelMiddleware,
        layer: BusLayer,
        system: str,
        top: Callable[[], bool],
    ) -> None:
        super().__init__(inner)
        self.layer = layer
        counts = layer is BusLayer.TRANSPORT and middleware.instruments is not None
        self.recorder = _BusRecorder(middleware, inner.topic_kind, system, top, counts)
        self._wraps_receivers = counts
        # one coroutine frame per send, not two; the receivers call the recorder's hook
        self.send = functools.partial(self.recorder.send, inner.send)  # type: ignore[method-assign]
        self.received = self.recorder.received  # type: ignore[method-assign]

    async def send(self, message: M) -> None:
        await self.recorder.send(self.inner.send, message)

    def received(self, exchange: E, subscription: MessageSubscription) -> None:
        self.recorder.received(exchange, subscription)


class TracingLocalMessageBus(LocalMessageBusDecorator[M, E]):
    """The in-process bus: counts its sends, admitted hand-offs and receives; traces its
    sends when it is the bus callers send on (no local-first bus in front)."""

    def __init__(self, inner: Any, middleware: OtelMiddleware, system: str, top: Callable[[], bool]) -> None:
        super().__init__(inner)
        self.recorder = _BusRecorder(middleware, inner.topic_kind, system, top, True)
        self._wraps_receivers = self._counts = middleware.instruments is not None
        self._hand_offs = self.recorder._hand_offs
        self.send = functools.partial(self.recorder.send, inner.send)  # type: ignore[method-assign]
        self.received = self.recorder.received  # type: ignore[method-assign]
        count_hand_offs = getattr(inner, "count_hand_offs", None) if self._counts else None
        counts = count_hand_offs() if count_hand_offs is not None else None
        if counts is not None:
            # the in-memory bus counts its admitted hand-offs itself, read at collection:
            # no frame of this decorator on a hand-off
            self._counts = False
            self.hand_off = inner.hand_off  # type: ignore[method-assign]
            recorder = self.recorder

            def hand_offs() -> list[tuple[Attributes, int]]:
                return [
                    (recorder.send_attributes_of(c.named_aggregate, c.message_name, "hand_off"), c.count)
                    for c in list(counts.values())
                ]

            assert recorder.instruments is not None
            recorder.instruments.sent.read(hand_offs)

    async def send(self, message: M) -> None:
        await self.recorder.send(self.inner.send, message)

    def receiver(self, subscription: MessageSubscription) -> Any:
        """The inner receiver; counted by the receiver itself when it can
        (``count_received``, the in-memory one: read at collection, no hook call per
        exchange), else through :meth:`received` as any decorator."""
        if not self._wraps_receivers:
            return self.inner.receiver(subscription)
        receiver = self.inner.receiver(subscription)
        count_received = getattr(receiver, "count_received", None)
        counts = count_received() if count_received is not None else None
        if counts is None:
            hook = getattr(receiver, "hook_received", None)
            if hook is not None and hook(self.received):
                return receiver
            return MessageReceiverDecorator(receiver, subscription, self.received)
        recorder = self.recorder
        group = subscription.group

        def received() -> list[tuple[Attributes, int]]:
            return [
                (recorder.receive_attributes_of(c.named_aggregate, group), c.count)
                for c in list(counts.values())
            ]

        assert recorder.instruments is not None
        recorder.instruments.consumed.read(received)
        return receiver

    def hand_off(self, message: M) -> HandOffReceipt:
        receipt = self.inner.hand_off(message)
        if receipt.accepted and self._counts:
            cell = self._hand_offs.get((message.aggregate_id.named_aggregate.key, message.name))
            if cell is None:
                cell = self.recorder.hand_off_cell(message)
            cell[1] += 1
        return receipt

    def received(self, exchange: E, subscription: MessageSubscription) -> None:
        self.recorder.received(exchange, subscription)


# -- command handler --------------------------------------------------------------------


async def _attached(context: Any, work: Coroutine[Any, Any, T]) -> T:
    """``work`` awaited with ``context`` current (a trace not sampled, without metrics)."""
    token = attach(context)
    try:
        return await work
    finally:
        detach(token)


def _outcome_of(outcome: CommandOutcome) -> str:
    if outcome.duplicate:
        return "duplicate"
    return outcome.error_code or "succeeded"


class TracingCommandHandler(CommandHandlerDecorator):
    """The consumer span and process duration of each command (module docstring)."""

    def __init__(self, inner: CommandKernel, middleware: OtelMiddleware) -> None:
        super().__init__(inner)
        self.middleware = middleware
        self.counts = middleware.command_outcomes
        self._attributes = _Cache()
        self._points: dict[Hashable, Any] = {}
        self._succeeded: dict[Hashable, Any] = {}
        if middleware.tracer is None and middleware.instruments is not None:
            # metrics only: the metered coroutine is the command's only frame here
            self.process = self._metered  # type: ignore[method-assign]

    def dropped(self, command: CommandMessage[Any]) -> None:
        self.inner.dropped(command)
        if self.counts is not None:
            self.counts.dropped()

    def _base(self, command: CommandMessage[Any]) -> Attributes:
        named = command.aggregate_id.named_aggregate
        name = command.name
        found = self._attributes.find((named.key, name))
        if found is not None:
            return found

        def build() -> Attributes:
            return {
                sc.SYSTEM: self.middleware.system,
                sc.DESTINATION: self.middleware.destination(named, TopicKind.COMMAND),
                sc.OPERATION_NAME: "process",
                sc.MESSAGE: name,
            }

        return self._attributes.get((named.key, name), build)

    def _with_outcome(self, command: CommandMessage[Any], base: Attributes, outcome: str) -> Attributes:
        key = (command.aggregate_id.named_aggregate.key, command.name, outcome)
        found = self._attributes.find(key)
        if found is not None:
            return found
        return self._attributes.get(key, lambda: {**base, sc.OUTCOME: outcome})

    def _point(self, command: CommandMessage[Any], result: str) -> Any:
        """The ``messaging.process.duration`` point of ``command``'s name and ``result``."""
        assert self.middleware.instruments is not None
        key = (command.aggregate_id.named_aggregate.key, command.name, result)
        point = self._points.get(key)
        if point is None:
            attributes = self._with_outcome(command, self._base(command), result)
            point = _keep(self._points, key, self.middleware.instruments.process_duration.series(attributes))
        return point

    def _settled(self, command: CommandMessage[Any], outcome: CommandOutcome, ns: int) -> None:
        """Record a decided command (the metrics-only path, past its common case)."""
        if self.counts is not None:
            self.counts.count(outcome)
        self._point(command, _outcome_of(outcome)).record_ns(ns)

    def _failed(self, command: CommandMessage[Any], error: BaseException, ns: int) -> None:
        """Record a command whose handler raised."""
        assert self.middleware.instruments is not None
        base = self._base(command)
        error_type = _error_type(error)
        failed = self._attributes.get(
            (id(base), error_type), lambda: {**base, sc.OUTCOME: "error", sc.ERROR_TYPE: error_type}
        )
        self.middleware.instruments.process_duration.series(failed).record_ns(ns)

    def process(self, command: CommandMessage[Any]) -> Coroutine[Any, Any, CommandOutcome]:
        """The coroutine of the command's processing (returned, not awaited here: one
        frame of this decorator per command)."""
        middleware = self.middleware
        if middleware.tracer is None:
            return self._measured(command)
        parent, skip = _parent(middleware, command)
        if not skip:
            return self._traced(command, parent)
        # a trace not sampled: nothing records, its context goes on; the metrics
        if middleware.instruments is not None:
            return self._metered(command, parent)
        return _attached(parent, self._measured(command))

    def _measured(self, command: CommandMessage[Any]) -> Coroutine[Any, Any, CommandOutcome]:
        """The command's processing with the metrics only (or nothing): its coroutine."""
        if self.middleware.instruments is None:
            if self.counts is None:
                return self.inner.process(command)
            return self._counted(command)
        return self._metered(command)

    async def _counted(self, command: CommandMessage[Any]) -> CommandOutcome:
        assert self.counts is not None
        outcome = await self.inner.process(command)
        self.counts.count(outcome)
        return outcome

    async def _metered(self, command: CommandMessage[Any], context: Any = None) -> CommandOutcome:
        # metrics only (``context``: of a trace not sampled, current around the processing):
        # one reading before and after; a success is one point update
        token = None if context is None else attach(context)
        started = _clock()
        try:
            outcome = await self.inner.process(command)
        except BaseException as error:
            self._failed(command, error, _clock() - started)
            raise
        finally:
            if token is not None:
                detach(token)
        ns = _clock() - started
        if outcome.conflicts or outcome.publish_failures or outcome.duplicate or outcome.error_code:
            self._settled(command, outcome, ns)
            return outcome
        point = self._succeeded.get((command.aggregate_id.named_aggregate.key, command.name))
        if point is None:
            point = self._succeeded[(command.aggregate_id.named_aggregate.key, command.name)] = self._point(
                command, "succeeded"
            )
        point.record_ns(ns)
        return outcome

    async def _traced(self, command: CommandMessage[Any], parent: Any) -> CommandOutcome:
        """The command's processing in its ``process`` span (and the metrics, if on)."""
        instruments = self.middleware.instruments
        base = self._base(command)
        span = self.middleware.start_span(
            f"process {base[sc.DESTINATION]}",
            parent,
            SpanKind.CONSUMER,
            {
                **base,
                sc.OPERATION_TYPE: "process",
                sc.MESSAGE_ID: command.id,
                sc.AGGREGATE_ID: command.aggregate_id.id,
                sc.REQUEST_ID: command.request_id,
            },
        )
        token = attach_span(span, parent)
        started = _clock()
        try:
            outcome = await self.inner.process(command)
        except BaseException as error:
            if instruments is not None:
                self._failed(command, error, _clock() - started)
            detach(token)
            _fail(span, error)
            span.end()
            raise
        result = _outcome_of(outcome)
        if instruments is not None:
            self._settled(command, outcome, _clock() - started)
        elif self.counts is not None:
            self.counts.count(outcome)
        ended: Attributes = {sc.OUTCOME: result, sc.AGGREGATE_VERSION: outcome.version}
        if outcome.conflicts:
            ended["wow.command.conflicts"] = outcome.conflicts
        if outcome.error_msg:
            ended["wow.command.error_msg"] = outcome.error_msg
        span.set_attributes(ended)
        span.end()
        detach(token)
        return outcome


# -- event store ------------------------------------------------------------------------


class TracingEventStore(EventStoreDecorator):
    """The append span and the store's durations and conflicts (module docstring)."""

    def __init__(self, inner: EventStore, middleware: OtelMiddleware) -> None:
        super().__init__(inner)
        self.middleware = middleware
        self._attributes = _Cache()
        self._points: dict[Hashable, Any] = {}

    def _attrs(self, named: NamedAggregate, operation: str, outcome: str) -> Attributes:
        found = self._attributes.find((named.key, operation, outcome))
        if found is not None:
            return found
        return self._attributes.get(
            (named.key, operation, outcome),
            lambda: {sc.AGGREGATE: str(named), sc.STORE_OPERATION: operation, sc.OUTCOME: outcome},
        )

    def _point(self, named: NamedAggregate, operation: str, outcome: str) -> Any:
        """The ``wow.eventstore.operation.duration`` point, resolved once per attribute set."""
        key = (named.key, operation, outcome)
        point = self._points.get(key)
        if point is None:
            assert self.middleware.instruments is not None
            histogram = self.middleware.instruments.store_duration
            point = _keep(self._points, key, histogram.series(self._attrs(named, operation, outcome)))
        return point

    async def append(self, stream: DomainEventStream) -> None:
        middleware = self.middleware
        tracer = middleware.tracer
        instruments = middleware.instruments
        named = stream.aggregate_id.named_aggregate
        span: Span | None = None
        if tracer is not None:
            active = current_span_context()
            if is_valid_of(active) and not stream.header.read_only:
                # the stream keeps the current (process) span's context: its sends carry it
                # as they are, not a copy of the stream each
                inject(stream, span_context=active)
            if not (middleware.skips_unsampled and _unsampled(active)):
                span = middleware.start_span(
                    f"append {named.key}",
                    None,
                    SpanKind.INTERNAL,
                    {
                        sc.AGGREGATE: named.key,
                        sc.AGGREGATE_ID: stream.aggregate_id.id,
                        sc.AGGREGATE_VERSION: stream.version,
                        sc.COMMAND_ID: stream.command_id,
                        "wow.events": len(stream.events),
                    },
                )
        started = _clock()
        outcome = "ok"
        try:
            await self.inner.append(stream)
        except EventVersionConflictError:
            outcome = "conflict"
            if instruments is not None:
                instruments.store_conflicts.add(self._attrs(named, "append", outcome))
            raise
        except DuplicateRequestIdError:
            outcome = "duplicate"
            raise
        except BaseException as error:
            outcome = "error"
            if span is not None:
                _fail(span, error)
            raise
        finally:
            if instruments is not None:
                ns = _clock() - started
                point = self._points.get((named.key, "append", outcome))
                if point is None:
                    point = self._point(named, "append", outcome)
                point.record_ns(ns)
            if span is not None:
                span.set_attribute(sc.OUTCOME, outcome)
                span.end()

    async def load(
        self, aggregate_id: AggregateId, head_version: int = 1, tail_version: int | None = None
    ) -> list[DomainEventStream]:
        instruments = self.middleware.instruments
        if instruments is None:
            return await self.inner.load(aggregate_id, head_version, tail_version)
        started = _clock()
        try:
            loaded = await self.inner.load(aggregate_id, head_version, tail_version)
        except BaseException:
            self._point(aggregate_id.named_aggregate, "load", "error").record_ns(_clock() - started)
            raise
        ns = _clock() - started
        point = self._points.get((aggregate_id.named_aggregate.key, "load", "ok"))
        if point is None:
            point = self._point(aggregate_id.named_aggregate, "load", "ok")
        point.record_ns(ns)
        return loaded


# -- gateway ----------------------------------------------------------------------------


_plan_texts: dict[int, tuple[WaitPlan, str]] = {}
"""``str(plan)`` of the latest wait plans, by identity (the plan kept with it): a caller
that waits with one plan object has it written once, not per wait."""


def _plan_text(plan: WaitPlan) -> str:
    known = _plan_texts.get(id(plan))
    if known is not None and known[0] is plan:
        return known[1]
    if len(_plan_texts) >= 256:
        _plan_texts.clear()
    text = str(plan)
    _plan_texts[id(plan)] = (plan, text)
    return text


def _start_wait_span(
    middleware: OtelMiddleware,
    command: CommandMessage[Any],
    wait: WaitPlan | None,
    wait_stage: str,
    *,
    streaming: bool | None = None,
) -> Span:
    """The ``wait <command>`` span of ``send_and_wait`` (and, with ``streaming``, of a
    stream); under a sampler that may drop it, its attributes built only if it records."""

    def attributes() -> Attributes:
        built: Attributes = {
            sc.AGGREGATE: command.aggregate_id.named_aggregate.key,
            sc.MESSAGE: command.name,
            sc.WAIT_STAGE: wait_stage if wait is None else _plan_text(wait),
            sc.COMMAND_ID: command.id,
            sc.REQUEST_ID: command.request_id,
        }
        if streaming is not None:
            built["wow.command.wait.streaming"] = streaming
        return built

    if middleware.lazy_roots:
        return middleware.start_lazy(f"wait {command.name}", None, SpanKind.INTERNAL, attributes)
    return middleware.start_span(f"wait {command.name}", None, SpanKind.INTERNAL, attributes())


def _wait_outcome(result: CommandResult) -> str:
    if result.duplicate:
        return "duplicate"
    return result.error_code or "succeeded"


class TracingCommandGateway(CommandGatewayDecorator):
    """The waiting span of each ``send_and_wait`` and the wait metrics (module docstring)."""

    __slots__ = ("_attributes", "_entries", "middleware")

    def __init__(self, inner: CommandGateway, middleware: OtelMiddleware) -> None:
        super().__init__(inner)
        self.middleware = middleware
        self._attributes = _Cache()
        self._entries: dict[Hashable, tuple[list[Any], Any]] = {}

    def _record(
        self, command: CommandMessage[Any], wait_stage: str, stage: str, outcome: str, ns: int
    ) -> None:
        """One wait: ``wow.command.waits`` and ``wow.command.wait.duration`` (the cell and
        point of the attribute set resolved once)."""
        key = (command.aggregate_id.named_aggregate.key, command.name, wait_stage, stage, outcome)
        entry = self._entries.get(key)
        if entry is None:
            instruments = self.middleware.instruments
            assert instruments is not None
            attributes = self._attrs(command, wait_stage, stage, outcome)
            cell = instruments.waits.cell(attributes)
            entry = _keep(self._entries, key, (cell, instruments.wait_duration.series(attributes)))
        entry[0][1] += 1
        entry[1].record_ns(ns)

    def _failed(self, command: CommandMessage[Any], wait_stage: str, error: BaseException, ns: int) -> None:
        """A wait that raised: its outcome by the error (module docstring)."""
        stage = ""
        if isinstance(error, CommandWaitTimeoutError):
            outcome = "timeout"
            stage = error.last_stage.value if error.last_stage is not None else ""
        elif isinstance(error, CommandValidationError):
            outcome = "invalid"
        elif isinstance(error, asyncio.CancelledError):
            outcome = "cancelled"
        else:
            outcome = "error"
        self._record(command, wait_stage, stage, outcome, ns)

    def _attrs(self, command: CommandMessage[Any], wait_stage: str, stage: str, outcome: str) -> Attributes:
        named = command.aggregate_id.named_aggregate
        name = command.name
        found = self._attributes.find((named.key, name, wait_stage, stage, outcome))
        if found is not None:
            return found
        return self._attributes.get(
            (named.key, name, wait_stage, stage, outcome),
            lambda: {
                sc.AGGREGATE: str(named),
                sc.MESSAGE: name,
                sc.WAIT_STAGE: wait_stage,
                sc.STAGE: stage,
                sc.OUTCOME: outcome,
            },
        )

    def send_and_wait(
        self,
        command: CommandMessage[Any],
        wait: WaitPlan | None = None,
        *,
        timeout: float | None = None,
    ) -> Coroutine[Any, Any, CommandResult]:
        """The coroutine of the wait (returned, not awaited here: one frame per wait)."""
        tracer = self.middleware.tracer
        wait_stage = (wait.stage if wait is not None else CommandStage.PROCESSED)._value_
        if tracer is None:
            return self._measured(command, wait, timeout, wait_stage)
        if wait is not None and wait.stage in _PAST_PROCESSED:
            return self._through_stream(command, wait, timeout)
        return self._traced(command, wait, timeout, wait_stage)

    async def _through_stream(
        self, command: CommandMessage[Any], wait: WaitPlan, timeout: float | None
    ) -> CommandResult:
        """Past PROCESSED the stages between are span events too: the stream yields them."""
        last: CommandResult | None = None
        stages = self._stream(command, wait, timeout, streaming=False)
        try:
            async for result in stages:
                last = result
        finally:
            await _close(stages)
        assert last is not None, "a stream yields SENT at least"
        return last

    async def _measured(
        self, command: CommandMessage[Any], wait: WaitPlan | None, timeout: float | None, wait_stage: str
    ) -> CommandResult:
        """``send_and_wait`` with metrics only (or nothing)."""
        if self.middleware.instruments is None:
            return await self.inner.send_and_wait(command, wait, timeout=timeout)
        # metrics only: one reading before and after, one count, one point update
        began = _clock()
        try:
            reached = await self.inner.send_and_wait(command, wait, timeout=timeout)
        except BaseException as error:
            self._failed(command, wait_stage, error, _clock() - began)
            raise
        ns = _clock() - began
        outcome = "duplicate" if reached.duplicate else (reached.error_code or "succeeded")
        stage = reached.stage._value_
        named = command.aggregate_id.named_aggregate
        entry = self._entries.get((named.key, command.name, wait_stage, stage, outcome))
        if entry is None:
            self._record(command, wait_stage, stage, outcome, ns)
        else:
            entry[0][1] += 1
            entry[1].record_ns(ns)
        return reached

    async def _traced(
        self,
        command: CommandMessage[Any],
        wait: WaitPlan | None,
        timeout: float | None,
        wait_stage: str,
    ) -> CommandResult:
        """``send_and_wait`` in its wait span (and the metrics, if on)."""
        span = _start_wait_span(self.middleware, command, wait, wait_stage)
        token = attach_span(span)
        if not span.is_recording():  # a trace not sampled: the metrics, under its context
            try:
                return await self._measured(command, wait, timeout, wait_stage)
            finally:
                detach(token)
        marker = waiting.set(Waiting(span, command.id))
        instruments = self.middleware.instruments
        started = _clock()
        stage = ""
        outcome = "succeeded"
        done: CommandResult | None = None
        try:
            result = done = await self.inner.send_and_wait(command, wait, timeout=timeout)
        except CommandWaitTimeoutError as error:
            outcome = "timeout"
            stage = error.last_stage.value if error.last_stage is not None else ""
            _fail(span, error)
            raise
        except CommandValidationError as error:
            outcome = "invalid"
            _fail(span, error)
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            span.set_status(Status(StatusCode.ERROR, "cancelled"))
            raise
        except BaseException as error:
            outcome = "error"
            _fail(span, error)
            raise
        else:
            stage = result.stage._value_
            outcome = _wait_outcome(result)
            if result.stage is not CommandStage.SENT:
                attributes: Attributes | None = None
                if result.processor_name or result.function_name:
                    attributes = {}
                    if result.processor_name:
                        attributes[sc.PROCESSOR] = result.processor_name
                    if result.function_name:
                        attributes[sc.FUNCTION] = result.function_name
                span.add_event(
                    stage,
                    attributes=attributes,
                    timestamp=result.signal_time * 1_000_000 if result.signal_time else None,
                )
            if result.error_code:
                span.set_status(Status(StatusCode.ERROR, f"{result.error_code}: {result.error_msg}"))
            return result
        finally:
            if instruments is not None:
                self._record(command, wait_stage, stage, outcome, _clock() - started)
            ended: Attributes = {sc.STAGE: stage, sc.OUTCOME: outcome}
            if done is not None:  # one call: the SDK locks and cleans per call
                if done.aggregate_version is not None:
                    ended[sc.AGGREGATE_VERSION] = done.aggregate_version
                if done.aggregate_id is not None:
                    ended[sc.AGGREGATE_ID] = done.aggregate_id.id
            span.set_attributes(ended)
            waiting.reset(marker)
            detach(token)
            span.end()

    def send_and_wait_stream(
        self,
        command: CommandMessage[Any],
        wait: WaitPlan | None = None,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[CommandResult]:
        """The streaming wait in one waiting span: each stage yielded is a span event
        (``SENT`` first); the span ends with the stream (its last stage, a timeout, or
        the caller leaving early: ``wow.outcome=closed``)."""
        return self._stream(command, wait, timeout, streaming=True)

    async def _stream(
        self, command: CommandMessage[Any], wait: WaitPlan | None, timeout: float | None, *, streaming: bool
    ) -> AsyncIterator[CommandResult]:
        middleware = self.middleware
        tracer = middleware.tracer
        instruments = middleware.instruments
        wait_stage = (wait.stage if wait is not None else CommandStage.PROCESSED).value
        span: Span | None = None
        if tracer is not None:
            span = _start_wait_span(middleware, command, wait, wait_stage, streaming=streaming)
        started = _clock()
        stage = ""
        outcome = "closed"
        stream = self.inner.send_and_wait_stream(command, wait, timeout=timeout)
        try:
            if span is not None:  # the send runs in the first step: under the wait span
                token = attach_span(span)
                try:
                    first = await anext(stream)
                finally:
                    detach(token)
            else:
                first = await anext(stream)
            stage, outcome = first.stage._value_, _wait_outcome(first)
            if span is not None:
                span.add_event(stage)
            yield first
            async for result in stream:
                stage, outcome = result.stage._value_, _wait_outcome(result)
                if span is not None:
                    span.add_event(
                        stage, timestamp=result.signal_time * 1_000_000 if result.signal_time else None
                    )
                yield result
        except CommandWaitTimeoutError as error:
            outcome = "timeout"
            stage = error.last_stage.value if error.last_stage is not None else stage
            if span is not None:
                _fail(span, error)
            raise
        except CommandValidationError as error:
            outcome = "invalid"
            if span is not None:
                _fail(span, error)
            raise
        except (asyncio.CancelledError, GeneratorExit):
            if stage != wait_stage:  # left before the stage waited for
                outcome = "closed"
            raise
        except BaseException as error:
            outcome = "error"
            if span is not None:
                _fail(span, error)
            raise
        finally:
            await _close(stream)
            if instruments is not None:
                self._record(command, wait_stage, stage, outcome, _clock() - started)
            if span is not None:
                span.set_attributes({sc.STAGE: stage, sc.OUTCOME: outcome})
                span.end()


async def _close(stream: AsyncIterator[CommandResult]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


# -- event functions --------------------------------------------------------------------


class TracingEventHandler:
    """The span and process duration of each event function (module docstring)."""

    def __init__(self, inner: EventFunctionHandler, middleware: OtelMiddleware) -> None:
        self.inner = inner
        self.middleware = middleware
        self._attributes = _Cache()
        self._points: dict[Hashable, Any] = {}
        if middleware.tracer is None and middleware.instruments is not None:
            # metrics only: the metered coroutine is the function's only frame here
            self.handle = self._metered  # type: ignore[method-assign]

    @staticmethod
    def _key(exchange: FunctionExchange) -> tuple[Any, ...]:
        source = exchange.source.message
        return (source.aggregate_id.named_aggregate.key, type(source).topic_kind, exchange.function)

    def _base(self, exchange: FunctionExchange) -> Attributes:
        source = exchange.source.message
        named: NamedAggregate = source.aggregate_id.named_aggregate
        kind: TopicKind = type(source).topic_kind
        function = exchange.function
        found = self._attributes.find((named.key, kind, function))
        if found is not None:
            return found

        def build() -> Attributes:
            return {
                sc.SYSTEM: self.middleware.system,
                sc.DESTINATION: self.middleware.destination(named, kind),
                sc.OPERATION_NAME: "process",
                sc.PROCESSOR: function.processor_name,
                sc.FUNCTION: function.function_name,
            }

        return self._attributes.get(self._key(exchange), build)

    def _point(self, exchange: FunctionExchange, outcome: str) -> Any:
        """The ``messaging.process.duration`` point of the function, source and outcome."""
        assert self.middleware.instruments is not None
        source = exchange.source.message
        kind = type(source).topic_kind._value_
        key = (source.aggregate_id.named_aggregate.key, kind, exchange.function, outcome)
        point = self._points.get(key)
        if point is None:
            attributes = self._with_outcome(exchange, self._base(exchange), outcome)
            point = _keep(self._points, key, self.middleware.instruments.process_duration.series(attributes))
        return point

    def _with_outcome(self, exchange: FunctionExchange, base: Attributes, outcome: str) -> Attributes:
        key = (*self._key(exchange), outcome)
        attributes = self._attributes.find(key)
        if attributes is None:
            attributes = self._attributes.get(key, lambda: {**base, sc.OUTCOME: outcome})
        return attributes

    def handle(self, exchange: FunctionExchange) -> Coroutine[Any, Any, Settled]:
        """The coroutine of the function's handling (returned, not awaited here: one frame
        of this decorator per function)."""
        middleware = self.middleware
        if middleware.tracer is None:
            if middleware.instruments is None:
                return self.inner.handle(exchange)
            return self._metered(exchange)
        parent, skip = _parent(middleware, exchange.source.message)
        if not skip:
            return self._traced(exchange, parent)
        # a trace not sampled: nothing records, its context goes on; the metrics
        if middleware.instruments is not None:
            return self._metered(exchange, parent)
        return _attached(parent, self.inner.handle(exchange))

    async def _metered(self, exchange: FunctionExchange, context: Any = None) -> Settled:
        # metrics only (``context``: of a trace not sampled, current around the handling):
        # one reading before and after, one point update
        token = None if context is None else attach(context)
        started = _clock()
        try:
            settled = await self.inner.handle(exchange)
        finally:
            if token is not None:
                detach(token)
        ns = _clock() - started
        source = exchange.source.message
        outcome = settled.outcome._value_
        kind = type(source).topic_kind._value_
        point = self._points.get((source.aggregate_id.named_aggregate.key, kind, exchange.function, outcome))
        if point is None:
            point = self._point(exchange, outcome)
        point.record_ns(ns)
        return settled

    async def _traced(self, exchange: FunctionExchange, parent: Any) -> Settled:
        """The function's handling in its consumer span (and the metrics, if on)."""
        instruments = self.middleware.instruments
        base = self._base(exchange)
        source = exchange.source.message
        span = self.middleware.start_span(
            f"{exchange.component._value_} {exchange.function.qualified_name}",
            parent,
            SpanKind.CONSUMER,
            {
                **base,
                sc.OPERATION_TYPE: "process",
                sc.COMPONENT: exchange.component._value_,
                sc.MESSAGE: exchange.message.name,
                sc.MESSAGE_ID: source.id,
                sc.AGGREGATE_ID: source.aggregate_id.id,
                sc.AGGREGATE_VERSION: exchange.message.version,
            },
        )
        token = attach_span(span, parent)
        started = _clock()
        try:
            settled = await self.inner.handle(exchange)
        except BaseException as error:
            detach(token)
            _fail(span, error)
            span.end()
            raise
        outcome = settled.outcome._value_
        if instruments is not None:
            self._point(exchange, outcome).record_ns(_clock() - started)
        span.set_attribute(sc.OUTCOME, outcome)
        if settled.error is not None:
            _fail(span, settled.error)
        span.end()
        detach(token)
        return settled

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
