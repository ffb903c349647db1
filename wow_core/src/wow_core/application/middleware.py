"""``TransportMiddleware``: where an asynchronous command leaves the process.

In the default execution mode, a command whose marker names a transport is serialized
(command and allowlisted context), wrapped in a
:class:`~wow_core.application.envelope.CommandEnvelope` and sent on that transport's
topic, keyed by the operation id; the pipeline stops there (the operation is
``QUEUED``; nothing inside this middleware runs on the producer). In
:attr:`~wow_core.application.operation.ExecutionMode.SYNC`, which is how a worker
re-dispatches, and for a command without the marker, it passes the operation on.

Failures are told apart: a configuration error (the transport name is not configured)
is a :class:`~wow_core.application.errors.TransportConfigurationError`; a serialization
failure propagates as it is (nothing was sent); only an error raised by the
transport's ``send`` becomes a :class:`~wow_core.application.errors.TransportSendException`,
which is not retryable by default, because the command may have been accepted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from wow_core.application.context import JsonOperationContextSerializer, OperationContextSerializer
from wow_core.application.envelope import CommandEnvelope, class_name
from wow_core.application.errors import TransportSendException
from wow_core.application.marker import CommandMetadataProvider, ReflectionCommandMetadataProvider
from wow_core.application.operation import ExecutionMode, Operation
from wow_core.application.registry import TransportRegistry
from wow_core.application.serializer import CommandSerializer
from wow_core.transport.spi import TransportMessage

if TYPE_CHECKING:
    from wow_core.application.bus import ApplicationCommandBus, Next

__all__ = ["TransportMiddleware"]


class TransportMiddleware:
    """See the module docstring."""

    __slots__ = ("context_serializer", "metadata", "registry", "serializer")

    def __init__(
        self,
        registry: TransportRegistry,
        serializer: CommandSerializer,
        context_serializer: OperationContextSerializer | None = None,
        metadata: CommandMetadataProvider | None = None,
    ) -> None:
        self.registry = registry
        self.serializer = serializer
        self.context_serializer = context_serializer or JsonOperationContextSerializer()
        self.metadata = metadata or ReflectionCommandMetadataProvider()

    def validate(self, bus: ApplicationCommandBus) -> None:
        """Every asynchronous command the bus handles names a configured transport."""
        for command_type in bus.command_types:
            transport = self.metadata.metadata_of(command_type).transport
            if transport is not None:
                self.registry.get(transport)

    async def __call__(self, operation: Operation, next: Next) -> Any:
        if operation.execution_mode is ExecutionMode.SYNC:
            return await next(operation)
        name = self.metadata.metadata_of(type(operation.command)).transport
        if name is None:
            return await next(operation)
        transport = self.registry.get(name)
        topic = self.registry.topic(name)
        envelope = CommandEnvelope(
            operation_id=operation.operation_id,
            command_class=class_name(type(operation.command)),
            payload=self.serializer.serialize(operation.command),
            context=self.context_serializer.serialize(operation),
        )
        message = TransportMessage(
            topic=topic,
            key=operation.operation_id,
            payload=envelope.encode(),
            timestamp=int(time.time() * 1000),
        )
        try:
            await transport.send(message)
        except Exception as error:
            raise TransportSendException(name, operation.operation_id, error) from error
        operation.queued(name)
        return None
