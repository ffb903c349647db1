"""The components the module runs in every service that records with it.

- :class:`ExecutionFailedProjector` (a projection of ``compensation.execution_failed``
  state events) keeps the read model in the :class:`~wow_compensation.store.CompensationStore`.
- :class:`Replayer` (an event processor of the same state events) replays a record when
  it is prepared: it re-delivers the original event, or for a ``STATE_EVENT`` function
  the state event rebuilt at that version, to exactly the target function. The message
  carries the compensation header (spec 003, "Function Registration and Selection"), so
  every dispatcher that receives it runs only the function it names, and the outcome
  comes back to the recorder with the compensation id. A replayer replays only records
  whose target function this process hosts (each service has its own consumer group,
  so one instance of the right service replays each prepared record).

Failures of these functions are not compensated (a record about the records would
cascade while a store is down): they are logged; the next state event of a record
writes its whole state again, and a prepared record whose replay was lost times out and
is prepared again by the scheduler.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from wow_compensation.model import (
    EXECUTION_FAILED,
    ApplyExecutionFailed,
    CompensationPrepared,
    ErrorInfo,
    ExecutionFailedState,
    ExecutionFailedStatus,
    FunctionKindName,
)
from wow_compensation.store import ExecutionRecord, now_ms
from wow_core.event.compensation import CompensationTarget
from wow_core.event.declare import on_state_event, projection, retry, stateless_saga
from wow_core.model import AggregateId, DomainEventStream, Header, NamedAggregate, StateEvent

if TYPE_CHECKING:
    from wow_compensation.recorder import CompensationFailureRecorder

log = logging.getLogger("wow.compensation")


class ReplayError(RuntimeError):
    """The original event cannot be re-delivered (gone from the store, or its aggregate is
    not hosted here so a state cannot be rebuilt)."""


@projection(context="compensation", name="ExecutionFailedProjector", aggregates=[str(EXECUTION_FAILED)])
class ExecutionFailedProjector:
    def __init__(self, recorder: CompensationFailureRecorder) -> None:
        self.recorder = recorder

    @retry(enabled=False)
    @on_state_event
    async def project(self, state_event: StateEvent[ExecutionFailedState]) -> None:
        state = state_event.state
        if not isinstance(state, ExecutionFailedState):
            return
        await self.recorder.store.save(ExecutionRecord(state, state_event.stream.version, now_ms()))


# A stateless saga whose functions return nothing: its group and chain are the saga's,
# and it sends no command. (An event processor would do as well; a saga keeps it apart
# from the service's own processors in the logs.)
@stateless_saga(context="compensation", name="CompensationReplayer", aggregates=[str(EXECUTION_FAILED)])
class Replayer:
    def __init__(self, recorder: CompensationFailureRecorder) -> None:
        self.recorder = recorder

    @retry(enabled=False)
    @on_state_event(body=CompensationPrepared)  # type: ignore[untyped-decorator]
    async def replay(self, state_event: StateEvent[ExecutionFailedState]) -> None:
        state = state_event.state
        if not isinstance(state, ExecutionFailedState) or state.status is not ExecutionFailedStatus.PREPARED:
            return
        if not self.hosts(state):
            return
        try:
            await self.redeliver(state)
        except ReplayError as error:
            log.warning("compensation %s: %s", state.id, error)
            commands = self.recorder.commands
            if commands is not None:
                await commands.send(
                    ApplyExecutionFailed(ErrorInfo("ReplayError", str(error)), now_ms(), state.recoverable),
                    state.id,
                )

    def hosts(self, state: ExecutionFailedState) -> bool:
        runtime = self.recorder.runtime
        function = state.function
        if runtime is None or runtime.event_dispatch is None or function is None:
            return False
        return any(
            f.context_name == function.context_name
            and f.processor_name == function.processor_name
            and f.function_name == function.function_name
            and f.kind.value == function.function_kind.value
            for dispatcher in runtime.event_dispatch.dispatchers
            for f in dispatcher.functions
        )

    async def redeliver(self, state: ExecutionFailedState) -> None:
        runtime = self.recorder.runtime
        event, function = state.event, state.function
        assert runtime is not None
        assert event is not None
        assert function is not None
        aggregate_id = AggregateId(
            NamedAggregate(event.context_name, event.aggregate_name), event.aggregate_id, event.tenant_id
        )
        streams = await runtime.event_store.load(aggregate_id, event.version, event.version)
        if not streams:
            raise ReplayError(f"{aggregate_id} v{event.version} is not in the event store")
        target = CompensationTarget(
            function.context_name, function.processor_name, function.function_name, state.id
        )
        # Only the compensation target: the original header's wait context belongs to a
        # caller that waited long ago.
        header = Header(target.to_header())
        if function.function_kind is FunctionKindName.EVENT:
            stream = dataclasses.replace(streams[0], header=header)
            await runtime.domain_event_bus.send(stream)
            return
        metadata = runtime.aggregates.get(aggregate_id.named_aggregate)
        if metadata is None:
            raise ReplayError(
                f"cannot rebuild the state of {aggregate_id} v{event.version}: this service does not host "
                f"{aggregate_id.named_aggregate}"
            )
        sourced: Any = metadata.initial_state(aggregate_id)
        history: list[DomainEventStream] = await runtime.event_store.load(aggregate_id, 1, event.version)
        for past in history:
            for item in past.events:
                sourcing = metadata.sourcing.get(type(item.body))
                if sourcing is not None:
                    sourced = sourcing(sourced, item.body)
        stream = dataclasses.replace(history[-1], header=header)
        await runtime.state_event_bus.send(StateEvent(stream, sourced, header=Header(dict(header))))
