"""The JSON bodies of the HTTP API: command results, errors, state, events, metadata.

Each is a pydantic model, so the OpenAPI document describes exactly what is sent. Bodies
of commands, events and states are the user's classes, turned into JSON by pydantic
(:func:`pydantic_core.to_jsonable_python`): dataclasses, pydantic models and the plain
types they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from wow_core.command import CommandResult, CommandStage
from wow_core.eventsourcing.store import Snapshot
from wow_core.model import AggregateId, DomainEventStream


class AggregateRef(BaseModel):
    """One aggregate instance."""

    context: str
    aggregate: str
    id: str
    tenant: str


class ViolationBody(BaseModel):
    """One reason a body is invalid: where (a dotted path, '' for the whole body) and what."""

    path: str
    message: str


class CommandResultBody(BaseModel):
    """What the service answers about a command: the stage reached and its outcome."""

    command_id: str
    request_id: str
    stage: CommandStage = Field(description="The stage this result reports.")
    wait_stage: CommandStage = Field(description="The stage that was waited for.")
    aggregate: AggregateRef | None
    aggregate_version: int | None = None
    result: dict[str, Any] = Field(default_factory=dict, description="What the command function returned.")
    succeeded: bool
    error_code: str = Field("", description="Empty on success; COMMAND_INVALID, a domain code...")
    error_msg: str = ""
    errors: list[ViolationBody] = Field(default_factory=list)
    duplicate: bool = Field(False, description="A request id decided before: this is the first answer's.")
    processor_name: str = ""
    function_name: str = ""
    signal_time: int = Field(description="When the stage was reached (ms since the epoch).")


class ErrorBody(BaseModel):
    """A request that was not carried out (nothing was sent), or a wait that ended early."""

    error_code: str = Field(description="BAD_REQUEST, COMMAND_INVALID, COMMAND_UNHANDLED, WAIT_TIMEOUT...")
    error_msg: str
    errors: list[ViolationBody] = Field(default_factory=list)
    command_id: str | None = None
    wait_stage: CommandStage | None = None
    last_stage: CommandStage | None = Field(None, description="For WAIT_TIMEOUT: the last stage reached.")


class StateBody(BaseModel):
    """The current state of an aggregate, sourced from its snapshot and later events."""

    aggregate: AggregateRef
    version: int = Field(description="The version the state is at.")
    state: Any


class EventBody(BaseModel):
    id: str
    name: str
    sequence: int
    body: Any
    revision: str
    create_time: int


class EventStreamBody(BaseModel):
    """The events one command appended, at one version."""

    id: str
    aggregate: AggregateRef
    version: int
    command_id: str
    request_id: str
    operator: str = Field("", description="Who sent the command (its header's operator).")
    create_time: int
    events: list[EventBody]


class EventsBody(BaseModel):
    aggregate: AggregateRef
    head_version: int
    tail_version: int | None
    streams: list[EventStreamBody]


class SnapshotBody(BaseModel):
    aggregate: AggregateRef
    version: int
    state: Any
    deleted: bool
    snapshot_time: int


class CommandMetadata(BaseModel):
    name: str
    create: bool
    path: str = Field(description="The route, relative to the app's root.")
    void_allowed: bool = True


class AggregateMetadataBody(BaseModel):
    context: str
    aggregate: str
    state: str
    commands: list[CommandMetadata]
    events: list[str]


class MetadataBody(BaseModel):
    service: str
    aggregates: list[AggregateMetadataBody]


def aggregate_ref(aggregate_id: AggregateId) -> AggregateRef:
    named = aggregate_id.named_aggregate
    return AggregateRef(
        context=named.context_name,
        aggregate=named.aggregate_name,
        id=aggregate_id.id,
        tenant=aggregate_id.tenant_id,
    )


def plain(value: Any) -> Any:
    """``value`` as JSON-able Python (dataclasses, models, tuples, sets...)."""
    return to_jsonable_python(value, fallback=repr)


def result_body(result: CommandResult) -> CommandResultBody:
    return CommandResultBody(
        command_id=result.command_id,
        request_id=result.request_id,
        stage=result.stage,
        wait_stage=result.wait_stage,
        aggregate=aggregate_ref(result.aggregate_id) if result.aggregate_id is not None else None,
        aggregate_version=result.aggregate_version,
        result=plain(dict(result.result)) if isinstance(result.result, Mapping) else {},
        succeeded=result.succeeded,
        error_code=result.error_code,
        error_msg=result.error_msg,
        errors=[ViolationBody(path=v.path, message=v.message) for v in result.errors],
        duplicate=result.duplicate,
        processor_name=result.processor_name,
        function_name=result.function_name,
        signal_time=result.signal_time,
    )


def stream_body(stream: DomainEventStream) -> EventStreamBody:
    return EventStreamBody(
        id=stream.id,
        aggregate=aggregate_ref(stream.aggregate_id),
        version=stream.version,
        command_id=stream.command_id,
        request_id=stream.request_id,
        operator=stream.header.get("operator", ""),
        create_time=stream.create_time,
        events=[
            EventBody(
                id=event.id,
                name=event.name,
                sequence=event.sequence,
                body=plain(event.body),
                revision=event.revision,
                create_time=event.create_time,
            )
            for event in stream.events
        ],
    )


def snapshot_body(snapshot: Snapshot) -> SnapshotBody:
    return SnapshotBody(
        aggregate=aggregate_ref(snapshot.aggregate_id),
        version=snapshot.version,
        state=plain(snapshot.state),
        deleted=snapshot.deleted,
        snapshot_time=snapshot.snapshot_time,
    )
