"""Commands: the gateway, wait stages and plans, the wait coordinator (the command dispatcher is
beside the kernel, in :mod:`wow_core.modeling.dispatcher`)."""

from wow_core.command.coordinator import WaitCoordinator, Waiter
from wow_core.command.endpoint import WaitContext
from wow_core.command.errors import (
    CommandGatewayError,
    CommandValidationError,
    CommandWaitTimeoutError,
    DuplicateWaitError,
    VoidCommandWaitError,
)
from wow_core.command.gateway import CommandGateway
from wow_core.command.stages import (
    CommandResult,
    CommandStage,
    CommandWait,
    ErrorCodes,
    Violation,
    WaitPlan,
    WaitSignal,
)
from wow_core.command.validation import validate_body

__all__ = [
    "CommandGateway",
    "CommandGatewayError",
    "CommandResult",
    "CommandStage",
    "CommandValidationError",
    "CommandWait",
    "CommandWaitTimeoutError",
    "DuplicateWaitError",
    "ErrorCodes",
    "Violation",
    "VoidCommandWaitError",
    "WaitContext",
    "WaitCoordinator",
    "WaitPlan",
    "WaitSignal",
    "Waiter",
    "validate_body",
]
