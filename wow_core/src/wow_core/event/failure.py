"""The ``FailureRecorder`` SPI (spec 003, "Failure Recording").

After an event function's filter chain terminates, the ``FailureRecordingHandler``
settles its outcome through the application's recorder. The default
(:data:`NONE_RECORDER`) records nothing, so a failure is ``FAILURE_UNRECORDED``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class ProcessingOutcome(StrEnum):
    HANDLED = "HANDLED"
    FAILURE_RECORDED = "FAILURE_RECORDED"
    FAILURE_WAIVED = "FAILURE_WAIVED"
    FAILURE_UNRECORDED = "FAILURE_UNRECORDED"
    RECORDING_FAILED = "RECORDING_FAILED"
    RELEASED = "RELEASED"
    """Not settled: the dispatcher stopped while the function waited (a retry backoff,
    a saga's commands); not recorded, not acknowledged, delivered again."""


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
class FunctionRetry:
    """What ``@retry(...)`` declared on a function for durable compensation.

    ``None`` fields take the recorder's defaults (``WOW_COMPENSATION__RETRY__*`` with the
    compensation module). ``recoverable`` and ``unrecoverable`` are exception types the
    function classifies itself, ahead of the runtime's classification. The in-process
    ``RetryableFilter`` reads none of it.
    """

    enabled: bool = True
    max_retries: int | None = None
    min_backoff: float | None = None
    execution_timeout: float | None = None
    recoverable: tuple[type[BaseException], ...] = ()
    unrecoverable: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        for name in ("max_retries", "min_backoff", "execution_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 0):
                raise ValueError(f"retry({name}=...) must be >= 0, got {value!r}")
        if self.execution_timeout is not None and self.execution_timeout <= 0:
            raise ValueError(f"retry(execution_timeout=...) must be > 0, got {self.execution_timeout!r}")
        for name in ("recoverable", "unrecoverable"):
            for item in getattr(self, name):
                if not (isinstance(item, type) and issubclass(item, BaseException)):
                    raise ValueError(f"retry({name}=...) takes exception classes, got {item!r}")


@dataclass(frozen=True, slots=True)
class ProcessingFailure:
    """A function that failed on one message, after its in-process retries.

    ``recoverability`` is the runtime's classification of ``error`` (``RECOVERABLE``,
    ``UNRECOVERABLE`` or ``UNKNOWN``, the ``ErrorClassifier`` of the pipeline); ``retry``
    is what the function declared with ``@retry(...)``, if anything.
    """

    function: FunctionRef
    message: Any
    error: BaseException
    retry_enabled: bool = True
    compensation_id: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    retry: FunctionRetry | None = None
    recoverability: str = "UNKNOWN"


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


@dataclass(frozen=True, slots=True)
class RecorderParts:
    """What a recorder brings into the service it records for (a durable recorder keeps
    its records as an aggregate of its own, read by its own components).

    ``aggregates`` are hosted like the app's but shared (every service that records with
    it hosts them, none owns them: ``AggregateRegistry.register(shared=True)``),
    ``components`` dispatched like the app's,
    and each of ``installers`` is called with the runtime after the app's installers.
    """

    aggregates: tuple[type[Any], ...] = ()
    components: tuple[object, ...] = ()
    installers: tuple[Callable[[Any], Any], ...] = ()


@runtime_checkable
class ContributingRecorder(Protocol):
    """A :class:`FailureRecorder` that contributes :class:`RecorderParts` to the runtime."""

    def parts(self) -> RecorderParts: ...
