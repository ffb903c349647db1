"""The ``ExecutionFailed`` aggregate: one failed execution of one event function.

It lives in its own bounded context, ``compensation`` (aggregate ``execution_failed``),
and is event-sourced like any aggregate of the service: on the configured event store,
its commands and events on the configured transport. Its id is derived from the event
and the function (:func:`execution_id`), so the same failure of the same function on
the same event is one record, however often it is reported.

States::

    (created) --> FAILED --prepare / force prepare--> PREPARED --failure applied--> FAILED
                                                      PREPARED --success applied--> SUCCEEDED

A command that does not fit the state (prepare on SUCCEEDED, applying a success to a
record that was not prepared...) is refused with a :class:`~wow_core.modeling.DomainError`
naming the state; nothing is written. Times are epoch milliseconds, carried in the
commands, so a command decides the same way whenever it is decided again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from enum import StrEnum

from wow_core.model import NamedAggregate
from wow_core.modeling import DomainError, aggregate, on_command, on_sourcing

CONTEXT = "compensation"
AGGREGATE = "execution_failed"
EXECUTION_FAILED = NamedAggregate(CONTEXT, AGGREGATE)
"""The named aggregate of the records: ``compensation.execution_failed``."""

_ID_NAMESPACE = uuid.UUID("6f1d7c1e-51e7-4c1b-9a57-2f0e8b7a3c11")


class ExecutionFailedStatus(StrEnum):
    FAILED = "FAILED"
    PREPARED = "PREPARED"
    SUCCEEDED = "SUCCEEDED"


class Recoverable(StrEnum):
    """Whether compensating is worth it: the scheduler retries RECOVERABLE and UNKNOWN."""

    RECOVERABLE = "RECOVERABLE"
    UNKNOWN = "UNKNOWN"
    UNRECOVERABLE = "UNRECOVERABLE"


class FunctionKindName(StrEnum):
    EVENT = "EVENT"
    STATE_EVENT = "STATE_EVENT"


@dataclass(frozen=True)
class EventRef:
    """The event that failed: where it is in the event store and what it was."""

    context_name: str
    aggregate_name: str
    aggregate_id: str
    tenant_id: str
    version: int
    event_id: str
    event_name: str
    stream_id: str = ""

    @property
    def aggregate(self) -> str:
        return f"{self.context_name}.{self.aggregate_name}"


@dataclass(frozen=True)
class FunctionInfo:
    """The function that failed: the names compensation selects it by."""

    context_name: str
    processor_name: str
    function_name: str
    function_kind: FunctionKindName

    @property
    def qualified_name(self) -> str:
        return f"{self.context_name}.{self.processor_name}.{self.function_name}"


@dataclass(frozen=True)
class ErrorInfo:
    """What went wrong (message and stack trace bounded in size when recorded)."""

    error_type: str
    message: str
    stack_trace: str = ""


@dataclass(frozen=True)
class RetrySpec:
    """How a record is compensated (seconds); from ``@retry(...)`` and the settings."""

    enabled: bool = True
    max_retries: int = 10
    min_backoff: float = 180.0
    execution_timeout: float = 120.0
    max_backoff: float = 86_400.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.min_backoff < 0 or self.execution_timeout <= 0:
            raise ValueError("max_retries and min_backoff must be >= 0, execution_timeout > 0")
        if self.max_backoff < self.min_backoff:
            raise ValueError("max_backoff must be >= min_backoff")

    def backoff_ms(self, retries: int) -> int:
        """The wait after attempt ``retries``: ``min_backoff * 2**retries``, capped."""
        return int(min(self.min_backoff * 2.0 ** min(retries, 62), self.max_backoff) * 1000)

    def retry_state(self, retries: int, at: int) -> RetryState:
        return RetryState(
            retries=retries,
            retry_at=at,
            timeout_at=at + int(self.execution_timeout * 1000),
            next_retry_at=at + self.backoff_ms(retries),
        )


@dataclass(frozen=True)
class RetryState:
    """``retries`` compensations so far; the last started at ``retry_at``, is timed out
    at ``timeout_at``; the next is due at ``next_retry_at`` (epoch ms)."""

    retries: int = 0
    retry_at: int = 0
    timeout_at: int = 0
    next_retry_at: int = 0


@dataclass(frozen=True)
class ExecutionFailedState:
    id: str = ""
    event: EventRef | None = None
    function: FunctionInfo | None = None
    error: ErrorInfo | None = None
    execute_at: int = 0
    recoverable: Recoverable = Recoverable.UNKNOWN
    retry_spec: RetrySpec = RetrySpec()
    retry_state: RetryState = RetryState()
    status: ExecutionFailedStatus = ExecutionFailedStatus.FAILED

    def timed_out(self, at: int) -> bool:
        return self.status is ExecutionFailedStatus.PREPARED and self.retry_state.timeout_at <= at

    def can_retry(self, at: int) -> bool:
        """Preparable now, by the scheduler's rules (due or not)."""
        return (
            (self.status is ExecutionFailedStatus.FAILED or self.timed_out(at))
            and self.recoverable is not Recoverable.UNRECOVERABLE
            and self.retry_state.retries < self.retry_spec.max_retries
        )

    def is_due(self, at: int) -> bool:
        """What the scheduler takes: preparable and its next retry (or timeout) reached."""
        if not self.can_retry(at):
            return False
        if self.status is ExecutionFailedStatus.PREPARED:
            return True  # timed out
        return self.retry_state.next_retry_at <= at


# -- commands -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateExecutionFailed:
    event: EventRef
    function: FunctionInfo
    error: ErrorInfo
    execute_at: int
    recoverable: Recoverable
    retry_spec: RetrySpec


@dataclass(frozen=True)
class PrepareCompensation:
    """Start a compensation, within the rules: not past the cap, not UNRECOVERABLE.

    ``due_only`` (the scheduler's): only when the record is due at ``at``, so two
    schedulers that read the same due record cannot both prepare it.
    """

    at: int
    due_only: bool = False


@dataclass(frozen=True)
class ForcePrepareCompensation:
    """Start a compensation past the cap and whatever its recoverability (an operator's call)."""

    at: int


@dataclass(frozen=True)
class ApplyExecutionFailed:
    error: ErrorInfo
    execute_at: int
    recoverable: Recoverable


@dataclass(frozen=True)
class ApplyExecutionSuccess:
    execute_at: int


@dataclass(frozen=True)
class ApplyRetrySpec:
    retry_spec: RetrySpec


@dataclass(frozen=True)
class MarkRecoverable:
    recoverable: Recoverable


@dataclass(frozen=True)
class ChangeFunction:
    function: FunctionInfo


# -- events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionFailedCreated:
    event: EventRef
    function: FunctionInfo
    error: ErrorInfo
    execute_at: int
    recoverable: Recoverable
    retry_spec: RetrySpec
    retry_state: RetryState


@dataclass(frozen=True)
class CompensationPrepared:
    retry_state: RetryState
    forced: bool = False


@dataclass(frozen=True)
class ExecutionFailedApplied:
    error: ErrorInfo
    execute_at: int
    recoverable: Recoverable


@dataclass(frozen=True)
class ExecutionSuccessApplied:
    execute_at: int


@dataclass(frozen=True)
class RetrySpecApplied:
    retry_spec: RetrySpec
    retry_state: RetryState


@dataclass(frozen=True)
class RecoverableMarked:
    recoverable: Recoverable


@dataclass(frozen=True)
class FunctionChanged:
    function: FunctionInfo


def execution_id(event_id: str, function: FunctionInfo) -> str:
    """The record id of ``function`` failing on the event ``event_id`` (stable)."""
    key = f"{event_id}|{function.qualified_name}|{function.function_kind.value}"
    return uuid.uuid5(_ID_NAMESPACE, key).hex


class Refused:
    """The codes of the refusals (``DomainError.code``)."""

    SUCCEEDED = "EXECUTION_SUCCEEDED"
    IN_PROGRESS = "COMPENSATION_IN_PROGRESS"
    UNRECOVERABLE = "EXECUTION_UNRECOVERABLE"
    RETRIES_EXHAUSTED = "RETRIES_EXHAUSTED"
    NOT_PREPARED = "NOT_PREPARED"
    UNCHANGED = "UNCHANGED"
    NOT_DUE = "NOT_DUE"


@aggregate(CONTEXT, AGGREGATE, state=ExecutionFailedState)
class ExecutionFailed:
    """The record of one failed execution; see the module doc for the state machine."""

    @on_command(create=True)
    def create(self, state: ExecutionFailedState, body: CreateExecutionFailed) -> ExecutionFailedCreated:
        return ExecutionFailedCreated(
            body.event,
            body.function,
            body.error,
            body.execute_at,
            body.recoverable,
            body.retry_spec,
            body.retry_spec.retry_state(0, body.execute_at),
        )

    @staticmethod
    def _open(state: ExecutionFailedState, at: int) -> None:
        if state.status is ExecutionFailedStatus.SUCCEEDED:
            raise DomainError(Refused.SUCCEEDED, f"execution {state.id} already succeeded")
        if state.status is ExecutionFailedStatus.PREPARED and not state.timed_out(at):
            raise DomainError(
                Refused.IN_PROGRESS,
                f"execution {state.id} is PREPARED: its compensation runs until "
                f"{state.retry_state.timeout_at}",
            )

    @on_command
    def prepare(self, state: ExecutionFailedState, body: PrepareCompensation) -> CompensationPrepared:
        self._open(state, body.at)
        if state.recoverable is Recoverable.UNRECOVERABLE:
            raise DomainError(
                Refused.UNRECOVERABLE, f"execution {state.id} is UNRECOVERABLE (force prepare overrides it)"
            )
        if state.retry_state.retries >= state.retry_spec.max_retries:
            raise DomainError(
                Refused.RETRIES_EXHAUSTED,
                f"execution {state.id} was retried {state.retry_state.retries} times, "
                f"the cap is {state.retry_spec.max_retries} (force prepare overrides it)",
            )
        if body.due_only and not state.is_due(body.at):
            raise DomainError(
                Refused.NOT_DUE,
                f"execution {state.id} is not due: its next retry is at {state.retry_state.next_retry_at}",
            )
        return CompensationPrepared(state.retry_spec.retry_state(state.retry_state.retries + 1, body.at))

    @on_command
    def force_prepare(
        self, state: ExecutionFailedState, body: ForcePrepareCompensation
    ) -> CompensationPrepared:
        self._open(state, body.at)
        return CompensationPrepared(
            state.retry_spec.retry_state(state.retry_state.retries + 1, body.at), forced=True
        )

    @staticmethod
    def _prepared(state: ExecutionFailedState, what: str) -> None:
        if state.status is not ExecutionFailedStatus.PREPARED:
            raise DomainError(
                Refused.NOT_PREPARED, f"execution {state.id} is {state.status.value}: {what} needs PREPARED"
            )

    @on_command
    def apply_failed(self, state: ExecutionFailedState, body: ApplyExecutionFailed) -> ExecutionFailedApplied:
        self._prepared(state, "applying a failure")
        return ExecutionFailedApplied(body.error, body.execute_at, body.recoverable)

    @on_command
    def apply_success(
        self, state: ExecutionFailedState, body: ApplyExecutionSuccess
    ) -> ExecutionSuccessApplied:
        self._prepared(state, "applying a success")
        return ExecutionSuccessApplied(body.execute_at)

    @staticmethod
    def _not_succeeded(state: ExecutionFailedState) -> None:
        if state.status is ExecutionFailedStatus.SUCCEEDED:
            raise DomainError(Refused.SUCCEEDED, f"execution {state.id} already succeeded")

    @on_command
    def apply_retry_spec(self, state: ExecutionFailedState, body: ApplyRetrySpec) -> RetrySpecApplied:
        self._not_succeeded(state)
        if body.retry_spec == state.retry_spec:
            raise DomainError(Refused.UNCHANGED, f"execution {state.id} has this retry spec already")
        retries = state.retry_state.retries
        # The next retry is re-planned from the last attempt with the new backoff.
        planned = body.retry_spec.retry_state(retries, state.retry_state.retry_at)
        return RetrySpecApplied(
            body.retry_spec, replace(state.retry_state, next_retry_at=planned.next_retry_at)
        )

    @on_command
    def mark_recoverable(self, state: ExecutionFailedState, body: MarkRecoverable) -> RecoverableMarked:
        self._not_succeeded(state)
        if body.recoverable is state.recoverable:
            raise DomainError(Refused.UNCHANGED, f"execution {state.id} is {state.recoverable.value} already")
        return RecoverableMarked(body.recoverable)

    @on_command
    def change_function(self, state: ExecutionFailedState, body: ChangeFunction) -> FunctionChanged:
        self._not_succeeded(state)
        if body.function == state.function:
            raise DomainError(Refused.UNCHANGED, f"execution {state.id} targets this function already")
        return FunctionChanged(body.function)

    # -- sourcing -------------------------------------------------------------------------

    def initial_state(self, aggregate_id: object) -> ExecutionFailedState:
        return ExecutionFailedState(id=getattr(aggregate_id, "id", ""))

    @on_sourcing
    def created(self, state: ExecutionFailedState, event: ExecutionFailedCreated) -> ExecutionFailedState:
        return replace(
            state,
            event=event.event,
            function=event.function,
            error=event.error,
            execute_at=event.execute_at,
            recoverable=event.recoverable,
            retry_spec=event.retry_spec,
            retry_state=event.retry_state,
            status=ExecutionFailedStatus.FAILED,
        )

    @on_sourcing
    def prepared(self, state: ExecutionFailedState, event: CompensationPrepared) -> ExecutionFailedState:
        return replace(state, retry_state=event.retry_state, status=ExecutionFailedStatus.PREPARED)

    @on_sourcing
    def failed_applied(
        self, state: ExecutionFailedState, event: ExecutionFailedApplied
    ) -> ExecutionFailedState:
        return replace(
            state,
            error=event.error,
            execute_at=event.execute_at,
            recoverable=event.recoverable,
            status=ExecutionFailedStatus.FAILED,
        )

    @on_sourcing
    def success_applied(
        self, state: ExecutionFailedState, event: ExecutionSuccessApplied
    ) -> ExecutionFailedState:
        return replace(state, execute_at=event.execute_at, status=ExecutionFailedStatus.SUCCEEDED)

    @on_sourcing
    def retry_spec_applied(
        self, state: ExecutionFailedState, event: RetrySpecApplied
    ) -> ExecutionFailedState:
        return replace(state, retry_spec=event.retry_spec, retry_state=event.retry_state)

    @on_sourcing
    def recoverable_marked(
        self, state: ExecutionFailedState, event: RecoverableMarked
    ) -> ExecutionFailedState:
        return replace(state, recoverable=event.recoverable)

    @on_sourcing
    def function_changed(self, state: ExecutionFailedState, event: FunctionChanged) -> ExecutionFailedState:
        return replace(state, function=event.function)
