"""Cross-cutting behaviour as middleware: decorators of buses, gateway, handler, store.

A :class:`Middleware` decorates the runtime's components while the container assembles
them (spec 000, "Metrics and tracing entry points"): every bus of each layer (local,
transport, local-first), the :class:`~wow_core.command.CommandGateway`, the command
handler (the :class:`~wow_core.modeling.CommandKernel`), the
:class:`~wow_core.eventsourcing.EventStore` and the handler every event function runs
through (``decorate_event_handler``, an
:class:`~wow_core.event.handler.EventFunctionHandler`). Each ``decorate_*`` hook returns the
component itself (the default: nothing wrapped, nothing paid) or a decorator built on
the base classes here, whose named hook methods (``send``, ``received``, ``hand_off``,
``send_and_wait``, ``process``, ``dropped``, ``append``, ``load``...) forward to the
decorated component unless overridden.

Decisions made inside a component, which no decorator sees, are reported to observers
a middleware contributes: ``observe_local_first`` (the local-first buses' routes,
copies and backlog) and ``observe_event_processing`` (each event function's settled
outcome, each rejected message).

A decorator forwards everything else exactly: receiver readiness, processing admission,
in-flight counts, quiescence, ``hand_off`` and its receipt, close. Metrics are one such
middleware (:class:`MetricsMiddleware`, active unless the metrics backend is the no-op
one); plugins contribute more through the ``register_middleware`` hook.
"""

from wow_core.middleware.base import (
    BusLayer,
    CommandGatewayDecorator,
    CommandHandlerDecorator,
    DecodeFailureHandlerDecorator,
    EventStoreDecorator,
    LocalMessageBusDecorator,
    MessageBusDecorator,
    MessageReceiverDecorator,
    Middleware,
    MiddlewareFactory,
    decorate_bus,
    decorate_command_handler,
    decorate_decode_failure_handler,
    decorate_event_store,
    decorate_gateway,
    decorate_local_bus,
    event_processing_observer,
    local_first_observer,
    undecorated,
)
from wow_core.middleware.metrics import (
    CommandOutcomeCounts,
    MetricCommandHandler,
    MetricDecodeFailureHandler,
    MetricEventProcessingObserver,
    MetricLocalFirstObserver,
    MetricMessageBus,
    MetricsMiddleware,
)

__all__ = [
    "BusLayer",
    "CommandGatewayDecorator",
    "CommandOutcomeCounts",
    "CommandHandlerDecorator",
    "DecodeFailureHandlerDecorator",
    "EventStoreDecorator",
    "LocalMessageBusDecorator",
    "MessageBusDecorator",
    "MessageReceiverDecorator",
    "MetricCommandHandler",
    "MetricDecodeFailureHandler",
    "MetricEventProcessingObserver",
    "MetricLocalFirstObserver",
    "MetricMessageBus",
    "Middleware",
    "MiddlewareFactory",
    "MetricsMiddleware",
    "decorate_bus",
    "decorate_command_handler",
    "decorate_decode_failure_handler",
    "decorate_event_store",
    "decorate_gateway",
    "decorate_local_bus",
    "event_processing_observer",
    "local_first_observer",
    "undecorated",
]
