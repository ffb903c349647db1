"""wow-py's core: what a service imports, in one place.

::

    from wow_core import WowApp, aggregate, on_command, on_sourcing, Emit, DomainError

``wow_core`` exports what a service is written with: the aggregate model, event
processors, sagas and projections, event filters, the messages and ids, the command
gateway and its waits, the app, runtime, settings and container. Plugin authors import
from :mod:`wow_core.spi`; test helpers and the conformance suites are in
:mod:`wow_core.testing`. Everything else stays importable at its module
(``wow_core.event.dispatcher``...) and is not part of these surfaces.

Importing ``wow_core`` is cheap: each name is imported on first use.
"""

from __future__ import annotations

from wow_core._lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: ``import wow_core`` does not import typing

__version__ = "0.1.0"

if TYPE_CHECKING:
    from wow_core.cluster.intake import CommandIntake
    from wow_core.cluster.wire import CommandReceipt, CommandWire, ReceiptDeduplicator, ReplyTo
    from wow_core.command.errors import CommandValidationError, CommandWaitTimeoutError
    from wow_core.command.gateway import CommandGateway
    from wow_core.command.stages import CommandResult, CommandStage, CommandWait
    from wow_core.event.declare import (
        event_processor,
        on_event,
        on_state_event,
        projection,
        retry,
        stateless_saga,
    )
    from wow_core.event.exchange import FunctionExchange
    from wow_core.event.filter import Next, filter_type, order
    from wow_core.event.function import ComponentKind
    from wow_core.model.aggregate import AggregateId, NamedAggregate
    from wow_core.model.messages import CommandMessage, DomainEvent, StateEvent
    from wow_core.modeling.aggregate import DomainError, Emit, aggregate, on_command, on_sourcing
    from wow_core.runtime.app import WowApp
    from wow_core.runtime.application import transport_registry
    from wow_core.runtime.container import create_container
    from wow_core.runtime.runtime import WowRuntime
    from wow_core.runtime.settings import SettingsError, WowSettings

_EXPORTS = {
    # the aggregate model
    "aggregate": "wow_core.modeling.aggregate",
    "on_command": "wow_core.modeling.aggregate",
    "on_sourcing": "wow_core.modeling.aggregate",
    "Emit": "wow_core.modeling.aggregate",
    "DomainError": "wow_core.modeling.aggregate",
    # event processors, sagas, projections
    "event_processor": "wow_core.event.declare",
    "stateless_saga": "wow_core.event.declare",
    "projection": "wow_core.event.declare",
    "on_event": "wow_core.event.declare",
    "on_state_event": "wow_core.event.declare",
    "retry": "wow_core.event.declare",
    # event filters
    "FunctionExchange": "wow_core.event.exchange",
    "Next": "wow_core.event.filter",
    "filter_type": "wow_core.event.filter",
    "order": "wow_core.event.filter",
    "ComponentKind": "wow_core.event.function",
    # messages and ids
    "AggregateId": "wow_core.model.aggregate",
    "NamedAggregate": "wow_core.model.aggregate",
    "CommandMessage": "wow_core.model.messages",
    "DomainEvent": "wow_core.model.messages",
    "StateEvent": "wow_core.model.messages",
    # sending commands and waiting
    "CommandGateway": "wow_core.command.gateway",
    "CommandWait": "wow_core.command.stages",
    "CommandStage": "wow_core.command.stages",
    "CommandResult": "wow_core.command.stages",
    "CommandValidationError": "wow_core.command.errors",
    "CommandWaitTimeoutError": "wow_core.command.errors",
    # the cluster intake (spec 002)
    "CommandIntake": "wow_core.cluster.intake",
    "CommandWire": "wow_core.cluster.wire",
    "CommandReceipt": "wow_core.cluster.wire",
    "ReplyTo": "wow_core.cluster.wire",
    "ReceiptDeduplicator": "wow_core.cluster.wire",
    # the service, its runtime and settings
    "WowApp": "wow_core.runtime.app",
    "WowRuntime": "wow_core.runtime.runtime",
    "WowSettings": "wow_core.runtime.settings",
    "SettingsError": "wow_core.runtime.settings",
    "create_container": "wow_core.runtime.container",
    "transport_registry": "wow_core.runtime.application",
}

__all__ = [
    "__version__",
    "aggregate",
    "on_command",
    "on_sourcing",
    "Emit",
    "DomainError",
    "event_processor",
    "stateless_saga",
    "projection",
    "on_event",
    "on_state_event",
    "retry",
    "FunctionExchange",
    "Next",
    "filter_type",
    "order",
    "ComponentKind",
    "AggregateId",
    "NamedAggregate",
    "CommandMessage",
    "DomainEvent",
    "StateEvent",
    "CommandGateway",
    "CommandWait",
    "CommandStage",
    "CommandResult",
    "CommandValidationError",
    "CommandWaitTimeoutError",
    "CommandIntake",
    "CommandWire",
    "CommandReceipt",
    "ReplyTo",
    "ReceiptDeduplicator",
    "WowApp",
    "WowRuntime",
    "WowSettings",
    "SettingsError",
    "create_container",
    "transport_registry",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
