"""From processing signals to the gateway's ``WaitCoordinator``.

:class:`CoordinatorNotifier` is the :class:`~wow_core.event.notifier.WaitNotifier` the
runtime gives the notifier filters. It turns a function's signal into a
:class:`~wow_core.command.stages.WaitSignal` of the same stage, naming the function, and
routes it by the wait endpoint of the stream's header
(:meth:`~wow_core.command.WaitCoordinator.route`): to the coordinator of this process (a
plain call: nobody waiting means it is dropped), or to the waiting caller's process
through the ``CommandWaitNotifier`` (fire and forget).

A successful signal is forwarded only for the *last* event of the stream that the
function handles, so a caller waiting for ``PROJECTED`` is released once that projection
handled all of its command's events it handles, not after the first (but a saga's
signal that lists commands it sent goes through for a chain wait, which follows them). A
failure is forwarded at once (error code ``PROCESSING_ERROR`` unless the error carries an
``error_code``), so a caller learns of it without waiting for its deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.endpoint import WAIT_TAIL_STAGE
from wow_core.command.stages import CommandStage, ErrorCodes, WaitSignal
from wow_core.event.function_filter import SagaCommandError, saga_commands
from wow_core.event.notifier import ProcessingSignal, ProcessingStage


def error_code_of(error: BaseException) -> str:
    code = getattr(error, "error_code", None) or getattr(error, "code", None)
    return code if isinstance(code, str) and code else ErrorCodes.PROCESSING_ERROR


def _sent_commands(signal: ProcessingSignal) -> tuple[str, ...]:
    if signal.stage is not ProcessingStage.SAGA_HANDLED or signal.error is not None:
        return ()
    try:
        return tuple(command.id for command in saga_commands(signal.result))
    except SagaCommandError:
        return ()


def wait_signal_of(signal: ProcessingSignal) -> WaitSignal:
    result: Mapping[str, Any] = signal.result if isinstance(signal.result, Mapping) else {}
    error = signal.error
    return WaitSignal(
        command_id=signal.command_id,
        stage=CommandStage(signal.stage.value),
        aggregate_id=signal.aggregate_id,
        aggregate_version=signal.aggregate_version,
        result=result,
        error_code=error_code_of(error) if error is not None else ErrorCodes.SUCCEEDED,
        error_msg=f"{type(error).__name__}: {error}" if error is not None else "",
        context_name=signal.function.context_name,
        processor_name=signal.function.processor_name,
        function_name=signal.function.function_name,
        is_last=signal.is_last,
        commands=_sent_commands(signal),
    )


class CoordinatorNotifier:
    """Signals the ``WaitCoordinator``; see the module doc for which signals go through."""

    __slots__ = ("coordinator",)

    def __init__(self, coordinator: WaitCoordinator) -> None:
        self.coordinator = coordinator

    def interested(self, command_id: str, header: Mapping[str, str]) -> bool:
        return self.coordinator.wants(command_id, header)

    def notify(self, signal: ProcessingSignal) -> None:
        if (
            signal.error is None
            and not signal.is_last
            and not (
                signal.stage is ProcessingStage.SAGA_HANDLED
                and WAIT_TAIL_STAGE in signal.header
                and bool(signal.result)
            )
        ):
            return
        if not self.coordinator.wants(signal.command_id, signal.header):
            return
        self.coordinator.route(signal.header, wait_signal_of(signal))
