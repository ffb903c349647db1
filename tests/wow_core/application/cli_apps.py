"""Targets of the ``wow worker`` command-line tests."""

from __future__ import annotations

from tests.wow_core.application.commands import ChargeCard, SendReceipt
from wow_core.application import (
    ApplicationCommandBus,
    ApplicationCommands,
    JsonCommandSerializer,
    TransportMiddleware,
    TransportRegistry,
)


def misconfigured(registry: TransportRegistry) -> ApplicationCommands:
    """Handles SendReceipt, marked for 'mail', which the tests do not configure."""
    serializer = JsonCommandSerializer()
    bus = ApplicationCommandBus([TransportMiddleware(registry, serializer)])
    bus.register(ChargeCard, lambda command, operation: None)
    bus.register(SendReceipt, lambda command, operation: None)
    return ApplicationCommands(bus, serializer)


not_commands = "a string"
