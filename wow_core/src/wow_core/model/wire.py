"""The JSON wire form of messages.

A body is written as JSON together with its registered *type name*; a receiver rebuilds
it only from a class that was registered in its :class:`BodyTypeRegistry` (nothing is
imported by name, nothing is pickled or evaluated). Bodies are dataclasses or pydantic
models; pydantic validates them on the way in.

Both directions run in pydantic-core (Rust): ``encode`` builds the JSON-ready dict and
writes it in one ``to_json`` pass (a command: its body is written once, that text spliced
into the envelope's and strictly checked as a receiver reads it); ``decode`` parses and
checks the whole envelope in one compiled, strict validator per message kind, then
rebuilds the body from its registered class's compiled validator. Every payload that is
not a message of the asked kind is a :class:`DecodeError` with its
:class:`DecodeFailureKind`, never another exception.
The form and its decoding rules are documented in ``docs/transports/spi.md``.

**Wire versions.** ``encode`` writes version 2, the compact form (short keys, the
aggregate as an array, defaults and empty fields left out, ``"v":2`` as its first
member); ``decode`` reads version 2 and the unversioned version 1 (long keys, every
field written: what releases before the compact form sent, and what
:func:`to_wire` still builds for the cluster intake's envelope). A payload naming a
version this decoder does not know is ``WRONG_SHAPE`` with a message saying which
versions it reads, never a guess.

What the encoder writes, the decoder reads: ``encode`` refuses (:class:`EncodeError`,
naming the field) a message the decoder would refuse, so a bad body fails at the sender
instead of being dead-lettered by every receiver: JSON nested deeper than
:data:`MAX_DEPTH`, an integer of more than :data:`MAX_INT_DIGITS` digits, a non-finite
float, and, with strict command bodies (the default), a command body its class would
not validate strictly from the wire.

A **command body** from the wire is validated strictly by default: unknown fields are
refused, and so are lax coercions (``true`` or ``"5"`` for an ``int``, ``1.0`` for an
``int``); a class that sets its own ``extra`` configuration keeps it (top level only).
``MessageCodec(registry, strict_commands=False)`` (``WOW_COMMAND__STRICT_BODIES=false``)
is pydantic's lax mode, unknown fields ignored. Events and states are history written by
this codec: they are read in lax mode, so a field removed from an event class does not
make its old events unreadable.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import reprlib
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Annotated, Any, Literal, NotRequired

from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import (
    BaseModel,
    ConfigDict,
    Strict,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import SchemaValidator, from_json, to_json
from typing_extensions import TypedDict

from wow_core.model.aggregate import DEFAULT_TENANT_ID, AggregateId, NamedAggregate
from wow_core.model.header import Header
from wow_core.model.messages import (
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    Message,
    StateEvent,
    TopicKind,
)


class DecodeFailureKind(StrEnum):
    NOT_JSON = "not_json"
    WRONG_SHAPE = "wrong_shape"
    UNKNOWN_BODY_TYPE = "unknown_body_type"
    INVALID_BODY = "invalid_body"
    KEY_MISMATCH = "key_mismatch"
    TOPIC_MISMATCH = "topic_mismatch"


class DecodeError(ValueError):
    """A payload that is not a message of the expected kind."""

    def __init__(self, kind: DecodeFailureKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.detail = detail


class UnknownBodyTypeError(LookupError):
    """A body class that was never registered (on encode) or a type name nobody registered."""


class EncodeError(ValueError):
    """A message the decoder would refuse, refused at the sender: ``field`` names where
    (``message.body.items[3]``), ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


MAX_DEPTH = 200
"""The deepest nesting of arrays and objects the decoder's JSON parser (pydantic-core)
reads, counting the message itself as one level: a deeper document is refused."""

MAX_INT_DIGITS = 4300
"""The most digits of an integer the decoder's JSON parser reads ("number out of range")."""

_INT_LIMIT = 10**MAX_INT_DIGITS
_LONG_NUMBER = re.compile(rb"[0-9]{%d}" % (MAX_INT_DIGITS + 1))


def default_type_name(cls: type[Any]) -> str:
    explicit = cls.__dict__.get("__wow_type__")
    if isinstance(explicit, str):
        return explicit
    return f"{cls.__module__}.{cls.__qualname__}"


class BodyTypeRegistry:
    """Type names to body classes, for the classes this process knows.

    Each class gets one pydantic :class:`~pydantic.TypeAdapter`, built on first use; its
    compiled serializer and validator are kept beside it, so dumping or loading a body
    costs two dict lookups and one call into pydantic-core.
    """

    __slots__ = (
        "_adapters",
        "_by_name",
        "_by_type",
        "_dumpers",
        "_loaders",
        "_strict_json_checks",
        "_strict_loaders",
    )

    def __init__(self, types: Iterable[type[Any]] = ()) -> None:
        self._by_name: dict[str, type[Any]] = {}
        self._by_type: dict[type[Any], str] = {}
        self._adapters: dict[type[Any], TypeAdapter[Any]] = {}
        self._dumpers: dict[type[Any], tuple[str, Callable[..., Any]]] = {}
        self._strict_json_checks: dict[str, Callable[[bytes], Any]] = {}
        self._loaders: dict[str, Callable[[Any], Any]] = {}
        self._strict_loaders: dict[str, Callable[[Any], Any]] = {}
        for cls in types:
            self.register(cls)

    def register(self, cls: type[Any], name: str | None = None) -> str:
        type_name = name or default_type_name(cls)
        known = self._by_name.get(type_name)
        if known is not None and known is not cls:
            raise ValueError(
                f"body type name {type_name!r} is taken by {known.__module__}.{known.__qualname__}"
            )
        self._by_name[type_name] = cls
        self._by_type[cls] = type_name
        self._dumpers.pop(cls, None)  # re-registered under another name: dump by the new one
        self._strict_json_checks.pop(type_name, None)
        self._loaders.pop(type_name, None)
        self._strict_loaders.pop(type_name, None)
        return type_name

    def __contains__(self, cls: object) -> bool:
        return cls in self._by_type

    def name_of(self, cls: type[Any]) -> str:
        try:
            return self._by_type[cls]
        except KeyError:
            raise UnknownBodyTypeError(
                f"{cls.__module__}.{cls.__qualname__} is not a registered body type"
            ) from None

    def resolve(self, name: str) -> type[Any]:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownBodyTypeError(f"no body type is registered as {name!r}") from None

    def adapter(self, cls: type[Any]) -> TypeAdapter[Any]:
        adapter = self._adapters.get(cls)
        if adapter is None:
            adapter = self._adapters[cls] = TypeAdapter(cls)
        return adapter

    def dump(self, body: object) -> tuple[str, Any]:
        """The type name and JSON-ready data of ``body``; :class:`UnknownBodyTypeError` if unregistered."""
        cls = type(body)
        dumper = self._dumpers.get(cls)
        if dumper is None:
            dumper = self._dumpers[cls] = (self.name_of(cls), self.adapter(cls).serializer.to_python)
        return dumper[0], dumper[1](body, mode="json")

    def dump_json(self, body: object) -> tuple[str, bytes]:
        """The type name and compact JSON text of ``body`` (``to_json`` of :meth:`dump`'s
        data, non-finite floats written as the constants ``NaN``/``Infinity`` so that a
        caller can refuse them rather than lose them as ``null``);
        :class:`UnknownBodyTypeError` if unregistered."""
        type_name, data = self.dump(body)
        return type_name, to_json(data, inf_nan_mode="constants")

    def load(self, type_name: str, data: Any, *, strict: bool = False) -> Any:
        """The body of class ``type_name`` validated from ``data``; :class:`DecodeError` otherwise.

        ``strict``: as JSON in pydantic's strict mode with unknown fields refused (unless
        the class sets its own ``extra``); otherwise lax, unknown fields ignored.
        """
        loaders = self._strict_loaders if strict else self._loaders
        loader = loaders.get(type_name)
        if loader is None:
            try:
                cls = self.resolve(type_name)
            except UnknownBodyTypeError as error:
                raise DecodeError(DecodeFailureKind.UNKNOWN_BODY_TYPE, str(error)) from None
            loader = loaders[type_name] = (
                self._strict_loader(cls) if strict else self.adapter(cls).validator.validate_python
            )
        try:
            return loader(data)
        except ValidationError as error:
            raise DecodeError(DecodeFailureKind.INVALID_BODY, f"{type_name}: {_body_errors(error)}") from None

    def _strict_loader(self, cls: type[Any]) -> Callable[[Any], Any]:
        validate = command_body_validator(cls)

        def load(data: Any) -> Any:
            return validate(to_json(data))

        return load

    def check_strict(self, type_name: str, data: Any) -> None:
        """:class:`EncodeError` naming the field if ``data`` (dumped by :meth:`dump`) would
        not load strictly as ``type_name``."""
        try:
            self.load(type_name, data, strict=True)
        except DecodeError as error:
            raise EncodeError("message.body", f"a receiver would refuse it: {error.detail}") from None

    def check_strict_json(self, type_name: str, text: bytes) -> None:
        """:meth:`check_strict` of a body's JSON text (from :meth:`dump_json`): the very
        validation a strict receiver runs on it, without writing the text again."""
        check = self._strict_json_checks.get(type_name)
        if check is None:
            try:
                cls = self.resolve(type_name)
            except UnknownBodyTypeError as error:
                raise EncodeError("message.body", str(error)) from None
            check = self._strict_json_checks[type_name] = command_body_validator(cls)
        try:
            check(text)
        except ValidationError as error:
            detail = f"{type_name}: {_body_errors(error)}"
            raise EncodeError("message.body", f"a receiver would refuse it: {detail}") from None


_body_validators: dict[tuple[type[Any], bool], Callable[[str | bytes], Any]] = {}


def command_body_validator(cls: type[Any], *, strict: bool = True) -> Callable[[str | bytes], Any]:
    """The validator a receiver runs on the JSON text of a ``cls`` command body, built once
    per class: it returns the body, or raises pydantic's ``ValidationError`` listing every
    failed rule (its ``loc`` the field's path).

    ``strict`` (``WOW_COMMAND__STRICT_BODIES``, the default): pydantic's strict JSON mode,
    unknown fields refused unless ``cls`` sets its own ``extra`` (top level only); JSON
    mode, not Python mode, so an ISO string still reads as a datetime, an array as a
    tuple, a value as its enum member. Otherwise lax, unknown fields ignored. The codec,
    the HTTP routes and ``wow send`` all validate a body from JSON with it.
    """
    key = (cls, strict)
    validator = _body_validators.get(key)
    if validator is None:
        validate = TypeAdapter(cls).validator.validate_json
        if strict:
            extra: Literal["forbid"] | None = None if _configures_extra(cls) else "forbid"
            validator = functools.partial(validate, strict=True, extra=extra)
        else:
            validator = validate
        validator = _body_validators[key] = validator
    return validator


def _configures_extra(cls: type[Any]) -> bool:
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return "extra" in cls.model_config
    config = getattr(cls, "__pydantic_config__", None)
    return isinstance(config, dict) and "extra" in config


_SHOWN_ERRORS = 3


def _body_errors(error: ValidationError) -> str:
    """``3 error(s): body.amount: Input should be a valid integer; body.note: ...``."""
    details = error.errors(include_url=False, include_context=False, include_input=False)
    shown = "; ".join(
        "body" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in d["loc"]) + f": {d['msg']}"
        for d in details[:_SHOWN_ERRORS]
    )
    if len(details) > _SHOWN_ERRORS:
        shown += f" (and {len(details) - _SHOWN_ERRORS} more)"
    return f"{len(details)} error(s): {shown}"


# -- encoding ---------------------------------------------------------------------------


def _aggregate_to_wire(aggregate_id: AggregateId) -> dict[str, str]:
    return {
        "context": aggregate_id.context_name,
        "aggregate": aggregate_id.aggregate_name,
        "id": aggregate_id.id,
        "tenant": aggregate_id.tenant_id,
    }


def _event_to_wire(registry: BodyTypeRegistry, event: DomainEvent[Any]) -> dict[str, Any]:
    body_type, body = registry.dump(event.body)
    return {
        "id": event.id,
        "name": event.name,
        "version": event.version,
        "sequence": event.sequence,
        "is_last": event.is_last,
        "command_id": event.command_id,
        "revision": event.revision,
        "body_type": body_type,
        "body": body,
        "header": event.header.to_dict(),
        "create_time": event.create_time,
    }


def _stream_to_wire(registry: BodyTypeRegistry, stream: DomainEventStream) -> dict[str, Any]:
    return {
        "kind": "event",
        "id": stream.id,
        "aggregate": _aggregate_to_wire(stream.aggregate_id),
        "version": stream.version,
        "command_id": stream.command_id,
        "request_id": stream.request_id,
        "header": stream.header.to_dict(),
        "create_time": stream.create_time,
        "events": [_event_to_wire(registry, event) for event in stream.events],
    }


def to_wire(registry: BodyTypeRegistry, message: Message) -> dict[str, Any]:
    """The JSON-ready dict of a message."""
    if isinstance(message, CommandMessage):
        body_type, body = registry.dump(message.body)
        return {
            "kind": "command",
            "id": message.id,
            "request_id": message.request_id,
            "aggregate": _aggregate_to_wire(message.aggregate_id),
            "name": message.name,
            "body_type": body_type,
            "body": body,
            "header": message.header.to_dict(),
            "is_create": message.is_create,
            "allow_create": message.allow_create,
            "is_void": message.is_void,
            "aggregate_version": message.aggregate_version,
            "create_time": message.create_time,
        }
    if isinstance(message, DomainEventStream):
        return _stream_to_wire(registry, message)
    if isinstance(message, StateEvent):
        state_type, state = registry.dump(message.state)
        return {
            "kind": "state",
            "id": message.id,
            "header": message.header.to_dict(),
            "create_time": message.create_time,
            "deleted": message.deleted,
            "state_type": state_type,
            "state": state,
            "stream": _stream_to_wire(registry, message.stream),
        }
    raise TypeError(f"not a message: {type(message).__name__}")


WIRE_VERSION = 2
"""The wire version :meth:`MessageCodec.encode` writes (``"v"``); 1 is read too."""

READ_VERSIONS = (1, 2)
"""The wire versions :meth:`MessageCodec.decode` reads (1: unversioned, long keys)."""

_KIND_LETTERS = {TopicKind.COMMAND: "c", TopicKind.EVENT: "e", TopicKind.STATE: "s"}
_LETTER_KINDS = {letter: kind.value for kind, letter in _KIND_LETTERS.items()}

DEFAULT_REVISION = "0.0.1"
"""An event's revision when the wire form leaves it out (``DomainEvent``'s default)."""


def _aggregate_compact(aggregate_id: AggregateId) -> list[str]:
    named = aggregate_id.named_aggregate
    if aggregate_id.tenant_id == DEFAULT_TENANT_ID:
        return [named.context_name, named.aggregate_name, aggregate_id.id]
    return [named.context_name, named.aggregate_name, aggregate_id.id, aggregate_id.tenant_id]


def _event_compact(
    registry: BodyTypeRegistry, event: DomainEvent[Any], stream: DomainEventStream
) -> dict[str, Any]:
    body_type, body = registry.dump(event.body)
    data: dict[str, Any] = {"i": event.id, "n": event.name, "t": body_type, "b": body}
    if event.version != stream.version:
        data["ver"] = event.version
    if event.sequence != 1:
        data["s"] = event.sequence
    if not event.is_last:
        data["l"] = False
    if event.command_id != stream.command_id:
        data["ci"] = event.command_id
    if event.revision != DEFAULT_REVISION:
        data["rev"] = event.revision
    if event.header:
        data["h"] = event.header.to_dict()
    if event.create_time != stream.create_time:
        data["ts"] = event.create_time
    return data


def _stream_compact(registry: BodyTypeRegistry, stream: DomainEventStream) -> dict[str, Any]:
    data: dict[str, Any] = {
        "i": stream.id,
        "a": _aggregate_compact(stream.aggregate_id),
        "ver": stream.version,
        "ci": stream.command_id,
    }
    if stream.request_id != stream.command_id:
        data["r"] = stream.request_id
    if stream.header:
        data["h"] = stream.header.to_dict()
    data["ts"] = stream.create_time
    data["e"] = [_event_compact(registry, event, stream) for event in stream.events]
    return data


def compact_wire(registry: BodyTypeRegistry, message: Message) -> dict[str, Any]:
    """The JSON-ready dict of a message in wire version 2 (what :meth:`MessageCodec.encode` writes).

    A command: ``v`` (2), ``k`` (``"c"``), ``i`` id, ``a`` ``[context, aggregate, id]``
    (a fourth item: the tenant, when not the default), ``n`` name, ``t`` body type, ``b``
    body, ``ts`` create time; only when not their default: ``r`` request id (default: the
    id), ``h`` header (default: empty), ``cr`` is_create, ``ac`` allow_create, ``vd``
    is_void (default: false), ``av`` aggregate version (default: any). Event streams
    (``"e"``) and state events (``"s"``) likewise; see ``docs/transports/spi.md``.
    """
    if isinstance(message, CommandMessage):
        body_type, body = registry.dump(message.body)
        return {**_command_head(message, body_type), "b": body, **_command_tail(message)}
    if isinstance(message, DomainEventStream):
        return {"v": WIRE_VERSION, "k": "e", **_stream_compact(registry, message)}
    if isinstance(message, StateEvent):
        state_type, state = registry.dump(message.state)
        data = {"v": WIRE_VERSION, "k": "s", "i": message.id}
        if message.header:
            data["h"] = message.header.to_dict()
        data["ts"] = message.create_time
        if message.deleted:
            data["d"] = True
        data["t"] = state_type
        data["st"] = state
        data["es"] = _stream_compact(registry, message.stream)
        return data
    raise TypeError(f"not a message: {type(message).__name__}")


def _command_head(message: CommandMessage[Any], body_type: str) -> dict[str, Any]:
    """A command's members before its body ``b``."""
    return {
        "v": WIRE_VERSION,
        "k": "c",
        "i": message.id,
        "a": _aggregate_compact(message.aggregate_id),
        "n": message.name,
        "t": body_type,
    }


def _command_tail(message: CommandMessage[Any]) -> dict[str, Any]:
    """A command's members after its body: those away from their defaults, then ``ts``."""
    tail: dict[str, Any] = {}
    if message.request_id != message.id:
        tail["r"] = message.request_id
    header = message.header
    if header:
        tail["h"] = header.to_dict()
    if message.is_create:
        tail["cr"] = True
    if message.allow_create:
        tail["ac"] = True
    if message.is_void:
        tail["vd"] = True
    if message.aggregate_version is not None:
        tail["av"] = message.aggregate_version
    tail["ts"] = message.create_time
    return tail


def _splice_command(message: CommandMessage[Any], body_type: str, body: bytes) -> bytes:
    """The bytes :func:`compact_wire` and ``to_json`` write for ``message``, built around
    the body's JSON text ``body`` (the same members, in the same order)."""
    head = to_json(_command_head(message, body_type))
    return b"".join((head[:-1], b',"b":', body, b",", to_json(_command_tail(message))[1:]))


# -- decoding ---------------------------------------------------------------------------
#
# The envelope of every kind is one compiled pydantic-core schema: JSON text is parsed and
# checked in one pass in Rust (strict types: a string is a string, an integer is not a
# boolean nor a float), then the message objects are built from the checked dict. The body
# is rebuilt afterwards by its registered class only, so an unknown type name never
# reaches a validator.

_Text = Annotated[str, StringConstraints(strict=True, min_length=1)]
_AnyText = Annotated[str, Strict()]
_Int = Annotated[int, Strict()]
_Bool = Annotated[bool, Strict()]
_Header = dict[_Text, _AnyText]


class _AggregateWire(TypedDict):
    context: _Text
    aggregate: _Text
    id: _Text
    tenant: _Text


# Keys are cached while parsing, values are not: ids are unique, caching them is waste.
_PARSING = ConfigDict(cache_strings="keys")


class _CommandWire(TypedDict):
    __pydantic_config__ = _PARSING  # type: ignore[misc]

    kind: Literal["command"]
    id: _Text
    request_id: _Text
    aggregate: _AggregateWire
    name: _Text
    body_type: _Text
    body: Any
    header: _Header
    is_create: _Bool
    allow_create: _Bool
    is_void: _Bool
    aggregate_version: NotRequired[Annotated[int, Strict(), Ge(0)] | None]
    create_time: _Int


class _EventWire(TypedDict):
    id: _Text
    name: _Text
    version: _Int
    sequence: _Int
    is_last: _Bool
    command_id: _AnyText
    revision: _Text
    body_type: _Text
    body: Any
    header: _Header
    create_time: _Int


class _StreamFields(TypedDict):
    id: _Text
    aggregate: _AggregateWire
    version: Annotated[int, Strict(), Ge(1)]
    command_id: _AnyText
    request_id: _AnyText
    header: _Header
    create_time: _Int
    events: Annotated[list[_EventWire], MinLen(1)]


class _StreamWire(_StreamFields):
    __pydantic_config__ = _PARSING  # type: ignore[misc]

    kind: Literal["event"]


class _StateWire(TypedDict):
    __pydantic_config__ = _PARSING  # type: ignore[misc]

    kind: Literal["state"]
    id: _Text
    header: _Header
    create_time: _Int
    deleted: _Bool
    state_type: _Text
    state: Any
    stream: _StreamFields


@functools.cache
def _envelope(kind: TopicKind) -> SchemaValidator:
    """The compiled envelope validator of ``kind`` (built once, on first use)."""
    shapes: dict[TopicKind, Any] = {
        TopicKind.COMMAND: _CommandWire,
        TopicKind.EVENT: _StreamWire,
        TopicKind.STATE: _StateWire,
    }
    return TypeAdapter(shapes[kind]).validator  # type: ignore[return-value]


# Version 2: short keys, defaults left out (NotRequired), the aggregate as an array.

_AggregateV2 = Annotated[list[_Text], MinLen(3), MaxLen(4)]
# a JSON integer 2: not 2.0, not true (a Literal[2] takes 2.0); its schema says const 2
_Version = Annotated[int, Strict(), Ge(2), Le(2), WithJsonSchema({"type": "integer", "const": 2})]


class _CommandV2(TypedDict):
    __pydantic_config__ = _PARSING  # type: ignore[misc]

    v: _Version
    k: Literal["c"]
    i: _Text
    a: _AggregateV2
    n: _Text
    t: _Text
    b: Any
    ts: _Int
    r: NotRequired[_Text]
    h: NotRequired[_Header]
    cr: NotRequired[_Bool]
    ac: NotRequired[_Bool]
    vd: NotRequired[_Bool]
    av: NotRequired[Annotated[int, Strict(), Ge(0)]]


class _EventV2(TypedDict):
    i: _Text
    n: _Text
    t: _Text
    b: Any
    ver: NotRequired[_Int]
    s: NotRequired[_Int]
    l: NotRequired[_Bool]  # noqa: E741 - the wire key of is_last
    ci: NotRequired[_AnyText]
    rev: NotRequired[_Text]
    h: NotRequired[_Header]
    ts: NotRequired[_Int]


class _StreamFieldsV2(TypedDict):
    i: _Text
    a: _AggregateV2
    ver: Annotated[int, Strict(), Ge(1)]
    ci: _AnyText
    ts: _Int
    e: Annotated[list[_EventV2], MinLen(1)]
    r: NotRequired[_AnyText]
    h: NotRequired[_Header]


class _StreamV2(_StreamFieldsV2):
    __pydantic_config__ = _PARSING  # type: ignore[misc]

    v: _Version
    k: Literal["e"]


class _StateV2(TypedDict):
    __pydantic_config__ = _PARSING  # type: ignore[misc]

    v: _Version
    k: Literal["s"]
    i: _Text
    ts: _Int
    t: _Text
    st: Any
    es: _StreamFieldsV2
    h: NotRequired[_Header]
    d: NotRequired[_Bool]


@functools.cache
def _envelope_v2(kind: TopicKind) -> SchemaValidator:
    """The compiled version 2 envelope validator of ``kind`` (built once, on first use)."""
    shapes: dict[TopicKind, Any] = {
        TopicKind.COMMAND: _CommandV2,
        TopicKind.EVENT: _StreamV2,
        TopicKind.STATE: _StateV2,
    }
    return TypeAdapter(shapes[kind]).validator  # type: ignore[return-value]


_V2_PREFIX = '{"v":'
_V2_PREFIX_BYTES = _V2_PREFIX.encode()

V2_FIELDS: dict[str, str] = {
    "v": "wire version (2)",
    "k": "kind: c (command), e (event stream), s (state event)",
    "i": "id",
    "a": "aggregate: [context, aggregate, id] or [context, aggregate, id, tenant]",
    "n": "name",
    "t": "body type (state type in a state event): the name it was registered under",
    "b": "body",
    "ts": "create_time (epoch ms); an event without it: the stream's",
    "r": "request_id (absent: a command's id, a stream's command_id)",
    "h": "header (absent: empty)",
    "cr": "is_create (absent: false)",
    "ac": "allow_create (absent: false)",
    "vd": "is_void (absent: false)",
    "av": "aggregate_version expected (absent: any)",
    "ver": "version (an event without it: the stream's)",
    "s": "sequence (absent: 1)",
    "l": "is_last (absent: true)",
    "ci": "command_id (an event without it: the stream's)",
    "rev": "revision (absent: 0.0.1)",
    "e": "events",
    "st": "state",
    "es": "event stream",
    "d": "deleted (absent: false)",
}
"""What each key of a version 2 envelope holds (the wire page and the AsyncAPI schema say it)."""


_CACHE_SIZE = 4096
_named_aggregates: dict[tuple[str, str], NamedAggregate] = {}
_aggregate_ids: dict[tuple[str, str, str, str], AggregateId] = {}


def _aggregate_id(data: _AggregateWire) -> AggregateId:
    # Records mostly name aggregates seen before: each distinct id is checked and hashed
    # once, then the same immutable value is reused. Both caches are bounded (emptied
    # when full), so hostile records naming a new aggregate each time cannot grow them.
    key = (data["context"], data["aggregate"], data["id"], data["tenant"])
    aggregate_id = _aggregate_ids.get(key)
    if aggregate_id is not None:
        return aggregate_id
    named = _named_aggregates.get(key[:2])
    if named is None:
        named = NamedAggregate(key[0], key[1])  # ValueError for a bad name
        if len(_named_aggregates) >= _CACHE_SIZE:
            _named_aggregates.clear()
        _named_aggregates[key[:2]] = named
    aggregate_id = AggregateId(named, key[2], key[3])
    if len(_aggregate_ids) >= _CACHE_SIZE:
        _aggregate_ids.clear()
    _aggregate_ids[key] = aggregate_id
    return aggregate_id


def _stream(registry: BodyTypeRegistry, data: _StreamFields) -> DomainEventStream:
    aggregate_id = _aggregate_id(data["aggregate"])
    load = registry.load
    return DomainEventStream(
        aggregate_id=aggregate_id,
        version=data["version"],
        events=tuple(
            [
                DomainEvent(
                    aggregate_id=aggregate_id,
                    body=load(event["body_type"], event["body"]),
                    name=event["name"],
                    version=event["version"],
                    sequence=event["sequence"],
                    is_last=event["is_last"],
                    id=event["id"],
                    command_id=event["command_id"],
                    revision=event["revision"],
                    header=Header(event["header"]),
                    create_time=event["create_time"],
                )
                for event in data["events"]
            ]
        ),
        command_id=data["command_id"],
        request_id=data["request_id"],
        id=data["id"],
        header=Header(data["header"]),
        create_time=data["create_time"],
    )


def _build(registry: BodyTypeRegistry, data: Any, kind: TopicKind, strict: bool) -> Message:
    """The message of an envelope that passed its validator (``strict``: the command body)."""
    try:
        if kind is TopicKind.COMMAND:
            return CommandMessage(
                aggregate_id=_aggregate_id(data["aggregate"]),
                body=registry.load(data["body_type"], data["body"], strict=strict),
                name=data["name"],
                id=data["id"],
                request_id=data["request_id"],
                header=Header(data["header"]),
                is_create=data["is_create"],
                allow_create=data["allow_create"],
                is_void=data["is_void"],
                aggregate_version=data.get("aggregate_version"),
                create_time=data["create_time"],
            )
        if kind is TopicKind.EVENT:
            return _stream(registry, data)
        return StateEvent(
            stream=_stream(registry, data["stream"]),
            state=registry.load(data["state_type"], data["state"]),
            deleted=data["deleted"],
            id=data["id"],
            header=Header(data["header"]),
            create_time=data["create_time"],
        )
    except DecodeError:
        raise
    except ValueError as error:  # a rule of the model objects (a bad aggregate name...)
        raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"{kind.value}: {error}") from None


def _aggregate_id_v2(parts: list[str]) -> AggregateId:
    return _aggregate_id(
        {
            "context": parts[0],
            "aggregate": parts[1],
            "id": parts[2],
            "tenant": parts[3] if len(parts) == 4 else DEFAULT_TENANT_ID,
        }
    )


_NO_HEADER: dict[str, str] = {}


def _stream_v2(registry: BodyTypeRegistry, data: _StreamFieldsV2) -> DomainEventStream:
    aggregate_id = _aggregate_id_v2(data["a"])
    load = registry.load
    version = data["ver"]
    command_id = data["ci"]
    create_time = data["ts"]
    return DomainEventStream(
        aggregate_id=aggregate_id,
        version=version,
        events=tuple(
            [
                DomainEvent(
                    aggregate_id=aggregate_id,
                    body=load(event["t"], event["b"]),
                    name=event["n"],
                    version=event.get("ver", version),
                    sequence=event.get("s", 1),
                    is_last=event.get("l", True),
                    id=event["i"],
                    command_id=event.get("ci", command_id),
                    revision=event.get("rev", DEFAULT_REVISION),
                    header=Header(event.get("h", _NO_HEADER)),
                    create_time=event.get("ts", create_time),
                )
                for event in data["e"]
            ]
        ),
        command_id=command_id,
        request_id=data.get("r", command_id),
        id=data["i"],
        header=Header(data.get("h", _NO_HEADER)),
        create_time=create_time,
    )


def _build_v2(registry: BodyTypeRegistry, data: Any, kind: TopicKind, strict: bool) -> Message:
    """The message of a version 2 envelope that passed its validator."""
    try:
        if kind is TopicKind.COMMAND:
            return CommandMessage(
                aggregate_id=_aggregate_id_v2(data["a"]),
                body=registry.load(data["t"], data["b"], strict=strict),
                name=data["n"],
                id=data["i"],
                request_id=data.get("r", ""),
                header=Header(data.get("h", _NO_HEADER)),
                is_create=data.get("cr", False),
                allow_create=data.get("ac", False),
                is_void=data.get("vd", False),
                aggregate_version=data.get("av"),
                create_time=data["ts"],
            )
        if kind is TopicKind.EVENT:
            return _stream_v2(registry, data)
        return StateEvent(
            stream=_stream_v2(registry, data["es"]),
            state=registry.load(data["t"], data["st"]),
            deleted=data.get("d", False),
            id=data["i"],
            header=Header(data.get("h", _NO_HEADER)),
            create_time=data["ts"],
        )
    except DecodeError:
        raise
    except ValueError as error:  # a rule of the model objects (a bad aggregate name...)
        raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"{kind.value}: {error}") from None


_V2_LONG = {
    "v": "wire version",
    "k": "kind",
    "i": "id",
    "a": "aggregate",
    "n": "name",
    "t": "body type",
    "b": "body",
    "ts": "create_time",
    "r": "request_id",
    "h": "header",
    "cr": "is_create",
    "ac": "allow_create",
    "vd": "is_void",
    "av": "aggregate_version",
    "ver": "version",
    "s": "sequence",
    "l": "is_last",
    "ci": "command_id",
    "rev": "revision",
    "e": "events",
    "st": "state",
    "es": "stream",
    "d": "deleted",
}


def _is_v2(payload: object) -> bool:
    if isinstance(payload, str):
        return payload.startswith(_V2_PREFIX)
    return isinstance(payload, bytes | bytearray) and payload.startswith(_V2_PREFIX_BYTES)


def _v2_rewritten(payload: str | bytes) -> str | None:
    """The compact text, ``"v"`` first, of a JSON object that has a ``"v"`` member but
    does not start with it; None for anything else (which stays a version 1 failure)."""
    try:
        value = json.loads(payload)
    except (TypeError, ValueError, RecursionError):  # not text, not JSON, nested too deeply
        return None
    if not isinstance(value, dict) or "v" not in value:
        return None
    text = json.dumps({"v": value.pop("v"), **value}, separators=(",", ":"), ensure_ascii=False)
    return text if _is_v2(text) else None


def _where_v2(loc: tuple[int | str, ...]) -> str:
    """``message.ts (create_time)``: envelope keys with the field they hold; a body's own
    fields (below ``b`` or ``st``) as they are."""
    where = "message"
    envelope = True
    for part in loc:
        if isinstance(part, int):
            where += f"[{part}]"
            continue
        long = _V2_LONG.get(part) if envelope else None
        where += f".{part} ({long})" if long else f".{part}"
        if part in ("b", "st"):
            envelope = False
    return where


def _envelope_v2_error(error: ValidationError, kind: TopicKind) -> DecodeError:
    """The :class:`DecodeError` of a version 2 envelope that failed its validator."""
    details = error.errors(include_url=False, include_context=False)
    for detail in details:
        if detail["type"] in ("json_type", "string_unicode", "json_invalid"):
            return _envelope_error(error, kind)
        if detail["loc"] == ("v",):
            found = reprlib.repr(detail["input"])
            versions = " and ".join(str(v) for v in READ_VERSIONS)
            return DecodeError(
                DecodeFailureKind.WRONG_SHAPE,
                f"wire version {found} is not one this decoder reads (it reads {versions}): "
                "upgrade the receiver",
            )
        if detail["loc"] == ("k",) and detail["type"] == "literal_error":
            value = detail["input"]
            found = repr(_LETTER_KINDS[value]) if value in _LETTER_KINDS else reprlib.repr(value)
            return DecodeError(DecodeFailureKind.WRONG_SHAPE, f"expected a {kind.value} message, got {found}")
    shown = "; ".join(f"{_where_v2(d['loc'])}: {d['msg']}" for d in details[:_SHOWN_ERRORS])
    if len(details) > _SHOWN_ERRORS:
        shown += f" (and {len(details) - _SHOWN_ERRORS} more)"
    return DecodeError(DecodeFailureKind.WRONG_SHAPE, shown)


def _where(loc: tuple[int | str, ...]) -> str:
    return "message" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def _envelope_error(error: ValidationError, kind: TopicKind) -> DecodeError:
    """The :class:`DecodeError` of an envelope that failed its validator."""
    details = error.errors(include_url=False, include_context=False)
    for detail in details:
        if detail["type"] in ("json_type", "string_unicode"):  # not text, or not encodable text
            return DecodeError(DecodeFailureKind.NOT_JSON, detail["msg"])
        if detail["type"] == "json_invalid":
            # The parser refuses nesting deeper than its limit: valid syntax, hostile shape.
            failure = (
                DecodeFailureKind.WRONG_SHAPE
                if "recursion limit" in detail["msg"]
                else DecodeFailureKind.NOT_JSON
            )
            return DecodeError(failure, detail["msg"])
        if detail["loc"] == ("kind",) and detail["type"] == "literal_error":
            found = reprlib.repr(detail["input"])
            return DecodeError(DecodeFailureKind.WRONG_SHAPE, f"expected a {kind.value} message, got {found}")
    shown = "; ".join(f"{_where(d['loc'])}: {d['msg']}" for d in details[:_SHOWN_ERRORS])
    if len(details) > _SHOWN_ERRORS:
        shown += f" (and {len(details) - _SHOWN_ERRORS} more)"
    return DecodeError(DecodeFailureKind.WRONG_SHAPE, shown)


def from_wire(
    registry: BodyTypeRegistry, data: object, kind: TopicKind, *, strict_commands: bool = True
) -> Message:
    """Rebuild a message of ``kind`` from its JSON-ready dict; raises :class:`DecodeError`.

    ``strict_commands``: a command body is validated strictly (see the module docstring).
    Both wire versions are read: a dict with a ``"v"`` member is version 2 (a version
    not in :data:`READ_VERSIONS` is refused), one without is version 1."""
    if isinstance(data, dict) and "v" in data:
        try:
            envelope = _envelope_v2(kind).validate_python(data, strict=True)
        except ValidationError as error:
            raise _envelope_v2_error(error, kind) from None
        return _build_v2(registry, envelope, kind, strict_commands)
    try:
        envelope = _envelope(kind).validate_python(data, strict=True)
    except ValidationError as error:
        raise _envelope_error(error, kind) from None
    return _build(registry, envelope, kind, strict_commands)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"out of range float values are not JSON compliant: {name}")


def _to_json(data: dict[str, Any], source: object) -> str:
    """Compact JSON text (UTF-8, no ASCII escaping) of a JSON-ready dict, in one Rust pass.

    A field beyond the decoder's limits is named by its place in ``source`` (the message
    object: ``message.body.items[3]``, not the wire's short keys).
    Non-finite floats are refused like the standard library's ``allow_nan=False``: they
    are written as constants first, and only a text holding such a token (a rare string
    may too) is parsed again to tell which.
    """
    try:
        text = to_json(data, inf_nan_mode="constants")
    except ValueError as error:  # nested too deeply for the serializer
        field, reason = _beyond_limits(source, "message") or ("message", str(error))
        raise EncodeError(field, reason) from None
    return _within_limits(text, source)


def _within_limits(text: bytes, source: object) -> str:
    """``text`` decoded, once it is known that the decoder's parser reads it (see :func:`_to_json`)."""
    # A one-byte search first (memchr): searching for the words themselves is slow on
    # texts with long runs of their letters (a body of "nnnn..." took 2 us).
    if (b"N" in text and b"NaN" in text) or (b"I" in text and b"Infinity" in text):
        json.loads(text, parse_constant=_refuse_constant)
    # Only a text with more brackets than the depth limit can be too deep, only one with a
    # long run of digits can hold a too long integer: most messages skip the check.
    if text.count(b"{") + text.count(b"[") > MAX_DEPTH or (
        len(text) > MAX_INT_DIGITS and _LONG_NUMBER.search(text)
    ):
        try:
            from_json(text)  # the decoder's own parser and limits
        except ValueError as error:
            field, reason = _beyond_limits(source, "message") or ("message", str(error))
            raise EncodeError(field, reason) from None
    return text.decode()


def _children(value: object) -> Iterator[tuple[str, object]] | None:
    """The named parts of a JSON-ready value or a body object; None for a leaf."""
    if isinstance(value, dict):
        return ((f".{key}", item) for key, item in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return ((f"[{index}]", item) for index, item in enumerate(value))
    if isinstance(value, BaseModel):
        return ((f".{name}", getattr(value, name, None)) for name in type(value).model_fields)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f".{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value))
    return None


_SHOWN_PARTS = 6


def _beyond_limits(root: object, name: str) -> tuple[str, str] | None:
    """The first field of ``root`` the decoder's parser would refuse, and why (iterative:
    the value may be nested far deeper than Python's recursion limit)."""
    stack: list[tuple[object, tuple[str, ...]]] = [(root, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_LIMIT:
            reason = f"an integer of more than {MAX_INT_DIGITS} digits, no receiver reads it"
            return _field(name, path), reason
        children = _children(value)
        if children is None:
            continue
        if len(path) + 1 > MAX_DEPTH:  # this container is one level deeper than the limit
            return _field(name, path), f"nested more than {MAX_DEPTH} levels deep, no receiver reads it"
        stack.extend(reversed([(item, (*path, part)) for part, item in children]))
    return None


def _field(name: str, path: tuple[str, ...]) -> str:
    if len(path) > _SHOWN_PARTS:
        return name + "".join(path[:_SHOWN_PARTS]) + f"... ({len(path)} levels)"
    return name + "".join(path)


class MessageCodec:
    """Messages to JSON text and back, for one :class:`BodyTypeRegistry`.

    ``decode`` parses and checks the envelope in one compiled pass, then rebuilds the body
    by its registered class. It raises :class:`DecodeError` for every payload that is not
    a message of the asked kind, never another exception for bad input. JSON nested more
    deeply than :data:`MAX_DEPTH` levels is ``WRONG_SHAPE``.

    ``strict_commands`` (default true): a command body is decoded strictly, and encoded
    only if it would be (see the module docstring); false is pydantic's lax mode.
    """

    __slots__ = ("registry", "strict_commands")

    def __init__(self, registry: BodyTypeRegistry, *, strict_commands: bool = True) -> None:
        self.registry = registry
        self.strict_commands = strict_commands

    def encode(self, message: Message) -> str:
        """The JSON text of ``message``.

        :class:`EncodeError` (a ``ValueError``) naming the field when a receiver's
        decoder would refuse it: nested deeper than :data:`MAX_DEPTH`, an integer longer
        than :data:`MAX_INT_DIGITS` digits, a command body that does not validate
        strictly; ``ValueError`` for a non-finite float.
        """
        if isinstance(message, CommandMessage):
            return self._encode_command(message)
        try:
            data = compact_wire(self.registry, message)
        except ValueError as error:  # a body nested too deeply for the serializer, among others
            # The message objects name their parts as the wire form does (body, events[0]).
            field, reason = _beyond_limits(message, "message") or ("message", str(error))
            raise EncodeError(field, reason) from None
        return _to_json(data, message)

    def _encode_command(self, message: CommandMessage[Any]) -> str:
        """:func:`compact_wire`'s text of a command, the body written once: its JSON is
        spliced into the envelope's, and the strict check (a receiver's own validation)
        reads that same text."""
        try:
            body_type, body = self.registry.dump_json(message.body)
        except ValueError as error:  # a body nested too deeply for the serializer, among others
            field, reason = _beyond_limits(message, "message") or ("message", str(error))
            raise EncodeError(field, reason) from None
        text = _within_limits(_splice_command(message, body_type, body), message)
        if self.strict_commands:
            self.registry.check_strict_json(body_type, body)
        return text

    def decode(self, payload: str | bytes, kind: TopicKind) -> Message:
        """The message of ``payload`` (wire version 2, or the unversioned version 1).

        Version 2 is told by its first member, ``{"v":`` exactly as the encoder writes
        it; anything else is read as version 1 (whose validator refuses what is neither).
        A version 2 envelope another serializer rewrote (a ``jsonb`` column, a proxy that
        reorders or spaces members) fails that fast test and version 1; it is then read
        again from its compact text with ``"v"`` first, so it decodes the same.
        """
        if _is_v2(payload):
            try:
                envelope = _envelope_v2(kind).validate_json(payload, strict=True)
            except ValidationError as error:
                raise _envelope_v2_error(error, kind) from None
            return _build_v2(self.registry, envelope, kind, self.strict_commands)
        try:
            envelope = _envelope(kind).validate_json(payload)
        except ValidationError as error:
            rewritten = _v2_rewritten(payload)
            if rewritten is not None:
                return self.decode(rewritten, kind)
            raise _envelope_error(error, kind) from None
        return _build(self.registry, envelope, kind, self.strict_commands)
