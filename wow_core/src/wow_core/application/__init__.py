"""Application commands (spec 004): plain commands, plain handlers, a middleware
pipeline, and asynchronous execution through a named transport.

``@asynchronous(transport="payments")`` marks a command; the
:class:`TransportMiddleware` of the producer's :class:`ApplicationCommandBus` queues it
(strictly serialized by a :class:`CommandSerializer`, with only the allowlisted
operation attributes); a :class:`CommandWorker` bound to that transport (``wow worker``)
executes it later. See ``docs/application.md``.
"""

from wow_core.application.bus import ApplicationCommandBus, CommandHandler, CommandMiddleware, Next
from wow_core.application.context import JsonOperationContextSerializer, OperationContextSerializer
from wow_core.application.envelope import CommandEnvelope, class_name
from wow_core.application.errors import (
    ApplicationCommandError,
    CommandRejected,
    CommandSerializationError,
    EnvelopeError,
    NoHandlerError,
    OperationContextError,
    TransportConfigurationError,
    TransportSendException,
)
from wow_core.application.marker import (
    Asynchronous,
    CommandMetadata,
    CommandMetadataProvider,
    ReflectionCommandMetadataProvider,
    asynchronous,
)
from wow_core.application.middleware import TransportMiddleware
from wow_core.application.operation import ExecutionMode, Operation, OperationStatus
from wow_core.application.registry import ApplicationTopicNaming, TransportRegistry
from wow_core.application.serializer import (
    CommandSerializer,
    CommandSerializerSupport,
    CompositeCommandSerializer,
    JsonCommandSerializer,
)
from wow_core.application.settings import ApplicationSettings, RejectionAction
from wow_core.application.wiring import ApplicationCommands
from wow_core.application.worker import CommandWorker, Outcome, RejectionPolicy

__all__ = [
    "ApplicationCommandBus",
    "ApplicationCommandError",
    "ApplicationCommands",
    "ApplicationSettings",
    "ApplicationTopicNaming",
    "Asynchronous",
    "CommandEnvelope",
    "CommandHandler",
    "CommandMetadata",
    "CommandMetadataProvider",
    "CommandMiddleware",
    "CommandRejected",
    "CommandSerializationError",
    "CommandSerializer",
    "CommandSerializerSupport",
    "CommandWorker",
    "CompositeCommandSerializer",
    "EnvelopeError",
    "ExecutionMode",
    "JsonCommandSerializer",
    "JsonOperationContextSerializer",
    "Next",
    "NoHandlerError",
    "Operation",
    "OperationContextError",
    "OperationContextSerializer",
    "OperationStatus",
    "Outcome",
    "ReflectionCommandMetadataProvider",
    "RejectionAction",
    "RejectionPolicy",
    "TransportConfigurationError",
    "TransportMiddleware",
    "TransportRegistry",
    "TransportSendException",
    "asynchronous",
    "class_name",
]

_EXPORTS = {
    name: "wow_core.application.bus"
    if name in ("CommandHandler", "Next")  # type aliases: defined in bus, typed as collections.abc
    else globals()[name].__module__
    for name in __all__
}
"""Each exported name's defining module (what the API reference renders)."""
