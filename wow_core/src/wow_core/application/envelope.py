"""The envelope a queued command travels in.

It carries the producer's operation id (for idempotency and correlation), the command's
class name (``module:QualName``), the command payload (by the
:class:`~wow_core.application.serializer.CommandSerializer`) and the context payload (by
the :class:`~wow_core.application.context.OperationContextSerializer`),
and nothing else: never the result, the completion state, ``created_at`` or the
operation object. ``created_at`` describes one local operation; the worker creates its
own. A queue latency would be a field of its own (a ``dispatched_at``), not that one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from wow_core.application.errors import EnvelopeError
from wow_core.model import DecodeFailureKind

__all__ = ["CommandEnvelope", "class_name"]

VERSION = 1
_KEYS = frozenset({"v", "operation_id", "command_class", "payload", "context"})


def class_name(command_class: type[Any]) -> str:
    """The wire name of a command class: ``module:QualName``."""
    return f"{command_class.__module__}:{command_class.__qualname__}"


@dataclass(frozen=True, slots=True)
class CommandEnvelope:
    operation_id: str
    command_class: str
    payload: str
    context: str

    def encode(self) -> str:
        return json.dumps(
            {
                "v": VERSION,
                "operation_id": self.operation_id,
                "command_class": self.command_class,
                "payload": self.payload,
                "context": self.context,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str) -> CommandEnvelope:
        try:
            document = json.loads(text)
        except (ValueError, RecursionError) as error:
            raise EnvelopeError(
                f"the record is not a JSON command envelope: {error}", DecodeFailureKind.NOT_JSON
            ) from None
        if type(document) is not dict or set(document) != _KEYS:
            raise EnvelopeError(f"a command envelope is an object with exactly the keys {sorted(_KEYS)}")
        if document["v"] != VERSION or type(document["v"]) is not int:
            raise EnvelopeError(
                f"unsupported envelope version {document['v']!r} (this worker reads {VERSION})"
            )
        for key in ("operation_id", "command_class", "payload", "context"):
            if type(document[key]) is not str:
                raise EnvelopeError(f"the envelope's {key!r} is not a string")
        if not document["operation_id"]:
            raise EnvelopeError("the envelope's operation id is empty")
        return cls(
            document["operation_id"], document["command_class"], document["payload"], document["context"]
        )
