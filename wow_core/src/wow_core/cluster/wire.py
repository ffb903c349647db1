"""The wire forms of the cluster intake: the command envelope and the receipt.

A command for a context's intake travels on the context's command topic
``<prefix><context>.commands`` (one topic per bounded context, keyed by the aggregate id
with the partitioner of the event topics), inside a :class:`CommandWire` envelope::

    {"kind": "intake", "command": <the command's wire form>,
     "reply_to": {"context": "orders", "committed": true} | null,
     "wait": {<the wait context's header keys>} | null,
     "due_at": <epoch ms> | null}

``reply_to`` says where the receipt goes: ``<prefix><reply_to.context>.receipts``. A
rejection is always answered there; a commit only when ``committed`` is true
(:attr:`ReplyTo.committed`). ``wait`` is the wait context of the caller
(:class:`~wow_core.command.WaitContext`), beside the command rather than in its header,
handed to :meth:`~wow_core.command.WaitCoordinator.forward`. ``due_at`` makes it a
scheduled command: its lane waits until then before executing it.

A creation that names no aggregate has an empty ``aggregate.id`` in the envelope (and
is keyed by its request id); the intake gives it its id before anything else
(:class:`CreationIds`).

The receipt (:class:`CommandReceipt`) is JSON too::

    {"kind": "receipt", "outcome": "committed" | "rejected", "command_id": ..., "request_id": ...,
     "aggregate": {...}, "version": 3, "result": {...}, "duplicate": false,
     "error_code": "", "error_msg": "", "errors": [{"path": ..., "message": ...}],
     "wait": {...} | null, "position": "2:17"}

It carries no state. Receipts are delivered at least once (a crash between the receipt
and the checkpoint sends it again): :class:`ReceiptDeduplicator` drops the copies by
command id on the sender's side.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from wow_core.command.endpoint import WaitContext
from wow_core.command.stages import Violation
from wow_core.model import AggregateId, CommandMessage, NamedAggregate, TopicKind
from wow_core.model.wire import BodyTypeRegistry, DecodeError, DecodeFailureKind, from_wire, to_wire

COMMANDS_SUFFIX = "commands"
RECEIPTS_SUFFIX = "receipts"
MAX_DUE_MS = 253_402_300_799_000
"""The latest due time accepted (9999-12-31T23:59:59Z), in epoch milliseconds."""


def commands_topic(context_name: str, prefix: str = "wow.") -> str:
    """The command topic of a bounded context's intake: ``<prefix><context>.commands``."""
    NamedAggregate(context_name, COMMANDS_SUFFIX)  # checks the context name
    return f"{prefix}{context_name}.{COMMANDS_SUFFIX}"


def receipts_topic(context_name: str, prefix: str = "wow.") -> str:
    """Where the receipts for a context go: ``<prefix><context>.receipts``."""
    NamedAggregate(context_name, RECEIPTS_SUFFIX)
    return f"{prefix}{context_name}.{RECEIPTS_SUFFIX}"


class WireError(ValueError):
    """A payload that is not an intake envelope or a receipt; ``field`` names where."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ReplyTo:
    """Where a command's receipt goes: the context whose ``receipts`` topic receives it.

    ``committed``: a commit is answered too (``me.ahoo.wow.runtime.cluster.ReplyTo.committed``);
    otherwise only a rejection is.
    """

    context: str
    committed: bool = False

    def __post_init__(self) -> None:
        try:
            NamedAggregate(self.context, RECEIPTS_SUFFIX)
        except ValueError as error:
            raise WireError("reply_to.context", str(error)) from None


@dataclass(frozen=True, slots=True)
class CommandWire:
    """A command as the intake receives it (see the module doc).

    ``command.aggregate_id.id`` is the id the sender gave; for a creation that named
    none, it is the one :class:`CreationIds` assigned, and ``assigned_id`` is true.
    """

    command: CommandMessage[Any]
    reply_to: ReplyTo | None = None
    wait: WaitContext | None = None
    due_at: int | None = None
    assigned_id: bool = False

    def encode(self, registry: BodyTypeRegistry) -> str:
        """The JSON text of this envelope (:func:`encode_command`)."""
        return encode_command(self, registry)

    @property
    def key(self) -> str:
        """The record key to send it with: the aggregate id (the request id for a creation
        the intake gives its id to), so it lands on its aggregate's partition."""
        return self.command.request_id if self.assigned_id else self.command.aggregate_id.id


class CreationIds:
    """The id of a creation that names no aggregate: derived from its named aggregate and
    request id (a UUID 5), so a command delivered twice gets the same id, lands in the
    same lane and is deduplicated by the kernel as any other."""

    __slots__ = ()

    def id_for(self, named_aggregate: NamedAggregate, request_id: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"wow:{named_aggregate}:{request_id}"))


@dataclass(frozen=True, slots=True)
class EnvelopeHead:
    """What the intake could read of an envelope whose command it cannot build: enough
    to reject it (and send its receipt)."""

    command_id: str
    request_id: str
    aggregate_id: AggregateId | None
    reply_to: ReplyTo | None
    wait: WaitContext | None


class UndecodableCommand(Exception):
    """An envelope read far enough to answer (``head``), whose command is refused with
    ``code`` (``COMMAND_UNHANDLED`` or ``COMMAND_INVALID``) and ``violations``."""

    def __init__(self, head: EnvelopeHead, code: str, message: str, violations: tuple[Violation, ...] = ()):
        super().__init__(message)
        self.head = head
        self.code = code
        self.message = message
        self.violations = violations


def encode_command(wire: CommandWire, registry: BodyTypeRegistry) -> str:
    """The JSON text of ``wire``. A creation to be given its id by the intake
    (``wire.assigned_id``) is sent with an empty ``aggregate.id``."""
    command = to_wire(registry, wire.command)
    if wire.assigned_id:
        command["aggregate"]["id"] = ""
    wait: dict[str, str] | None = None
    if wire.wait is not None:
        wait = {}
        wire.wait.write(wait)
    data = {
        "kind": "intake",
        "command": command,
        "reply_to": None
        if wire.reply_to is None
        else {"context": wire.reply_to.context, "committed": wire.reply_to.committed},
        "wait": wait,
        "due_at": wire.due_at,
    }
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _text(value: object, where: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise WireError(where, "expected a non-empty string")
    return value


def _reply_to(value: object) -> ReplyTo | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WireError("reply_to", "expected an object or null")
    committed = value.get("committed", False)
    if not isinstance(committed, bool):
        raise WireError("reply_to.committed", "expected a boolean")
    return ReplyTo(_text(value.get("context"), "reply_to.context"), committed)


def _wait(value: object) -> WaitContext | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise WireError("wait", "expected an object of strings or null")
    try:
        return WaitContext.of(value)
    except ValueError as error:
        raise WireError("wait", str(error)) from None


def decode_command(
    payload: str,
    registry: BodyTypeRegistry,
    creations: CreationIds,
    *,
    strict: bool = True,
) -> CommandWire:
    """The envelope of ``payload``.

    :class:`WireError` when it is not an envelope at all (nobody to answer);
    :class:`UndecodableCommand` when it is one but its command cannot be built: an
    unknown body type is ``COMMAND_UNHANDLED``, a body that does not validate
    ``COMMAND_INVALID`` with the violation.
    """
    try:
        data = json.loads(payload)
    except ValueError as error:
        raise WireError("envelope", f"not JSON: {error}") from None
    if not isinstance(data, dict) or data.get("kind") != "intake":
        raise WireError("envelope.kind", "expected 'intake'")
    command = data.get("command")
    if not isinstance(command, dict):
        raise WireError("command", "expected an object")
    reply_to = _reply_to(data.get("reply_to"))
    due_at = data.get("due_at")
    if due_at is not None and (
        not isinstance(due_at, int) or isinstance(due_at, bool) or not 0 <= due_at <= MAX_DUE_MS
    ):
        raise WireError("due_at", f"expected epoch milliseconds between 0 and {MAX_DUE_MS} or null")
    command_id = _text(command.get("id"), "command.id")
    request_id = command.get("request_id") or command_id
    if not isinstance(request_id, str):
        raise WireError("command.request_id", "expected a string")
    aggregate = command.get("aggregate")
    if not isinstance(aggregate, dict):
        raise WireError("command.aggregate", "expected an object")
    assigned = False
    aggregate_id: AggregateId | None = None
    try:
        named = NamedAggregate(
            _text(aggregate.get("context"), "command.aggregate.context"),
            _text(aggregate.get("aggregate"), "command.aggregate.aggregate"),
        )
        if aggregate.get("id") == "" and command.get("is_create") is True:
            aggregate = {**aggregate, "id": creations.id_for(named, request_id)}
            command = {**command, "aggregate": aggregate}
            assigned = True
        aggregate_id = AggregateId(
            named,
            _text(aggregate.get("id"), "command.aggregate.id"),
            _text(aggregate.get("tenant"), "command.aggregate.tenant"),
        )
    except ValueError as error:
        if isinstance(error, WireError):
            raise
        raise WireError("command.aggregate", str(error)) from None
    try:
        wait = _wait(data.get("wait"))
    except WireError as error:
        head = EnvelopeHead(command_id, request_id, aggregate_id, reply_to, None)
        raise UndecodableCommand(
            head, "COMMAND_INVALID", str(error), (Violation("wait", error.reason),)
        ) from None
    head = EnvelopeHead(command_id, request_id, aggregate_id, reply_to, wait)
    try:
        message = from_wire(registry, command, TopicKind.COMMAND, strict_commands=strict)
    except DecodeError as error:
        if error.kind is DecodeFailureKind.UNKNOWN_BODY_TYPE:
            raise UndecodableCommand(head, "COMMAND_UNHANDLED", error.detail) from None
        if error.kind is DecodeFailureKind.INVALID_BODY:
            raise UndecodableCommand(
                head, "COMMAND_INVALID", error.detail, (Violation("body", error.detail),)
            ) from None
        raise WireError("command", error.detail) from None
    if not isinstance(message, CommandMessage):  # pragma: no cover - from_wire(COMMAND) builds commands
        raise WireError("command", "not a command")
    return CommandWire(message, reply_to, wait, due_at, assigned)


LEDGER = NamedAggregate("wow", "ledger")
"""The lane name of the ledger's system commands (each runs in a lane of its own)."""


@dataclass(frozen=True)
class LedgerRetry:
    """``wow.ledger.retry``: run the parked aggregate (the command's aggregate) again from
    its failed command. ``name``: the subscription, default the intake's own."""

    name: str = ""


@dataclass(frozen=True)
class LedgerSkip:
    """``wow.ledger.skip``: settle the parked aggregate's failed command without executing
    it, then run its later ones."""

    name: str = ""


@dataclass(frozen=True)
class LedgerList:
    """``wow.ledger.list``: the parked aggregates of the node that owns the partition of the
    command's aggregate (its receipt's ``result["parked"]``)."""

    name: str = ""


LEDGER_BODIES: dict[type[Any], str] = {
    LedgerRetry: "wow.ledger.retry",
    LedgerSkip: "wow.ledger.skip",
    LedgerList: "wow.ledger.list",
}
"""The ledger's system command bodies and their wire type names (``wow.ledger.*``)."""


def register_ledger_bodies(registry: BodyTypeRegistry) -> BodyTypeRegistry:
    """Register the ``wow.ledger.*`` bodies with ``registry`` (once)."""
    for cls, name in LEDGER_BODIES.items():
        if cls not in registry:
            registry.register(cls, name)
    return registry


class ReceiptOutcome(StrEnum):
    COMMITTED = "committed"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class CommandReceipt:
    """The answer of an intake to the context named by a command's ``reply_to``.

    ``committed`` (``CommandReceipt.Committed``): the aggregate, its version and the
    command's result, no state; ``duplicate`` when the request id was decided before (the
    original aggregate and version). ``rejected`` (``CommandReceipt.Rejected``): the error
    code, message and violations. ``wait`` is the command's wait context, carried past
    the commit so a chain can go on through the saga that receives the receipt.
    ``position`` is where the command was on the intake's topic (for logs).
    """

    outcome: ReceiptOutcome
    command_id: str
    request_id: str
    aggregate_id: AggregateId | None
    version: int = 0
    result: Mapping[str, Any] = field(default_factory=dict)
    duplicate: bool = False
    error_code: str = ""
    error_msg: str = ""
    errors: tuple[Violation, ...] = ()
    wait: WaitContext | None = None
    position: str = ""

    @property
    def committed(self) -> bool:
        return self.outcome is ReceiptOutcome.COMMITTED

    def encode(self) -> str:
        wait: dict[str, str] | None = None
        if self.wait is not None:
            wait = {}
            self.wait.write(wait)
        aggregate = self.aggregate_id
        data = {
            "kind": "receipt",
            "outcome": self.outcome.value,
            "command_id": self.command_id,
            "request_id": self.request_id,
            "aggregate": None
            if aggregate is None
            else {
                "context": aggregate.named_aggregate.context_name,
                "aggregate": aggregate.named_aggregate.aggregate_name,
                "id": aggregate.id,
                "tenant": aggregate.tenant_id,
            },
            "version": self.version,
            "result": dict(self.result),
            "duplicate": self.duplicate,
            "error_code": self.error_code,
            "error_msg": self.error_msg,
            "errors": [{"path": v.path, "message": v.message} for v in self.errors],
            "wait": wait,
            "position": self.position,
        }
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    @classmethod
    def decode(cls, payload: str) -> CommandReceipt:
        """The receipt of ``payload``; :class:`WireError` when it is not one."""
        try:
            data = json.loads(payload)
        except ValueError as error:
            raise WireError("receipt", f"not JSON: {error}") from None
        if not isinstance(data, dict) or data.get("kind") != "receipt":
            raise WireError("receipt.kind", "expected 'receipt'")
        try:
            outcome = ReceiptOutcome(str(data.get("outcome")))
        except ValueError:
            raise WireError("receipt.outcome", "expected 'committed' or 'rejected'") from None
        aggregate = data.get("aggregate")
        aggregate_id: AggregateId | None = None
        if aggregate is not None:
            if not isinstance(aggregate, dict):
                raise WireError("receipt.aggregate", "expected an object or null")
            try:
                aggregate_id = AggregateId(
                    NamedAggregate(
                        _text(aggregate.get("context"), "receipt.aggregate.context"),
                        _text(aggregate.get("aggregate"), "receipt.aggregate.aggregate"),
                    ),
                    _text(aggregate.get("id"), "receipt.aggregate.id"),
                    _text(aggregate.get("tenant"), "receipt.aggregate.tenant"),
                )
            except WireError:
                raise
            except ValueError as error:
                raise WireError("receipt.aggregate", str(error)) from None
        version = data.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise WireError("receipt.version", "expected an integer >= 0")
        result = data.get("result") or {}
        if not isinstance(result, dict):
            raise WireError("receipt.result", "expected an object")
        errors = data.get("errors") or []
        if not isinstance(errors, list) or not all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("message"), str)
            for e in errors
        ):
            raise WireError("receipt.errors", "expected a list of {path, message}")
        duplicate = data.get("duplicate", False)
        if not isinstance(duplicate, bool):
            raise WireError("receipt.duplicate", "expected a boolean")
        strings = {}
        for name in ("error_code", "error_msg", "position"):
            value = data.get(name, "")
            if not isinstance(value, str):
                raise WireError(f"receipt.{name}", "expected a string")
            strings[name] = value
        return cls(
            outcome,
            _text(data.get("command_id"), "receipt.command_id"),
            _text(data.get("request_id"), "receipt.request_id"),
            aggregate_id,
            version,
            result,
            duplicate,
            strings["error_code"],
            strings["error_msg"],
            tuple(Violation(e["path"], e["message"]) for e in errors),
            _wait(data.get("wait")),
            strings["position"],
        )


class ReceiptDeduplicator:
    """The sender's side of at-least-once receipts: the first receipt of a command id is
    new, its copies are dropped (counted in ``dropped``). Remembers the last ``capacity``
    command ids."""

    __slots__ = ("_seen", "capacity", "dropped")

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.dropped = 0

    def first(self, receipt: CommandReceipt) -> bool:
        """True for the first receipt of its command id, False for a copy."""
        seen = self._seen
        if receipt.command_id in seen:
            seen.move_to_end(receipt.command_id)
            self.dropped += 1
            return False
        seen[receipt.command_id] = None
        if len(seen) > self.capacity:
            seen.popitem(last=False)
        return True
