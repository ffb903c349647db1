"""Errors the gateway raises (outcomes of a command come back as results instead)."""

from __future__ import annotations

from wow_core.command.stages import CommandStage, Violation, WaitPlan
from wow_core.model import CommandMessage


class CommandGatewayError(RuntimeError):
    """Base of the gateway's errors."""


class VoidCommandWaitError(CommandGatewayError):
    """A Void command with a wait plan that does not support Void commands; nothing was sent."""

    def __init__(self, command: CommandMessage[object], plan: WaitPlan) -> None:
        super().__init__(
            f"command {command.name} {command.id!r} is Void: it can only be waited for until SENT "
            f"(CommandWait.sent()), not {plan}; nothing was sent"
        )
        self.command_id = command.id
        self.plan = plan


class CommandValidationError(CommandGatewayError):
    """The command body has violations (``COMMAND_INVALID``); nothing was sent."""

    code = "COMMAND_INVALID"

    def __init__(self, command: CommandMessage[object], violations: tuple[Violation, ...]) -> None:
        listed = "; ".join(str(v) for v in violations)
        super().__init__(f"command {command.name} {command.id!r} is invalid: {listed}")
        self.command_id = command.id
        self.violations = violations


class CommandWaitTimeoutError(CommandGatewayError, TimeoutError):
    """The deadline passed before the stage waited for was reached.

    The command may still be processed later; only the wait ended.
    """

    def __init__(
        self,
        command: CommandMessage[object],
        plan: WaitPlan,
        last_stage: CommandStage | None,
        timeout: float,
    ) -> None:
        reached = last_stage.value if last_stage is not None else "none (not even SENT)"
        super().__init__(
            f"command {command.name} {command.id!r} to {command.aggregate_id} timed out after "
            f"{timeout:g}s waiting for {plan}; last stage reached: {reached}"
        )
        self.command_id = command.id
        self.command_name = command.name
        self.plan = plan
        self.wait_stage = plan.stage
        self.last_stage = last_stage
        self.timeout = timeout


class DuplicateWaitError(CommandGatewayError):
    """A second wait registered for a command id that is already waited for."""
