"""The wire form of a :class:`~wow_core.command.stages.WaitSignal`: versioned JSON.

What a :class:`~wow_core.command.notifier.CommandWaitNotifier` carries between processes
(one UTF-8 JSON object per signal, at most :data:`MAX_SIGNAL_BYTES`)::

    {"v": 1, "command_id": "0c5f...", "stage": "PROCESSED",
     "aggregate": {"context": "bank", "aggregate": "account", "id": "a-1", "tenant": "(0)"},
     "aggregate_version": 3, "result": {}, "error_code": "", "error_msg": "",
     "errors": [{"path": "amount", "message": "must be > 0"}], "duplicate": false,
     "final": false, "is_last": true, "context_name": "", "processor_name": "",
     "function_name": "", "signal_time": 1718000000000}

Two optional fields serve chain waits, written only when set: ``"root_id"`` (the
command whose wait a signal of a saga's command serves) and ``"commands"`` (the ids of
the commands a saga sent, on a ``SAGA_HANDLED`` signal; at most 10,000).

``v`` is the version of the form (1); a receiver refuses a version it does not know.
``aggregate`` and ``aggregate_version`` may be ``null``. Decoding validates every field
(types, lengths, the stage name) and refuses unknown fields: a malformed or hostile
signal raises :class:`SignalDecodeError`, which the receiving half counts and drops.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import to_jsonable_python

from wow_core.command.stages import CommandStage, Violation, WaitSignal
from wow_core.model import AggregateId, NamedAggregate

VERSION = 1
MAX_SIGNAL_BYTES = 1 << 20
"""Largest encoded signal a receiver accepts (1 MiB)."""

_Text = Annotated[str, Field(max_length=4096)]
_Name = Annotated[str, Field(max_length=255)]
_MAX_MESSAGE = 64 * 1024


class SignalDecodeError(ValueError):
    """A payload that is not a valid wait signal of a known version."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _AggregateWire(_Strict):
    context: Annotated[str, Field(min_length=1, max_length=255)]
    aggregate: Annotated[str, Field(min_length=1, max_length=255)]
    id: Annotated[str, Field(min_length=1, max_length=1024)]
    tenant: Annotated[str, Field(min_length=1, max_length=1024)]


class _ViolationWire(_Strict):
    path: _Text
    message: _Text


class _SignalWire(_Strict):
    v: Literal[1]
    command_id: Annotated[str, Field(min_length=1, max_length=255)]
    stage: CommandStage
    aggregate: _AggregateWire | None = None
    aggregate_version: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    result: dict[str, Any] = Field(default_factory=dict)
    error_code: _Name = ""
    error_msg: Annotated[str, Field(max_length=_MAX_MESSAGE)] = ""
    errors: Annotated[list[_ViolationWire], Field(max_length=1000)] = Field(default_factory=list)
    duplicate: bool = False
    final: bool = False
    is_last: bool = True
    context_name: _Name = ""
    processor_name: _Name = ""
    function_name: _Name = ""
    signal_time: Annotated[int, Field(ge=0, le=2**63 - 1)]
    root_id: Annotated[str, Field(max_length=255)] = ""
    commands: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=255)]], Field(max_length=10_000)
    ] = Field(default_factory=list)


_ADAPTER = _SignalWire


def encode_signal(signal: WaitSignal) -> str:
    """The JSON text of ``signal`` (a result that JSON cannot hold is converted the way
    pydantic converts it: dataclasses to objects, dates to ISO strings)."""
    aggregate = signal.aggregate_id
    data: dict[str, Any] = {
        "v": VERSION,
        "command_id": signal.command_id,
        "stage": signal.stage.value,
        "aggregate": None
        if aggregate is None
        else {
            "context": aggregate.named_aggregate.context_name,
            "aggregate": aggregate.named_aggregate.aggregate_name,
            "id": aggregate.id,
            "tenant": aggregate.tenant_id,
        },
        "aggregate_version": signal.aggregate_version,
        "result": to_jsonable_python(dict(signal.result), fallback=str) if signal.result else {},
        "error_code": signal.error_code,
        "error_msg": signal.error_msg[:_MAX_MESSAGE],
        "errors": [{"path": v.path, "message": v.message} for v in signal.errors],
        "duplicate": signal.duplicate,
        "final": signal.final,
        "is_last": signal.is_last,
        "context_name": signal.context_name,
        "processor_name": signal.processor_name,
        "function_name": signal.function_name,
        "signal_time": signal.signal_time,
    }
    if signal.root_id:
        data["root_id"] = signal.root_id
    if signal.commands:
        data["commands"] = list(signal.commands)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def decode_signal(payload: str | bytes) -> WaitSignal:
    """The signal of ``payload``; :class:`SignalDecodeError` when it is not one."""
    size = len(payload)
    if size > MAX_SIGNAL_BYTES:
        raise SignalDecodeError(f"signal of {size} bytes is larger than {MAX_SIGNAL_BYTES}")
    try:
        raw = json.loads(payload)
    except (ValueError, RecursionError) as error:
        raise SignalDecodeError(f"not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise SignalDecodeError(f"not a JSON object but {type(raw).__name__}")
    if raw.get("v") != VERSION:
        raise SignalDecodeError(
            f"unknown wire version {str(raw.get('v'))[:20]!r} (this process reads {VERSION})"
        )
    # JSON has no enums: the stage arrives as text, validated against CommandStage.
    stage = raw.get("stage")
    if isinstance(stage, str) and stage in CommandStage.__members__:
        raw["stage"] = CommandStage(stage)
    try:
        wire = _ADAPTER.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SignalDecodeError(f"invalid signal: {where}: {first['msg']}") from None
    aggregate = wire.aggregate
    return WaitSignal(
        command_id=wire.command_id,
        stage=wire.stage,
        aggregate_id=None
        if aggregate is None
        else AggregateId(
            NamedAggregate(aggregate.context, aggregate.aggregate), aggregate.id, aggregate.tenant
        ),
        aggregate_version=wire.aggregate_version,
        result=wire.result,
        error_code=wire.error_code,
        error_msg=wire.error_msg,
        errors=tuple(Violation(v.path, v.message) for v in wire.errors),
        duplicate=wire.duplicate,
        final=wire.final,
        is_last=wire.is_last,
        context_name=wire.context_name,
        processor_name=wire.processor_name,
        function_name=wire.function_name,
        signal_time=wire.signal_time,
        root_id=wire.root_id,
        commands=tuple(wire.commands),
    )
