"""The event handler of one function: run the chain, settle the outcome, hand errors on
(spec 003, "Failure Recording" and "Acknowledgement and Failure Boundaries").

:class:`FailureRecordingHandler` runs a function exchange through its filter chain and,
*after the chain terminated* (so after the notifier signalled), settles the outcome
through the :class:`~wow_core.event.failure.FailureRecorder`:

* HANDLED: the function succeeded; ``record_success`` runs. Acknowledged.
* FAILURE_RECORDED: the recorder recorded the failure. Acknowledged.
* FAILURE_WAIVED: the recorder chose not to record it. Acknowledged.
* FAILURE_UNRECORDED: no recorder records failures (the default). Acknowledged only
  while ``ack_on_unrecorded_failure`` (``WOW_EVENT__ACK_ON_UNRECORDED_FAILURE``) is true.
* RECORDING_FAILED: recording failed, even after ``record_attempts``. Never acknowledged.
* RELEASED: the dispatcher stopped while the function waited (a retry backoff, a saga's
  commands: :class:`~wow_core.event.stopping.DispatchStopped`). Not a failure: nothing is
  recorded, no error handler runs, never acknowledged, so it is delivered again.

The processing error (the last attempt's, never a "retries exhausted" wrapper) then goes
to the component's :class:`ErrorHandler` (default :class:`LogResumeErrorHandler`), with
a recording error attached (:func:`suppressed`). Each outcome is reported to the
handler's :class:`~wow_core.event.observer.EventProcessingObserver`, if it has one (the
metrics middleware counts it in ``wow.processing.outcomes``). The handler never raises
for a function error: the dispatcher goes on with the other functions and decides the
acknowledgement.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from wow_core.event.exchange import FunctionExchange
from wow_core.event.failure import (
    NONE_RECORDER,
    FailureRecorder,
    ProcessingFailure,
    ProcessingOutcome,
    ProcessingSuccess,
    RecordResult,
)
from wow_core.event.filter import FilterChain
from wow_core.event.observer import EventProcessingObserver
from wow_core.event.retryable import DEFAULT_CLASSIFIER, ErrorClassifier
from wow_core.event.stopping import DispatchStopped

logger = logging.getLogger("wow.event.handler")

_SUPPRESSED = "__wow_suppressed__"


def attach_suppressed(error: BaseException, other: BaseException) -> None:
    """Attach ``other`` to ``error`` (Java's addSuppressed): kept and noted, not raised."""
    found = getattr(error, _SUPPRESSED, None)
    if not isinstance(found, list):
        found = []
        try:
            setattr(error, _SUPPRESSED, found)
        except AttributeError:  # an exception class with __slots__
            return
    found.append(other)
    error.add_note(f"suppressed: {type(other).__name__}: {other}")


def suppressed(error: BaseException) -> list[BaseException]:
    """The errors attached to ``error`` by :func:`attach_suppressed`."""
    found = getattr(error, _SUPPRESSED, None)
    return list(found) if isinstance(found, list) else []


@runtime_checkable
class ErrorHandler(Protocol):
    """A component's error boundary; called once per failed function exchange."""

    async def handle(self, exchange: FunctionExchange, error: BaseException) -> None: ...


class LogResumeErrorHandler:
    """The default: log the error with the exchange, and resume with the next message."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("wow.event.error")

    async def handle(self, exchange: FunctionExchange, error: BaseException) -> None:
        self.log.error("%r failed: %s: %s", exchange, type(error).__name__, error, exc_info=error)


ACKNOWLEDGING = frozenset(
    {ProcessingOutcome.HANDLED, ProcessingOutcome.FAILURE_RECORDED, ProcessingOutcome.FAILURE_WAIVED}
)


@dataclass(frozen=True, slots=True)
class Settled:
    """The outcome of one function exchange and whether it lets the source be acknowledged."""

    outcome: ProcessingOutcome
    acknowledges: bool
    error: BaseException | None = None


Sleep = Callable[[float], Awaitable[None]]


def _record_result(value: object) -> RecordResult:
    """A recorder's answer, checked: anything but a RecordResult (or its name) is a
    recording failure, never silently an acknowledged outcome."""
    if isinstance(value, RecordResult):
        return value
    if isinstance(value, str) and value in RecordResult.__members__:
        return RecordResult(value)
    raise TypeError(f"a FailureRecorder returned {value!r}, not a RecordResult")


_HANDLED = Settled(ProcessingOutcome.HANDLED, True)
_RELEASED = Settled(ProcessingOutcome.RELEASED, False)


@runtime_checkable
class EventFunctionHandler(Protocol):
    """What a dispatcher runs each function exchange through: ``handle(exchange)``,
    which settles it and never raises for a function error.

    :class:`FailureRecordingHandler` is the pipeline's; a middleware decorates it
    (``decorate_event_handler``: a tracing span around each function, with its outcome).
    """

    async def handle(self, exchange: FunctionExchange) -> Settled: ...


HandlerDecorator = Callable[[EventFunctionHandler], EventFunctionHandler]
"""``decorate(handler) -> handler``: what the pipeline applies to each component's handler."""


class FailureRecordingHandler:
    """Runs one function exchange through the chain and settles it. See the module doc.

    ``observer`` hears each settled outcome with its duration; ``None`` (the default)
    calls nothing and reads no clock.
    """

    def __init__(
        self,
        chain: FilterChain,
        *,
        component: str,
        recorder: FailureRecorder = NONE_RECORDER,
        error_handler: ErrorHandler | None = None,
        ack_on_unrecorded_failure: bool = True,
        record_attempts: int = 3,
        record_backoff: float = 0.2,
        observer: EventProcessingObserver | None = None,
        sleep: Sleep = asyncio.sleep,
        classifier: ErrorClassifier | None = None,
    ) -> None:
        if record_attempts < 1:
            raise ValueError("record_attempts must be >= 1")
        self.chain = chain
        self.component = component
        self.recorder = recorder
        self.error_handler: ErrorHandler = error_handler or LogResumeErrorHandler()
        self.ack_on_unrecorded_failure = ack_on_unrecorded_failure
        self.record_attempts = record_attempts
        self.record_backoff = record_backoff
        self.observer = observer
        self._sleep = sleep
        self.classifier = classifier or DEFAULT_CLASSIFIER

    async def handle(self, exchange: FunctionExchange) -> Settled:
        observer = self.observer
        started = time.perf_counter() if observer is not None else 0.0
        try:
            await self.chain.invoke(exchange)
        except Exception as error:
            settled = await self._settle_failure(exchange, error)
        except DispatchStopped as stopped:
            logger.info("%r released for redelivery: the dispatcher stops (%s)", exchange, stopped)
            settled = _RELEASED
        else:
            settled = await self._settle_success(exchange) if self.recorder.records_failures else _HANDLED
        if observer is not None:
            observer.on_outcome(
                self.component, exchange, settled.outcome, settled.error, time.perf_counter() - started
            )
        if logger.isEnabledFor(logging.DEBUG):
            message = exchange.message
            logger.debug(
                "%s %s: %s %s v%d of %s (command %s): %s",
                self.component,
                exchange.function.qualified_name,
                message.name,
                exchange.stream.id,
                exchange.stream.version,
                message.aggregate_id,
                exchange.stream.command_id,
                settled.outcome.value,
            )
        return settled

    async def _settle_success(self, exchange: FunctionExchange) -> Settled:
        """Record a success (a recorder that records no failures keeps no successes either)."""
        try:
            await self.recorder.record_success(
                ProcessingSuccess(
                    exchange.function.ref,
                    exchange.message,
                    exchange.compensation.compensation_id if exchange.compensation else None,
                )
            )
        except Exception:
            # The function's work is done and cannot be undone; a lost success record
            # leaves a compensation record open, which compensation itself retries.
            logger.warning("%r: record_success failed", exchange, exc_info=True)
        return _HANDLED

    async def _settle_failure(self, exchange: FunctionExchange, error: Exception) -> Settled:
        failure = ProcessingFailure(
            exchange.function.ref,
            exchange.message,
            error,
            retry_enabled=exchange.function.retry_enabled,
            compensation_id=exchange.compensation.compensation_id if exchange.compensation else None,
            attributes={"component": self.component, "attempts": str(exchange.attempts)},
            retry=exchange.function.retry,
            recoverability=self.classifier.classify(error).value,
        )
        recording_error: Exception | None = None
        result: RecordResult | None = None
        for attempt in range(1, self.record_attempts + 1):
            try:
                result = _record_result(await self.recorder.record_failure(failure))
                break
            except Exception as failed:
                recording_error = failed
                if attempt < self.record_attempts:
                    await self._sleep(self.record_backoff * attempt)
        if result is None:
            outcome = ProcessingOutcome.RECORDING_FAILED
            assert recording_error is not None
            attach_suppressed(error, recording_error)
        elif result is RecordResult.RECORDED:
            outcome = ProcessingOutcome.FAILURE_RECORDED
        elif result is RecordResult.WAIVED:
            outcome = ProcessingOutcome.FAILURE_WAIVED
        else:
            outcome = ProcessingOutcome.FAILURE_UNRECORDED
        if outcome is ProcessingOutcome.FAILURE_UNRECORDED:
            acknowledges = self.ack_on_unrecorded_failure
        else:
            acknowledges = outcome in ACKNOWLEDGING
        try:
            await self.error_handler.handle(exchange, error)
        except Exception:
            logger.exception("%s error handler failed on %r", self.component, exchange)
        return Settled(outcome, acknowledges, error)
