"""``ApplicationCommands``: what ``wow worker module:attribute`` loads.

It holds the bus (with its middleware and handlers), the command serializer, the
context serializer and the metadata provider that producer and worker share, so that
both sides read one contract. ``wow worker`` accepts an instance, or a function that
takes the process's :class:`~wow_core.application.registry.TransportRegistry` and
returns one (the usual form, since the bus's transport middleware needs the registry)::

    def commands(registry: TransportRegistry) -> ApplicationCommands:
        serializer = JsonCommandSerializer()
        context = JsonOperationContextSerializer(allowlist=["tenant_id"])
        bus = ApplicationCommandBus([TransportMiddleware(registry, serializer, context)])
        bus.register(ChargeCard, charge)
        return ApplicationCommands(bus, serializer, context)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wow_core.application.bus import ApplicationCommandBus
from wow_core.application.context import JsonOperationContextSerializer, OperationContextSerializer
from wow_core.application.marker import CommandMetadataProvider, ReflectionCommandMetadataProvider
from wow_core.application.registry import TransportRegistry
from wow_core.application.serializer import CommandSerializer
from wow_core.application.settings import ApplicationSettings
from wow_core.application.worker import CommandWorker, RejectionPolicy
from wow_core.transport.decode_failure import TransportDecodeFailureHandler

__all__ = ["ApplicationCommands"]


@dataclass(frozen=True, slots=True)
class ApplicationCommands:
    bus: ApplicationCommandBus
    serializer: CommandSerializer
    context_serializer: OperationContextSerializer = field(default_factory=JsonOperationContextSerializer)
    metadata: CommandMetadataProvider = field(default_factory=ReflectionCommandMetadataProvider)
    command_types: tuple[type[Any], ...] = ()
    """Command classes a worker restores besides those with a handler on the bus."""
    worker_attributes: Mapping[str, Any] = field(default_factory=dict)
    """Trusted attributes every worker dispatch carries (they win over transported context)."""

    def worker(
        self,
        registry: TransportRegistry,
        transport_name: str,
        settings: ApplicationSettings,
        *,
        service_name: str,
        concurrency: int | None = None,
        decode_failure_handler: TransportDecodeFailureHandler | None = None,
    ) -> CommandWorker:
        """A worker bound to ``transport_name`` (a :class:`TransportConfigurationError` if
        it is not configured), configured by ``WOW_APPLICATION__WORKER__*``; a record that
        is not an envelope goes to ``decode_failure_handler`` (``wow worker`` passes the
        one of ``WOW_MESSAGING__DECODE_FAILURE``; default: the transport's policy)."""
        transport = registry.get(transport_name)
        worker_settings = settings.worker
        return CommandWorker(
            bus=self.bus,
            serializer=self.serializer,
            context_serializer=self.context_serializer,
            transport=transport,
            transport_name=transport_name,
            topic=registry.topic(transport_name),
            group=worker_settings.group or f"{service_name}.application.{transport_name}",
            metadata=self.metadata,
            command_types=self.command_types,
            attributes=self.worker_attributes,
            policy=RejectionPolicy.from_settings(worker_settings),
            concurrency=concurrency or worker_settings.concurrency,
            shutdown_timeout=worker_settings.shutdown_timeout,
            decode_failure_handler=decode_failure_handler,
        )
