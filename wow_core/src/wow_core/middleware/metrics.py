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

Local buses, local-first buses (whose own ``wow.local_first.*`` figures come from the
bus itself), the gateway and the event store are left undecorated. The runtime does not
install it at all with the no-op backend, so a default runtime wraps nothing.
"""

from __future__ import annotations

from typing import Any, TypeVar

from wow_core.messaging.contract import MessageBus, MessageExchange, MessageSubscription
from wow_core.metrics import Metrics, NoopMetrics, metrics_source
from wow_core.middleware.base import (
    BusLayer,
    CommandHandlerDecorator,
    MessageBusDecorator,
    Middleware,
    undecorated,
)
from wow_core.model import CommandMessage, Message
from wow_core.modeling.kernel import CommandKernel, CommandOutcome
from wow_core.transport.bus import RECEIVED_COUNTER, SENT_COUNTER, TransportMessageBus
from wow_core.transport.decode_failure import DefaultDecodeFailureHandler

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=MessageExchange[Any])

REJECTIONS = "wow.command.rejections"
DUPLICATES = "wow.command.duplicates"
VERSION_CONFLICTS = "wow.command.version_conflicts"
PUBLISH_FAILURES = "wow.command.publish_failures"
VOID_DROPPED = "wow.command.void_dropped"


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


class MetricCommandHandler(CommandHandlerDecorator):
    """Counts each outcome of the command handler (module docstring).

    Counted from the returned :class:`~wow_core.modeling.CommandOutcome`: a handler
    failure that raises (the event store is down) counts nothing, not even the version
    conflicts met before it.
    """

    def __init__(self, inner: CommandKernel, metrics: Metrics) -> None:
        super().__init__(inner)
        self.metrics = metrics

    async def process(self, command: CommandMessage[Any]) -> CommandOutcome:
        outcome = await self.inner.process(command)
        metrics = self.metrics
        if outcome.conflicts:
            metrics.increment(VERSION_CONFLICTS, float(outcome.conflicts))
        for bus in outcome.publish_failures:
            metrics.increment(PUBLISH_FAILURES, tags={"bus": bus})
        if outcome.duplicate:
            metrics.increment(DUPLICATES)
        elif outcome.error_code:
            metrics.increment(REJECTIONS, tags={"code": outcome.error_code})
        return outcome

    def dropped(self, command: CommandMessage[Any]) -> None:
        self.inner.dropped(command)
        self.metrics.increment(VOID_DROPPED)


class MetricsMiddleware(Middleware):
    """The core's metrics (module docstring), written to ``metrics``."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def decorate_bus(self, bus: MessageBus[Any, Any], layer: BusLayer) -> MessageBus[Any, Any]:
        transport_bus = undecorated(bus)
        if layer is not BusLayer.TRANSPORT or not isinstance(transport_bus, TransportMessageBus):
            return bus
        handler = transport_bus.decode_failure_handler
        if isinstance(handler, DefaultDecodeFailureHandler) and isinstance(handler.metrics, NoopMetrics):
            # A default handler built without metrics (by its plugin factory) counts here.
            handler.metrics = self.metrics
        return MetricMessageBus(bus, self.metrics, transport_bus)

    def decorate_command_handler(self, handler: CommandKernel) -> CommandKernel:
        return MetricCommandHandler(handler, self.metrics)
