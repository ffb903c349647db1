"""``CompensationFailureRecorder``: failures become ``ExecutionFailed`` records (spec 003,
"Failure Recording").

Selected with ``WOW_FAILURE_RECORDER=compensation``. After a function's filter chain
terminated (after the notifier signalled), the handler calls it:

- a function whose ``@retry(enabled=False)`` disables compensation: ``WAIVED``
  (``FAILURE_WAIVED``, acknowledged), nothing written;
- a first failure: ``CreateExecutionFailed`` on the record of that event and function
  (its id derived from both, so a redelivered failure finds the record it made); the
  record is in the event store when ``RECORDED`` is returned (``FAILURE_RECORDED``);
- a failure during compensation (the message carries the compensation id):
  ``ApplyExecutionFailed`` on that record;
- a success during compensation: ``ApplyExecutionSuccess``;
- a write that fails (the store is down) raises, so the handler retries it and then
  settles ``RECORDING_FAILED``: the source is not acknowledged.

It also records the failed hops of sagas (:meth:`record_saga_command_failure`, called by
the command dispatcher of the aggregate that rejected or failed a command a saga sent):
the record is the saga function's on the event it handled (the same id as a failure of
the function itself), its error the command's rejection, so retrying it runs the saga
function again for that event.

It brings its own parts into the runtime (:meth:`parts`): the ``ExecutionFailed``
aggregate, the projector of the read model, the replayer and the scheduler.
"""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any

from wow_compensation.components import ExecutionFailedProjector, Replayer
from wow_compensation.model import (
    EXECUTION_FAILED,
    ApplyExecutionFailed,
    ApplyExecutionSuccess,
    CreateExecutionFailed,
    ErrorInfo,
    EventRef,
    ExecutionFailed,
    FunctionInfo,
    FunctionKindName,
    Recoverable,
    Refused,
    RetrySpec,
    execution_id,
)
from wow_compensation.scheduler import CompensationScheduler
from wow_compensation.service import ActionRefused, CompensationCommands, aggregate_id
from wow_compensation.settings import CompensationSettings
from wow_compensation.store import CompensationStore, now_ms
from wow_core.command.origin import SagaCommandFailure
from wow_core.command.stages import ErrorCodes
from wow_core.event.failure import (
    FunctionRef,
    FunctionRetry,
    ProcessingFailure,
    ProcessingSuccess,
    RecorderParts,
    RecordResult,
)
from wow_core.event.function_filter import SagaCommandRejectedError
from wow_core.model import DomainEvent, StateEvent

if TYPE_CHECKING:
    from wow_compensation.ui.app import Operations
    from wow_compensation.ui.server import OperationsServer
    from wow_core.runtime.runtime import WowRuntime

log = logging.getLogger("wow.compensation")


class RecorderNotBoundError(RuntimeError):
    """The recorder was asked to record before its runtime was built."""


def event_ref(message: Any) -> EventRef:
    """Where the failed message's event is: a domain event, or the first event of a state event."""
    if isinstance(message, StateEvent):
        stream = message.stream
        event = stream.events[0]
        name = "+".join(e.name for e in stream.events)
        stream_id = stream.id
    elif isinstance(message, DomainEvent):
        event = message
        name = event.name
        stream_id = ""
    else:
        raise TypeError(f"cannot record a failure on {type(message).__name__}: not an event")
    aggregate_id = event.aggregate_id
    named = aggregate_id.named_aggregate
    return EventRef(
        named.context_name,
        named.aggregate_name,
        aggregate_id.id,
        aggregate_id.tenant_id,
        event.version,
        event.id,
        name,
        stream_id,
    )


def _about_records(message: Any) -> bool:
    aggregate_id = getattr(message, "aggregate_id", None)
    return getattr(aggregate_id, "named_aggregate", None) == EXECUTION_FAILED


def function_info(ref: FunctionRef) -> FunctionInfo:
    return FunctionInfo(
        ref.context_name, ref.processor_name, ref.function_name, FunctionKindName(ref.function_kind)
    )


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"... [{len(text) - limit} characters cut]"
    return text[: max(0, limit - len(marker))] + marker


class CompensationFailureRecorder:
    """The recorder of the compensation module; see the module doc."""

    records_failures = True

    def __init__(self, settings: CompensationSettings, store: CompensationStore) -> None:
        self.settings = settings
        self.store = store
        self.commands: CompensationCommands | None = None
        self.runtime: WowRuntime | None = None
        self.scheduler: CompensationScheduler | None = None
        self.page_server: OperationsServer | None = None

    # -- the runtime ----------------------------------------------------------------------

    def parts(self) -> RecorderParts:
        return RecorderParts(
            aggregates=(ExecutionFailed,),
            components=(ExecutionFailedProjector(self), Replayer(self)),
            installers=(self.install,),
        )

    def install(self, runtime: WowRuntime) -> None:
        """Bind to ``runtime``: its kernel decides the records' commands; the scheduler
        runs with its dispatchers and the store closes with it."""
        self.runtime = runtime
        self.commands = CompensationCommands(runtime.kernel, runtime.aggregates, self.store)
        if self.settings.scheduler.enabled:
            self.scheduler = CompensationScheduler(self.store, self.commands, self.settings.scheduler)
            runtime.add_dispatcher(self.scheduler)
        runtime.add_closeable(self.store, "compensation store")
        ui = self.settings.ui
        if ui.enabled:
            self.serve_page(runtime)

    def operations(self) -> Operations:
        """What the operations page of this process reads and writes."""
        from wow_compensation.ui.app import Operations

        runtime = self.runtime
        if runtime is None:
            raise RecorderNotBoundError("the compensation recorder is not installed in a runtime")
        event_store = runtime.event_store

        async def history(record_id: str) -> list[Any]:
            return list(await event_store.load(aggregate_id(record_id)))

        return Operations(self.store, self.commands, history)

    def serve_page(self, runtime: WowRuntime) -> None:
        """Serve the operations page from ``runtime`` (``WOW_COMPENSATION__UI__*``)."""
        try:
            from wow_compensation.ui import OperationsServer, create_app
        except ImportError as missing:
            raise RuntimeError(
                "WOW_COMPENSATION__UI__ENABLED needs the operations page's dependencies: "
                f'pip install "wow-compensation[ui]" ({missing})'
            ) from missing
        ui = self.settings.ui
        token = ui.token.get_secret_value() if ui.token is not None else None
        app = create_app(self.operations(), token=token, refresh=ui.refresh)
        self.page_server = OperationsServer(app, ui.host, ui.port)
        runtime.add_dispatcher(self.page_server)

    def _commands(self) -> CompensationCommands:
        if self.commands is None:
            raise RecorderNotBoundError("the compensation recorder is not installed in a runtime")
        return self.commands

    # -- classification -------------------------------------------------------------------

    def retry_spec(self, declared: FunctionRetry | None) -> RetrySpec:
        defaults = self.settings.retry

        def pick(value: float | None, default: float) -> float:
            return default if value is None else value

        return RetrySpec(
            enabled=True if declared is None else declared.enabled,
            max_retries=int(pick(None if declared is None else declared.max_retries, defaults.max_retries)),
            min_backoff=pick(None if declared is None else declared.min_backoff, defaults.min_backoff),
            execution_timeout=pick(
                None if declared is None else declared.execution_timeout, defaults.execution_timeout
            ),
            max_backoff=max(
                defaults.max_backoff, pick(None if declared is None else declared.min_backoff, 0.0)
            ),
        )

    @staticmethod
    def recoverable(failure: ProcessingFailure) -> Recoverable:
        """The function's own lists first (unrecoverable before recoverable), then the
        runtime's classification."""
        declared = failure.retry
        if declared is not None:
            if declared.unrecoverable and isinstance(failure.error, declared.unrecoverable):
                return Recoverable.UNRECOVERABLE
            if declared.recoverable and isinstance(failure.error, declared.recoverable):
                return Recoverable.RECOVERABLE
        try:
            return Recoverable(failure.recoverability)
        except ValueError:
            return Recoverable.UNKNOWN

    def error_info(self, error: BaseException) -> ErrorInfo:
        """The record's error. A saga command rejected on a retry is named by its error
        code, as the first attempt's record (made from the command's rejection) is, so a
        record's error type does not change between attempts of the same failure."""
        stack = "".join(traceback.format_exception(error))
        return ErrorInfo(
            error.error_code if isinstance(error, SagaCommandRejectedError) else type(error).__qualname__,
            _bounded(str(error), self.settings.max_message),
            _bounded(stack, self.settings.max_stack_trace),
        )

    # -- FailureRecorder ------------------------------------------------------------------

    async def record_failure(self, failure: ProcessingFailure) -> RecordResult:
        if not failure.retry_enabled:
            return RecordResult.WAIVED
        if _about_records(failure.message):
            # A function on the records themselves (the snapshot of a record...): a record
            # of it would produce more state events that fail alike while a store is down.
            log.warning("%s failed on a compensation record: not recorded", failure.function)
            return RecordResult.WAIVED
        commands = self._commands()
        error = self.error_info(failure.error)
        recoverable = self.recoverable(failure)
        at = now_ms()
        if failure.compensation_id:
            try:
                await commands.send(ApplyExecutionFailed(error, at, recoverable), failure.compensation_id)
            except ActionRefused as refused:
                if refused.code not in (Refused.NOT_PREPARED, ErrorCodes.AGGREGATE_NOT_FOUND):
                    raise
                # The record moved on meanwhile (another compensation settled it) or is
                # gone: this outcome is stale, the record holds the later truth.
                log.warning("compensation %s: failure not applied: %s", failure.compensation_id, refused)
            return RecordResult.RECORDED
        ref = event_ref(failure.message)
        function = function_info(failure.function)
        record_id = execution_id(ref.event_id, function)
        body = CreateExecutionFailed(ref, function, error, at, recoverable, self.retry_spec(failure.retry))
        try:
            await commands.send(body, record_id, request_id=f"{record_id}.created")
        except ActionRefused as refused:
            if refused.code != ErrorCodes.DUPLICATE_AGGREGATE_ID:
                raise
            # The same function failed on the same event again (a redelivery): its
            # record exists already and is compensated as it stands.
            return RecordResult.RECORDED
        log.warning(
            "recorded execution failure %s: %s on %s %s@%d",
            record_id,
            function.qualified_name,
            ref.event_name,
            ref.aggregate_id,
            ref.version,
        )
        return RecordResult.RECORDED

    async def record_saga_command_failure(self, failure: SagaCommandFailure) -> None:
        """Record a command a saga sent that its aggregate rejected or failed to process."""
        origin, command = failure.origin, failure.command
        ref = EventRef(
            origin.event_context,
            origin.event_aggregate,
            origin.event_aggregate_id,
            origin.event_tenant_id,
            origin.event_version,
            origin.event_id,
            origin.event_name,
            origin.event_stream_id,
        )
        function = FunctionInfo(
            origin.context_name,
            origin.processor_name,
            origin.function_name,
            FunctionKindName(origin.function_kind),
        )
        hop = f"{command.name} {command.id} to {command.aggregate_id}"
        if failure.error is not None:
            # The aggregate failed to decide it (its store is down...): worth retrying.
            error = self.error_info(failure.error)
            error = ErrorInfo(
                error.error_type,
                _bounded(f"{hop}: {error.message}", self.settings.max_message),
                error.stack_trace,
            )
            recoverable = Recoverable.RECOVERABLE
        else:
            # A business rejection: whether it passes later depends on the aggregate's state.
            message = f"{hop} was rejected: {failure.error_code}" + (
                f": {failure.error_msg}" if failure.error_msg else ""
            )
            error = ErrorInfo(failure.error_code, _bounded(message, self.settings.max_message))
            recoverable = Recoverable.UNKNOWN
        record_id = execution_id(ref.event_id, function)
        body = CreateExecutionFailed(
            ref, function, error, now_ms(), recoverable, self.retry_spec(self._hosted_retry(function))
        )
        try:
            await self._commands().send(body, record_id, request_id=f"{record_id}.created")
        except ActionRefused as refused:
            if refused.code != ErrorCodes.DUPLICATE_AGGREGATE_ID:
                raise
            return  # another command of the same saga function on the same event failed first
        log.warning(
            "recorded execution failure %s: %s on %s %s@%d: %s",
            record_id,
            function.qualified_name,
            ref.event_name,
            ref.aggregate_id,
            ref.version,
            error.message,
        )

    def _hosted_retry(self, function: FunctionInfo) -> FunctionRetry | None:
        """The saga function's ``@retry`` when this process hosts it (else the defaults)."""
        runtime = self.runtime
        if runtime is None or runtime.event_dispatch is None:
            return None
        for dispatcher in runtime.event_dispatch.dispatchers:
            for hosted in dispatcher.functions:
                ref = hosted.ref
                if (ref.context_name, ref.processor_name, ref.function_name, ref.function_kind) == (
                    function.context_name,
                    function.processor_name,
                    function.function_name,
                    function.function_kind.value,
                ):
                    return hosted.retry
        return None

    async def record_success(self, success: ProcessingSuccess) -> None:
        if not success.compensation_id:
            return
        try:
            await self._commands().send(ApplyExecutionSuccess(now_ms()), success.compensation_id)
        except ActionRefused as refused:
            log.warning("compensation %s: success not applied: %s", success.compensation_id, refused)
