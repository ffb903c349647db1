"""The origin of a command a saga sent, and the SPI that records its failed hops.

A saga function's commands carry a :class:`SagaOrigin` in their header (``saga.*``):
the saga function and the event it handled. The command dispatcher of the aggregate
that rejects or fails such a command hands it, as a :class:`SagaCommandFailure`, to the
failure recorder when it is a :class:`SagaCommandRecorder` (the compensation module's
is), so a failed hop of a saga is recorded where the command was decided, even in a
process that does not host the saga.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

SAGA_CONTEXT = "saga.context"
SAGA_PROCESSOR = "saga.processor"
SAGA_FUNCTION = "saga.function"
SAGA_FUNCTION_KIND = "saga.function_kind"
SAGA_EVENT_ID = "saga.event.id"
SAGA_EVENT_NAME = "saga.event.name"
SAGA_EVENT_CONTEXT = "saga.event.context"
SAGA_EVENT_AGGREGATE = "saga.event.aggregate"
SAGA_EVENT_AGGREGATE_ID = "saga.event.aggregate_id"
SAGA_EVENT_TENANT_ID = "saga.event.tenant_id"
SAGA_EVENT_VERSION = "saga.event.version"
SAGA_EVENT_STREAM_ID = "saga.event.stream_id"
SAGA_COMPENSATION_ID = "saga.compensation.id"

_SAGA_REQUIRED = (
    SAGA_CONTEXT,
    SAGA_PROCESSOR,
    SAGA_FUNCTION,
    SAGA_FUNCTION_KIND,
    SAGA_EVENT_ID,
    SAGA_EVENT_NAME,
    SAGA_EVENT_CONTEXT,
    SAGA_EVENT_AGGREGATE,
    SAGA_EVENT_AGGREGATE_ID,
    SAGA_EVENT_VERSION,
)
_SAGA_KINDS = ("EVENT", "STATE_EVENT")


class InvalidSagaOriginError(ValueError):
    """A command header that names part of a saga origin, or names it wrongly."""


@dataclass(frozen=True, slots=True)
class SagaOrigin:
    """Which saga function sent a command, on which event (the command's header carries it).

    The command dispatcher of the aggregate that decides the command hands a rejected or
    failed command with its origin to a recorder that records saga hops
    (:class:`~wow_core.event.failure.SagaCommandRecorder`): the failed hop is then a record
    of the saga function on that event, retried by running the saga function again. The
    event is named by where it is in the event store (aggregate, version) so a process
    that does not host the saga can still record it. ``compensation_id`` is set when the
    saga function ran as a compensation: the saga then waits for its commands and settles
    the record itself, so the dispatcher does not record them again.
    """

    context_name: str
    processor_name: str
    function_name: str
    function_kind: str
    event_id: str
    event_name: str
    event_context: str
    event_aggregate: str
    event_aggregate_id: str
    event_version: int
    event_tenant_id: str = ""
    event_stream_id: str = ""
    compensation_id: str = ""

    @classmethod
    def from_header(cls, header: Mapping[str, str]) -> SagaOrigin | None:
        """The origin in ``header``, None for a command no saga sent (no ``saga.*`` key).

        Raises :class:`InvalidSagaOriginError` when the origin is partial or malformed.
        """
        if SAGA_FUNCTION not in header and SAGA_EVENT_ID not in header and SAGA_CONTEXT not in header:
            return None
        missing = [key for key in _SAGA_REQUIRED if not header.get(key)]
        if missing:
            raise InvalidSagaOriginError(f"a saga origin needs {', '.join(missing)} in the command header")
        kind = header[SAGA_FUNCTION_KIND]
        if kind not in _SAGA_KINDS:
            raise InvalidSagaOriginError(f"{SAGA_FUNCTION_KIND} must be EVENT or STATE_EVENT, got {kind!r}")
        try:
            version = int(header[SAGA_EVENT_VERSION])
        except ValueError:
            version = 0
        if version < 1:
            raise InvalidSagaOriginError(
                f"{SAGA_EVENT_VERSION} must be a positive integer, got {header[SAGA_EVENT_VERSION]!r}"
            )
        return cls(
            header[SAGA_CONTEXT],
            header[SAGA_PROCESSOR],
            header[SAGA_FUNCTION],
            kind,
            header[SAGA_EVENT_ID],
            header[SAGA_EVENT_NAME],
            header[SAGA_EVENT_CONTEXT],
            header[SAGA_EVENT_AGGREGATE],
            header[SAGA_EVENT_AGGREGATE_ID],
            version,
            header.get(SAGA_EVENT_TENANT_ID, ""),
            header.get(SAGA_EVENT_STREAM_ID, ""),
            header.get(SAGA_COMPENSATION_ID, ""),
        )

    def to_header(self) -> dict[str, str]:
        header = {
            SAGA_CONTEXT: self.context_name,
            SAGA_PROCESSOR: self.processor_name,
            SAGA_FUNCTION: self.function_name,
            SAGA_FUNCTION_KIND: self.function_kind,
            SAGA_EVENT_ID: self.event_id,
            SAGA_EVENT_NAME: self.event_name,
            SAGA_EVENT_CONTEXT: self.event_context,
            SAGA_EVENT_AGGREGATE: self.event_aggregate,
            SAGA_EVENT_AGGREGATE_ID: self.event_aggregate_id,
            SAGA_EVENT_VERSION: str(self.event_version),
        }
        for key, value in (
            (SAGA_EVENT_TENANT_ID, self.event_tenant_id),
            (SAGA_EVENT_STREAM_ID, self.event_stream_id),
            (SAGA_COMPENSATION_ID, self.compensation_id),
        ):
            if value:
                header[key] = value
        return header


@dataclass(frozen=True, slots=True)
class SagaCommandFailure:
    """A command a saga sent that its aggregate rejected (``error`` None) or failed to
    process (``error`` the exception), with the saga function and event that sent it."""

    origin: SagaOrigin
    command: Any
    error_code: str
    error_msg: str
    error: BaseException | None = None


@runtime_checkable
class SagaCommandRecorder(Protocol):
    """A :class:`FailureRecorder` that also records the failed hops of sagas.

    The command dispatcher calls it, after the kernel decided, for each command whose
    header carries a :class:`~wow_core.event.compensation.SagaOrigin` and that was
    rejected or failed; the command's exchange is acknowledged only once it returned
    (it raises when the record cannot be written: the command is then redelivered).
    """

    async def record_saga_command_failure(self, failure: SagaCommandFailure) -> None: ...
