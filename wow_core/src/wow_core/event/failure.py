"""The ``FailureRecorder`` SPI (spec 003, "Failure Recording").

After an event function's filter chain terminates, the ``FailureRecordingHandler``
settles its outcome through the application's recorder. The default
(:data:`NONE_RECORDER`) records nothing, so a failure is ``FAILURE_UNRECORDED``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class ProcessingOutcome(StrEnum):
    HANDLED = "HANDLED"
    FAILURE_RECORDED = "FAILURE_RECORDED"
    FAILURE_WAIVED = "FAILURE_WAIVED"
    FAILURE_UNRECORDED = "FAILURE_UNRECORDED"
    RECORDING_FAILED = "RECORDING_FAILED"


class RecordResult(StrEnum):
    """What a recorder did with a failure."""

    RECORDED = "RECORDED"
    WAIVED = "WAIVED"
    UNRECORDED = "UNRECORDED"


@dataclass(frozen=True, slots=True)
class FunctionRef:
    """Which event function ran: the keys of a compensation record."""

    context_name: str
    processor_name: str
    function_name: str
    function_kind: str


@dataclass(frozen=True, slots=True)
class ProcessingFailure:
    """A function that failed on one message, after its in-process retries."""

    function: FunctionRef
    message: Any
    error: BaseException
    retry_enabled: bool = True
    compensation_id: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProcessingSuccess:
    """A function that succeeded; ``compensation_id`` is set when it was a compensation."""

    function: FunctionRef
    message: Any
    compensation_id: str | None = None


@runtime_checkable
class FailureRecorder(Protocol):
    """Records failed event-function executions durably (for compensation)."""

    @property
    def records_failures(self) -> bool:
        """False for the recorder that records nothing."""
        ...

    async def record_failure(self, failure: ProcessingFailure) -> RecordResult: ...

    async def record_success(self, success: ProcessingSuccess) -> None: ...


class NoneFailureRecorder:
    """``FailureRecorder.NONE``: records nothing."""

    records_failures = False

    async def record_failure(self, failure: ProcessingFailure) -> RecordResult:
        return RecordResult.UNRECORDED

    async def record_success(self, success: ProcessingSuccess) -> None:
        return None


NONE_RECORDER = NoneFailureRecorder()
