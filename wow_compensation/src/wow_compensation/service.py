"""Writing to the records: :class:`CompensationCommands`.

Every change to a record is a command to its ``ExecutionFailed`` aggregate, decided by
the process's command kernel directly (every instance of every service that uses the
module hosts the aggregate): the record is in the event store when the call returns,
and its events go out on the buses like any aggregate's. A refusal (an unknown id, a
command that does not fit the state) raises :class:`ActionRefused` with the kernel's
code and message; nothing was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from wow_compensation.model import (
    EXECUTION_FAILED,
    ApplyRetrySpec,
    ChangeFunction,
    ExecutionFailedState,
    ForcePrepareCompensation,
    FunctionInfo,
    MarkRecoverable,
    PrepareCompensation,
    Recoverable,
    RetrySpec,
)
from wow_compensation.store import CompensationStore, ExecutionRecord, now_ms
from wow_core.command.stages import ErrorCodes
from wow_core.model import AggregateId, CommandMessage
from wow_core.modeling.registry import AggregateRegistry


class ActionRefused(Exception):
    """A command to a record that was refused: ``code`` is the kernel's error code."""

    def __init__(self, record_id: str, code: str, message: str) -> None:
        super().__init__(f"{record_id}: {code}: {message}" if message else f"{record_id}: {code}")
        self.record_id = record_id
        self.code = code
        self.message = message


class UnknownExecutionError(ActionRefused):
    """No record has this id."""


class CommandProcessor(Protocol):
    """The command kernel (or its middleware-decorated form)."""

    async def process(self, command: CommandMessage[Any]) -> Any: ...


@dataclass(frozen=True)
class Written:
    """What a command did: the record's new state and version (``duplicate``: a repeat
    of a request decided before; the state is then the current one, possibly None)."""

    state: ExecutionFailedState | None
    version: int
    duplicate: bool = False


class CompensationCommands:
    """Sends the commands of the records to the kernel; see the module doc."""

    def __init__(
        self, kernel: CommandProcessor, aggregates: AggregateRegistry, store: CompensationStore | None = None
    ) -> None:
        self.kernel = kernel
        self.aggregates = aggregates
        self.store = store

    def command(
        self, body: object, record_id: str, *, request_id: str = "", expected_version: int | None = None
    ) -> CommandMessage[Any]:
        if self.aggregates.get(EXECUTION_FAILED) is None:
            raise RuntimeError("the ExecutionFailed aggregate is not registered in this runtime")
        command = self.aggregates.command(
            body, record_id, request_id=request_id, aggregate_version=expected_version
        )
        return command

    async def send(
        self, body: object, record_id: str, *, request_id: str = "", expected_version: int | None = None
    ) -> Written:
        outcome = await self.kernel.process(
            self.command(body, record_id, request_id=request_id, expected_version=expected_version)
        )
        code = outcome.error_code
        if code and not outcome.duplicate:
            if code == ErrorCodes.AGGREGATE_NOT_FOUND:
                raise UnknownExecutionError(record_id, code, f"no execution failure has the id {record_id}")
            raise ActionRefused(record_id, code, outcome.error_msg)
        state = outcome.state if isinstance(outcome.state, ExecutionFailedState) else None
        if state is not None and self.store is not None and not outcome.duplicate:
            # The read model at once, not only when the state event is projected: a
            # process killed right after the append still leaves the record listed.
            await self.store.save(ExecutionRecord(state, outcome.version, now_ms()))
        return Written(state, outcome.version, bool(outcome.duplicate))

    # -- the operator's actions -----------------------------------------------------------

    async def prepare(self, record_id: str, *, due_only: bool = False) -> Written:
        """Prepare within the rules (``due_only``: and only if due: the scheduler's)."""
        return await self.send(PrepareCompensation(now_ms(), due_only), record_id)

    async def force_prepare(self, record_id: str) -> Written:
        return await self.send(ForcePrepareCompensation(now_ms()), record_id)

    async def apply_retry_spec(self, record_id: str, spec: RetrySpec) -> Written:
        return await self.send(ApplyRetrySpec(spec), record_id)

    async def mark_recoverable(self, record_id: str, recoverable: Recoverable) -> Written:
        return await self.send(MarkRecoverable(recoverable), record_id)

    async def change_function(self, record_id: str, function: FunctionInfo) -> Written:
        return await self.send(ChangeFunction(function), record_id)


def aggregate_id(record_id: str) -> AggregateId:
    return AggregateId(EXECUTION_FAILED, record_id)
