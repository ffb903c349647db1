"""The JSON wire form of messages.

A body is written as JSON together with its registered *type name*; a receiver rebuilds
it only from a class that was registered in its :class:`BodyTypeRegistry` (nothing is
imported by name, nothing is pickled or evaluated). Bodies are dataclasses or pydantic
models; pydantic validates them on the way in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter, ValidationError

from wow_core.model.aggregate import AggregateId, NamedAggregate
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


def default_type_name(cls: type[Any]) -> str:
    explicit = cls.__dict__.get("__wow_type__")
    if isinstance(explicit, str):
        return explicit
    return f"{cls.__module__}.{cls.__qualname__}"


class BodyTypeRegistry:
    """Type names to body classes, for the classes this process knows."""

    __slots__ = ("_adapters", "_by_name", "_by_type")

    def __init__(self, types: Iterable[type[Any]] = ()) -> None:
        self._by_name: dict[str, type[Any]] = {}
        self._by_type: dict[type[Any], str] = {}
        self._adapters: dict[type[Any], TypeAdapter[Any]] = {}
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
        cls = type(body)
        return self.name_of(cls), self.adapter(cls).dump_python(body, mode="json")

    def load(self, type_name: str, data: Any) -> Any:
        try:
            cls = self.resolve(type_name)
        except UnknownBodyTypeError as error:
            raise DecodeError(DecodeFailureKind.UNKNOWN_BODY_TYPE, str(error)) from None
        try:
            return self.adapter(cls).validate_python(data)
        except ValidationError as error:
            raise DecodeError(
                DecodeFailureKind.INVALID_BODY,
                f"{type_name}: {error.error_count()} error(s): {error}",
            ) from None


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


# -- decoding ---------------------------------------------------------------------------


class _Reader:
    """Typed access to an untrusted JSON object; every miss is a WRONG_SHAPE error."""

    __slots__ = ("_data", "_where")

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise DecodeError(
                DecodeFailureKind.WRONG_SHAPE, f"{where} must be a JSON object, got {_kind(data)}"
            )
        self._data: dict[str, Any] = data
        self._where = where

    def _get(self, key: str) -> Any:
        try:
            return self._data[key]
        except KeyError:
            raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"{self._where} has no {key!r}") from None

    def text(self, key: str, *, empty: bool = False) -> str:
        value = self._get(key)
        if not isinstance(value, str) or (not empty and not value):
            raise DecodeError(
                DecodeFailureKind.WRONG_SHAPE, f"{self._where}.{key} must be a non-empty string"
            )
        return value

    def integer(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key) if not optional else self._data.get(key)
        if optional and value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"{self._where}.{key} must be an integer")
        return value

    def boolean(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"{self._where}.{key} must be a boolean")
        return value

    def raw(self, key: str) -> Any:
        return self._get(key)

    def obj(self, key: str) -> _Reader:
        return _Reader(self._get(key), f"{self._where}.{key}")

    def array(self, key: str) -> list[Any]:
        value = self._get(key)
        if not isinstance(value, list):
            raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"{self._where}.{key} must be a list")
        return value

    def header(self, key: str = "header") -> Header:
        value = self._get(key)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
        ):
            raise DecodeError(
                DecodeFailureKind.WRONG_SHAPE,
                f"{self._where}.{key} must map non-empty strings to strings",
            )
        return Header(value)


def _kind(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _aggregate_from_wire(reader: _Reader) -> AggregateId:
    try:
        return AggregateId(
            NamedAggregate(reader.text("context"), reader.text("aggregate")),
            reader.text("id"),
            reader.text("tenant"),
        )
    except DecodeError:
        raise
    except ValueError as error:
        raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"aggregate: {error}") from None


def _stream_from_wire(registry: BodyTypeRegistry, reader: _Reader) -> DomainEventStream:
    aggregate_id = _aggregate_from_wire(reader.obj("aggregate"))
    events = []
    for index, item in enumerate(reader.array("events")):
        event = _Reader(item, f"events[{index}]")
        events.append(
            DomainEvent(
                aggregate_id=aggregate_id,
                body=registry.load(event.text("body_type"), event.raw("body")),
                name=event.text("name"),
                version=event.integer("version"),
                sequence=event.integer("sequence"),
                is_last=event.boolean("is_last"),
                id=event.text("id"),
                command_id=event.text("command_id", empty=True),
                revision=event.text("revision"),
                header=event.header(),
                create_time=event.integer("create_time"),
            )
        )
    try:
        return DomainEventStream(
            aggregate_id=aggregate_id,
            version=reader.integer("version"),
            events=tuple(events),
            command_id=reader.text("command_id", empty=True),
            request_id=reader.text("request_id", empty=True),
            id=reader.text("id"),
            header=reader.header(),
            create_time=reader.integer("create_time"),
        )
    except DecodeError:
        raise
    except ValueError as error:
        raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"event stream: {error}") from None


def from_wire(registry: BodyTypeRegistry, data: object, kind: TopicKind) -> Message:
    """Rebuild a message of ``kind`` from its JSON-ready dict; raises :class:`DecodeError`."""
    reader = _Reader(data, "message")
    found = reader.text("kind")
    if found != kind.value:
        raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"expected a {kind.value} message, got {found!r}")
    if kind is TopicKind.COMMAND:
        try:
            return CommandMessage(
                aggregate_id=_aggregate_from_wire(reader.obj("aggregate")),
                body=registry.load(reader.text("body_type"), reader.raw("body")),
                name=reader.text("name"),
                id=reader.text("id"),
                request_id=reader.text("request_id"),
                header=reader.header(),
                is_create=reader.boolean("is_create"),
                allow_create=reader.boolean("allow_create"),
                is_void=reader.boolean("is_void"),
                aggregate_version=reader.integer("aggregate_version", optional=True),
                create_time=reader.integer("create_time"),
            )
        except DecodeError:
            raise
        except ValueError as error:
            raise DecodeError(DecodeFailureKind.WRONG_SHAPE, f"command: {error}") from None
    if kind is TopicKind.EVENT:
        return _stream_from_wire(registry, reader)
    return StateEvent(
        stream=_stream_from_wire(registry, reader.obj("stream")),
        state=registry.load(reader.text("state_type"), reader.raw("state")),
        deleted=reader.boolean("deleted"),
        id=reader.text("id"),
        header=reader.header(),
        create_time=reader.integer("create_time"),
    )


_dumps: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode


class MessageCodec:
    """Messages to JSON text and back, for one :class:`BodyTypeRegistry`."""

    __slots__ = ("registry",)

    def __init__(self, registry: BodyTypeRegistry) -> None:
        self.registry = registry

    def encode(self, message: Message) -> str:
        return _dumps(to_wire(self.registry, message))

    def decode(self, payload: str | bytes, kind: TopicKind) -> Message:
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as error:
            raise DecodeError(DecodeFailureKind.NOT_JSON, str(error)) from None
        return from_wire(self.registry, data, kind)
