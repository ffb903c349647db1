"""The core's metrics as middleware: the spec's ``MetricCommandBus`` and its siblings.

:class:`MetricsMiddleware` decorates

* every transport bus (layer ``TRANSPORT``) with a :class:`MetricMessageBus`:
  ``wow.bus.sent`` (tags ``kind``, ``aggregate``, ``transport``, ``source``,
  ``outcome`` = ``ok`` | ``error``) per send and ``wow.bus.received`` (tags ``kind``,
  ``aggregate``, ``group``) per exchange a receiver hands to its consumer; a bus's
  ``DefaultDecodeFailureHandler`` built without metrics counts on the same metrics
  (``wow.transport.decode_failures``);
* the command handler with a :class:`MetricCommandHandler`, which counts each outcome:
  ``wow.command.rejections`` (tag ``code``), ``wow.command.duplicates``,
  ``wow.command.version_conflicts`` (one per conflict met), ``wow.command.publish_failures``
  (tag ``bus`` = ``event`` | ``state``), ``wow.command.void_dropped``.

It observes (it decorates neither)

* every local-first bus with a :class:`MetricLocalFirstObserver` (tag ``bus`` =
  ``command`` | ``event`` | ``state`` on each): ``wow.local_first.sends`` (tag
  ``outcome``, the route: ``handed_off``, ``refused``, ``error``, ``skipped``,
  ``remote``), ``wow.local_first.filtered``, ``wow.local_first.copies.sent`` (tags
  ``aggregate``, ``local_first``), ``wow.local_first.copy.failed`` (tags ``aggregate``,
  ``handed_off``), ``wow.local_first.copies.cancelled`` and
  ``wow.local_first.hand_off.timeouts`` (tag ``aggregate``), and the gauge
  ``wow.local_first.backlog`` (tag ``aggregate``);
* the event dispatch pipeline with a :class:`MetricEventProcessingObserver`:
  ``wow.processing.outcomes`` (tags ``component``, ``context``, ``aggregate``,
  ``message``, ``processor``, ``outcome``) and ``wow.processing.rejected`` (tags
  ``component``, ``reason``).

A backend that records the bus metrics or the handler's outcomes in its own middleware
(:data:`~wow_core.metrics.RECORDS_MESSAGING`,
:data:`~wow_core.metrics.RECORDS_COMMAND_OUTCOMES`) gets neither decorator from here:
each component passes one metrics decorator, not two. The observers bind each series
once (:func:`~wow_core.metrics.bound_counter`, :func:`~wow_core.metrics.bound_gauge`).

Local buses, the gateway and the event store are left undecorated. The runtime does not
install it at all with the no-op backend, so a default runtime wraps and observes
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import ProcessingOutcome
from wow_core.event.observer import EventProcessingObserver
from wow_core.messaging.contract import MessageBus, MessageExchange, MessageSubscription
from wow_core.messaging.local_first.observer import LocalFirstObserver, SendRoute
from wow_core.metrics import (
    Metrics,
    Record,
    Tags,
    bound_counter,
    bound_gauge,
    metrics_source,
    observed_counter,
    observed_gauge,
)
from wow_core.middleware.base import (
    BusLayer,
    CommandHandlerDecorator,
    DecodeFailureHandlerDecorator,
    MessageBusDecorator,
    Middleware,
    undecorated,
)
from wow_core.model import CommandMessage, Message, NamedAggregate, TopicKind
from wow_core.modeling.kernel import CommandKernel, CommandOutcome
from wow_core.transport.bus import RECEIVED_COUNTER, SENT_COUNTER, TransportMessageBus
from wow_core.transport.decode_failure import (
    DecodeFailure,
    DecodeFailureAction,
    TransportDecodeFailureHandler,
)

if TYPE_CHECKING:
    from wow_core.transport.spi import Transport

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=MessageExchange[Any])

REJECTIONS = "wow.command.rejections"
DUPLICATES = "wow.command.duplicates"
VERSION_CONFLICTS = "wow.command.version_conflicts"
PUBLISH_FAILURES = "wow.command.publish_failures"
VOID_DROPPED = "wow.command.void_dropped"

DECODE_FAILURES = "wow.transport.decode_failures"

LOCAL_FIRST_SENDS = "wow.local_first.sends"
LOCAL_FIRST_FILTERED = "wow.local_first.filtered"
COPIES_SENT = "wow.local_first.copies.sent"
COPY_FAILED = "wow.local_first.copy.failed"
COPIES_CANCELLED = "wow.local_first.copies.cancelled"
HAND_OFF_TIMEOUTS = "wow.local_first.hand_off.timeouts"
BACKLOG_GAUGE = "wow.local_first.backlog"

PROCESSING_OUTCOMES = "wow.processing.outcomes"
PROCESSING_REJECTED = "wow.processing.rejected"

_MAX_CACHED_TAGS = 10_000
"""Series bound per observer (bounded like the metric series themselves); past it, each
record is the plain call."""

BUS_NAMES = ("event", "state")
"""The ``bus`` tag of ``wow.command.publish_failures``."""


class MetricMessageBus(MessageBusDecorator[M, E]):
    """``wow.bus.sent`` and ``wow.bus.received`` of one transport bus (module docstring).

    A send to a bus already closed is not counted (it is refused before anything is
    sent); any other exception of the send (a closed or failing transport) counts as
    ``outcome=error`` and is raised as it is.
    """

    def __init__(
        self, inner: MessageBus[M, E], metrics: Metrics, transport_bus: TransportMessageBus[Any, Any]
    ) -> None:
        super().__init__(inner)
        self.metrics = metrics
        self._transport_bus = transport_bus
        self._kind = inner.topic_kind.value
        self._transport = transport_bus.transport.name

    async def send(self, message: M) -> None:
        if self._transport_bus.closed:
            await self.inner.send(message)  # raises BusClosedError: refused, not sent
            return
        tags = {
            "kind": self._kind,
            "aggregate": str(message.aggregate_id.named_aggregate),
            "transport": self._transport,
            "source": metrics_source.get(),
        }
        try:
            await self.inner.send(message)
        except BaseException:
            self.metrics.increment(SENT_COUNTER, tags={**tags, "outcome": "error"})
            raise
        self.metrics.increment(SENT_COUNTER, tags={**tags, "outcome": "ok"})

    def received(self, exchange: E, subscription: MessageSubscription) -> None:
        self.metrics.increment(
            RECEIVED_COUNTER,
            tags={
                "kind": self._kind,
                "aggregate": str(exchange.message.aggregate_id.named_aggregate),
                "group": subscription.group,
            },
        )


class CommandOutcomeCounts:
    """The counts of the command handler's outcomes (module docstring), bound once.

    :class:`MetricCommandHandler` counts with it; so does a backend's own handler
    decorator that takes the core's place
    (:data:`~wow_core.metrics.RECORDS_COMMAND_OUTCOMES`), with the same names and tags.
    """

    __slots__ = ("_conflicts", "_dropped", "_duplicates", "_metrics", "_publish_failures", "_rejections")

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._conflicts = bound_counter(metrics, VERSION_CONFLICTS)
        self._duplicates = bound_counter(metrics, DUPLICATES)
        self._dropped = bound_counter(metrics, VOID_DROPPED)
        self._publish_failures = {
            bus: bound_counter(metrics, PUBLISH_FAILURES, {"bus": bus}) for bus in BUS_NAMES
        }
        self._rejections: dict[str, Record] = {}

    def count(self, outcome: CommandOutcome) -> None:
        """Count ``outcome`` (a success with no conflict counts nothing)."""
        if outcome.conflicts:
            self._conflicts(float(outcome.conflicts))
        for bus in outcome.publish_failures:
            add = self._publish_failures.get(bus)
            if add is None:
                self._metrics.increment(PUBLISH_FAILURES, tags={"bus": bus})
            else:
                add(1.0)
        if outcome.duplicate:
            self._duplicates(1.0)
        elif outcome.error_code:
            code = outcome.error_code
            add = self._rejections.get(code)
            if add is None:
                if len(self._rejections) >= _MAX_CACHED_TAGS:
                    self._metrics.increment(REJECTIONS, tags={"code": code})
                    return
                add = self._rejections[code] = bound_counter(self._metrics, REJECTIONS, {"code": code})
            add(1.0)

    def dropped(self) -> None:
        """Count a Void command dropped by the dispatcher."""
        self._dropped(1.0)


class MetricCommandHandler(CommandHandlerDecorator):
    """Counts each outcome of the command handler (module docstring).

    Counted from the returned :class:`~wow_core.modeling.CommandOutcome`: a handler
    failure that raises (the event store is down) counts nothing, not even the version
    conflicts met before it.
    """

    def __init__(self, inner: CommandKernel, metrics: Metrics) -> None:
        super().__init__(inner)
        self.metrics = metrics
        self._counts = CommandOutcomeCounts(metrics)

    async def process(self, command: CommandMessage[Any]) -> CommandOutcome:
        outcome = await self.inner.process(command)
        if outcome.conflicts or outcome.publish_failures or outcome.duplicate or outcome.error_code:
            self._counts.count(outcome)
        return outcome

    def dropped(self, command: CommandMessage[Any]) -> None:
        self.inner.dropped(command)
        self._counts.dropped()


class MetricDecodeFailureHandler(DecodeFailureHandlerDecorator):
    """``wow.transport.decode_failures`` of one transport bus's policy (module docstring).

    Counted once the inner policy returned its action (the dead letter written, or the
    decision to leave the record pending taken), never before; a policy that raises
    counts nothing (the bus leaves the record pending and logs it). A record delivered
    again is counted again.
    """

    def __init__(self, inner: TransportDecodeFailureHandler, metrics: Metrics) -> None:
        super().__init__(inner)
        self.metrics = metrics

    async def handle(self, failure: DecodeFailure, transport: Transport) -> DecodeFailureAction:
        action = await self.inner.handle(failure, transport)
        self.metrics.increment(
            DECODE_FAILURES, tags={"transport": transport.name, "kind": failure.error.kind.value}
        )
        return action


class MetricLocalFirstObserver(LocalFirstObserver):
    """The ``wow.local_first.*`` figures of one local-first bus (module docstring).

    Each series is bound once (:func:`~wow_core.metrics.bound_counter`,
    :func:`~wow_core.metrics.bound_gauge`) and kept per route or aggregate: a report
    on the hot path (a send, a backlog change) is one lookup and one bound record.
    """

    def __init__(self, metrics: Metrics, bus_name: str) -> None:
        self.metrics = metrics
        self.bus_name = bus_name
        self._filtered = bound_counter(metrics, LOCAL_FIRST_FILTERED, {"bus": bus_name})
        sends_tags = {route: {"bus": bus_name, "outcome": route.value} for route in SendRoute}
        self._sent = dict.fromkeys(SendRoute, 0)

        def sends() -> list[tuple[Tags, float]]:
            return [(sends_tags[route], float(n)) for route, n in list(self._sent.items()) if n]

        if observed_counter(metrics, LOCAL_FIRST_SENDS, sends):
            # the totals are read when the backend collects: a send is one int addition
            self.on_send = self._count_send  # type: ignore[method-assign]
        self._sends = {
            route: bound_counter(metrics, LOCAL_FIRST_SENDS, sends_tags[route]) for route in SendRoute
        }
        self._bound: dict[tuple[str, str, str, bool], Record] = {}
        self._backlogs: dict[NamedAggregate, Record] = {}

    def _record(
        self, metric: str, named_aggregate: NamedAggregate, flag: str = "", value: bool = False
    ) -> Record:
        """The bound counter of ``metric`` for ``named_aggregate`` (and ``flag`` = ``value``)."""
        key = (metric, named_aggregate.key, flag, value)
        record = self._bound.get(key)
        if record is None:
            tags = {"bus": self.bus_name, "aggregate": str(named_aggregate)}
            if flag:
                tags[flag] = "true" if value else "false"
            if len(self._bound) >= _MAX_CACHED_TAGS:
                return bound_counter(self.metrics, metric, tags)
            record = self._bound[key] = bound_counter(self.metrics, metric, tags)
        return record

    def on_send(self, message: Message, route: SendRoute) -> None:
        self._sends[route](1.0)

    def _count_send(self, message: Message, route: SendRoute) -> None:
        self._sent[route] += 1

    def on_filtered(self, exchange: MessageExchange[Any]) -> None:
        self._filtered(1.0)

    def on_copy_sent(self, message: Message, local_first: bool) -> None:
        self._record(COPIES_SENT, message.aggregate_id.named_aggregate, "local_first", local_first)(1.0)

    def on_copy_failed(self, message: Message, handed_off: bool, error: BaseException) -> None:
        self._record(COPY_FAILED, message.aggregate_id.named_aggregate, "handed_off", handed_off)(1.0)

    def on_copies_cancelled(self, named_aggregate: NamedAggregate, count: int) -> None:
        self._record(COPIES_CANCELLED, named_aggregate)(float(count))

    def on_hand_off_timeout(self, message: Message) -> None:
        self._record(HAND_OFF_TIMEOUTS, message.aggregate_id.named_aggregate)(1.0)

    def reads_backlog(self, read: Callable[[], Mapping[NamedAggregate, int]]) -> bool:
        """True with a backend that reads a gauge when it collects
        (:func:`~wow_core.metrics.observed_gauge`, wow-otel's): the backlog is read then,
        not reported on every change; any other backend is told each change."""
        tags: dict[NamedAggregate, Tags] = {}

        def series() -> list[tuple[Tags, float]]:
            found = []
            for named_aggregate, backlog in list(read().items()):
                named_tags = tags.get(named_aggregate)
                if named_tags is None:
                    named_tags = {"bus": self.bus_name, "aggregate": str(named_aggregate)}
                    if len(tags) < _MAX_CACHED_TAGS:
                        tags[named_aggregate] = named_tags
                found.append((named_tags, float(backlog)))
            return found

        return observed_gauge(self.metrics, BACKLOG_GAUGE, series)

    def on_backlog(self, named_aggregate: NamedAggregate, backlog: int) -> None:
        record = self._backlogs.get(named_aggregate)
        if record is None:
            # the first report makes the series; it is bound once it exists (a backend
            # may bind an existing series more cheaply)
            tags = {"bus": self.bus_name, "aggregate": str(named_aggregate)}
            self.metrics.gauge(BACKLOG_GAUGE, float(backlog), tags)
            if len(self._backlogs) < _MAX_CACHED_TAGS:
                self._backlogs[named_aggregate] = bound_gauge(self.metrics, BACKLOG_GAUGE, tags)
            return
        record(float(backlog))


class MetricEventProcessingObserver(EventProcessingObserver):
    """``wow.processing.outcomes`` and ``wow.processing.rejected`` (module docstring)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._outcomes: dict[tuple[str, str, str, str, ProcessingOutcome], Record] = {}

    def on_outcome(
        self,
        component: str,
        exchange: FunctionExchange,
        outcome: ProcessingOutcome,
        error: BaseException | None,
        duration: float,
    ) -> None:
        named_aggregate = exchange.message.aggregate_id.named_aggregate
        key = (component, named_aggregate.key, exchange.event_name, exchange.function.processor_name, outcome)
        record = self._outcomes.get(key)
        if record is None:
            tags = {
                "component": component,
                "context": named_aggregate.context_name,
                "aggregate": named_aggregate.aggregate_name,
                "message": key[2],
                "processor": key[3],
                "outcome": outcome.value,
            }
            record = bound_counter(self.metrics, PROCESSING_OUTCOMES, tags)
            if len(self._outcomes) < _MAX_CACHED_TAGS:
                self._outcomes[key] = record
        record(1.0)

    def on_rejected(self, component: str, exchange: MessageExchange[Any], reason: str) -> None:
        self.metrics.increment(PROCESSING_REJECTED, tags={"component": component, "reason": reason})


class MetricsMiddleware(Middleware):
    """The core's metrics (module docstring), written to ``metrics``.

    ``buses=False`` leaves the transport buses undecorated (no ``wow.bus.sent`` or
    ``wow.bus.received``): the runtime passes it for a backend that records the bus
    metrics itself (:data:`~wow_core.metrics.RECORDS_MESSAGING`). ``command_handler=False``
    leaves the command handler undecorated: the runtime passes it for a backend whose
    middleware counts the handler's outcomes itself
    (:data:`~wow_core.metrics.RECORDS_COMMAND_OUTCOMES`).
    """

    def __init__(self, metrics: Metrics, *, buses: bool = True, command_handler: bool = True) -> None:
        self.metrics = metrics
        self.buses = buses
        self.command_handler = command_handler
        self._event_observer = MetricEventProcessingObserver(metrics)

    def decorate_bus(self, bus: MessageBus[Any, Any], layer: BusLayer) -> MessageBus[Any, Any]:
        transport_bus = undecorated(bus)
        if (
            not self.buses
            or layer is not BusLayer.TRANSPORT
            or not isinstance(transport_bus, TransportMessageBus)
        ):
            return bus
        return MetricMessageBus(bus, self.metrics, transport_bus)

    def decorate_command_handler(self, handler: CommandKernel) -> CommandKernel:
        if not self.command_handler:
            return handler
        return MetricCommandHandler(handler, self.metrics)

    def decorate_decode_failure_handler(
        self, handler: TransportDecodeFailureHandler
    ) -> TransportDecodeFailureHandler:
        return MetricDecodeFailureHandler(handler, self.metrics)

    def observe_local_first(self, kind: TopicKind) -> LocalFirstObserver:
        return MetricLocalFirstObserver(self.metrics, kind.value)

    def observe_event_processing(self) -> EventProcessingObserver:
        return self._event_observer
