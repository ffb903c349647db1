"""Command serializers: the wire form of a command marked asynchronous.

:class:`CommandSerializer` owns only the conversion of a command (``serialize``,
``deserialize(payload, command_class)``). A serializer that takes part in automatic
selection is also a :class:`CommandSerializerSupport` (``supports(command_class)``);
:class:`CompositeCommandSerializer` asks its members in order, and the first that
claims a class owns it: its failure is final, no later member is tried.

:class:`JsonCommandSerializer` is the strict default. What it accepts and rejects is a
table in ``docs/application.md``; in short, it moves the public, constructor-backed
state of a dataclass or a pydantic model, made of JSON-safe values
(:mod:`wow_core.application.json_safe`) that match the declared field types, and
nothing else. ``serialize`` checks the class and the state without calling the
constructor; ``deserialize`` checks the payload's shape and types before it calls the
constructor, then checks that the constructed command holds exactly the state it was
given (a ``__post_init__`` or a validator that changes a field is refused).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Union, get_args, get_origin, runtime_checkable

from pydantic import BaseModel, RootModel

from wow_core.application import json_safe
from wow_core.application.errors import CommandSerializationError
from wow_core.application.settings import SerializerSettings

__all__ = [
    "CommandSerializer",
    "CommandSerializerSupport",
    "CompositeCommandSerializer",
    "JsonCommandSerializer",
]

DEFAULT_MAX_PAYLOAD_CHARS = 1_000_000


@runtime_checkable
class CommandSerializer(Protocol):
    """Turns a command into a string and back; raises
    :class:`~wow_core.application.errors.CommandSerializationError` for what it refuses."""

    def serialize(self, command: object) -> str: ...

    def deserialize(self, payload: str, command_class: type[Any]) -> object: ...


@runtime_checkable
class CommandSerializerSupport(Protocol):
    """A serializer that says which command classes it owns."""

    def supports(self, command_class: type[Any]) -> bool: ...


class CompositeCommandSerializer:
    """Delegates to the first member whose ``supports`` claims the command class.

    Every member must be both a :class:`CommandSerializer` and a
    :class:`CommandSerializerSupport`; that is checked here, at construction, so a wrong
    configuration fails at start-up and not at the first dispatch. Once a member claimed
    a class, its error is final (a later member that would have accepted the command is
    not tried: which format a class travels in must not depend on its values).
    """

    __slots__ = ("members",)

    def __init__(self, serializers: Iterable[object]) -> None:
        if isinstance(serializers, (str, bytes)) or not isinstance(serializers, Iterable):
            raise TypeError(
                f"CompositeCommandSerializer takes an iterable of serializers, not {serializers!r}"
            )
        members = list(serializers)
        if not members:
            raise ValueError("CompositeCommandSerializer needs at least one serializer")
        for index, member in enumerate(members):
            if not isinstance(member, CommandSerializer) or not isinstance(member, CommandSerializerSupport):
                raise TypeError(
                    f"serializer #{index} ({type(member).__qualname__}) must implement serialize, "
                    "deserialize and supports (CommandSerializer and CommandSerializerSupport)"
                )
        self.members: tuple[Any, ...] = tuple(members)

    def _owner(self, command_class: type[Any]) -> Any:
        for member in self.members:
            if member.supports(command_class):
                return member
        raise CommandSerializationError(f"no configured serializer supports {_class_name(command_class)}")

    def supports(self, command_class: type[Any]) -> bool:
        return any(member.supports(command_class) for member in self.members)

    def serialize(self, command: object) -> str:
        payload: str = self._owner(type(command)).serialize(command)
        return payload

    def deserialize(self, payload: str, command_class: type[Any]) -> object:
        command: object = self._owner(command_class).deserialize(payload, command_class)
        return command


def _class_name(cls: object) -> str:
    if isinstance(cls, type):
        return f"{cls.__module__}.{cls.__qualname__}"
    return repr(cls)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    annotation: Any
    required: bool


_SCALARS = (bool, int, float, str)


class JsonCommandSerializer:
    """The strict JSON serializer of dataclass and pydantic commands.

    ``max_depth`` bounds how many containers deep a field's value may nest
    (``WOW_APPLICATION__SERIALIZER__MAX_DEPTH``); ``max_payload_chars`` bounds the
    payload ``deserialize`` parses.
    """

    __slots__ = ("_fields", "max_depth", "max_payload_chars")

    def __init__(
        self,
        *,
        max_depth: int = json_safe.DEFAULT_MAX_DEPTH,
        max_payload_chars: int = DEFAULT_MAX_PAYLOAD_CHARS,
    ) -> None:
        if type(max_depth) is not int or max_depth < 1:
            raise ValueError(f"max_depth is a positive integer, not {max_depth!r}")
        if type(max_payload_chars) is not int or max_payload_chars < 2:
            raise ValueError(f"max_payload_chars is an integer of at least 2, not {max_payload_chars!r}")
        self.max_depth = max_depth
        self.max_payload_chars = max_payload_chars
        self._fields: dict[type[Any], tuple[_Field, ...]] = {}

    @classmethod
    def from_settings(cls, settings: SerializerSettings) -> JsonCommandSerializer:
        """Bounded by ``WOW_APPLICATION__SERIALIZER__*``."""
        return cls(max_depth=settings.max_depth, max_payload_chars=settings.max_payload_chars)

    # -- the class ---------------------------------------------------------------------

    def supports(self, command_class: type[Any]) -> bool:
        """Dataclasses and pydantic models (whether their fields are accepted is checked
        by ``serialize``/``deserialize``, and a refusal is then final)."""
        return isinstance(command_class, type) and (
            dataclasses.is_dataclass(command_class) or issubclass(command_class, BaseModel)
        )

    def fields_of(self, command_class: type[Any]) -> tuple[_Field, ...]:
        """The constructor-backed fields of ``command_class``; raises for a class it refuses."""
        known = self._fields.get(command_class)
        if known is None:
            known = self._fields[command_class] = _analyse(command_class)
        return known

    # -- the wire ----------------------------------------------------------------------

    def serialize(self, command: object) -> str:
        command_class = type(command)
        name = command_class.__qualname__
        state = _state(command, self.fields_of(command_class))
        for item in self.fields_of(command_class):
            _check_field(name, item, state[item.name], self.max_depth)
        return json_safe.encode(state, name, CommandSerializationError, self.max_depth, envelope=True)

    def deserialize(self, payload: str, command_class: type[Any]) -> object:
        fields = self.fields_of(command_class)
        name = command_class.__qualname__
        if type(payload) is str and len(payload) > self.max_payload_chars:
            raise CommandSerializationError(
                f"{name}: the payload has {len(payload)} characters, more than {self.max_payload_chars}"
            )
        data = json_safe.decode(payload, name, CommandSerializationError, self.max_depth, envelope=True)
        if type(data) is not dict:
            raise CommandSerializationError(f"{name}: the payload is not a JSON object")
        by_name = {item.name: item for item in fields}
        unknown = sorted(set(data) - set(by_name))
        if unknown:
            raise CommandSerializationError(f"{name}: unknown fields {', '.join(map(repr, unknown[:5]))}")
        missing = [item.name for item in fields if item.required and item.name not in data]
        if missing:
            raise CommandSerializationError(
                f"{name}: missing required fields {', '.join(map(repr, missing))}"
            )
        for key, value in data.items():
            _check_field(name, by_name[key], value, self.max_depth)
        arguments = json_safe.decode(payload, name, CommandSerializationError, self.max_depth, envelope=True)
        try:
            command = command_class(**arguments)
        except Exception as error:
            raise CommandSerializationError(
                f"{name}: the constructor refused the payload: {type(error).__name__}: {_first_line(error)}"
            ) from error
        if type(command) is not command_class:
            raise CommandSerializationError(
                f"{name}: constructing it returned {_class_name(type(command))}, not the class itself"
            )
        restored = _state(command, fields)
        for item in fields:
            _check_field(name, item, restored[item.name], self.max_depth)
            if item.name in data and not json_safe.same(restored[item.name], data[item.name]):
                raise CommandSerializationError(
                    f"{name}: the constructor changed the field {item.name!r}: "
                    "a reconstructed command must hold the state it was sent with"
                )
        return command


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else ""


# -- the analysis of a class ----------------------------------------------------------------


def _analyse(command_class: type[Any]) -> tuple[_Field, ...]:
    if not isinstance(command_class, type):
        raise CommandSerializationError(f"{command_class!r} is not a class")
    name = command_class.__qualname__
    if isinstance(command_class, type) and issubclass(command_class, BaseModel):
        fields = _pydantic_fields(command_class, name)
    elif dataclasses.is_dataclass(command_class):
        fields = _dataclass_fields(command_class, name)
    else:
        raise CommandSerializationError(
            f"{name}: only dataclasses and pydantic models are serialized as JSON commands"
        )
    _check_constructor(command_class, name, fields)
    return fields


def _hints(command_class: type[Any], name: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(command_class, include_extras=True)
    except Exception as error:
        raise CommandSerializationError(
            f"{name}: its field annotations cannot be resolved: {error}"
        ) from None


def _dataclass_fields(command_class: type[Any], name: str) -> tuple[_Field, ...]:
    params = getattr(command_class, "__dataclass_params__", None)
    if params is not None and not params.init:
        raise CommandSerializationError(f"{name}: a dataclass without its generated __init__ (init=False)")
    hints = _hints(command_class, name)
    result: list[_Field] = []
    declared: dict[str, dataclasses.Field[Any]] = command_class.__dataclass_fields__
    for item in declared.values():
        kind = item._field_type  # type: ignore[attr-defined]
        if kind is dataclasses._FIELD_CLASSVAR:  # type: ignore[attr-defined]
            continue
        if kind is dataclasses._FIELD_INITVAR:  # type: ignore[attr-defined]
            raise CommandSerializationError(
                f"{name}: the InitVar {item.name!r} is a constructor parameter without storage"
            )
        if item.name.startswith("_"):
            raise CommandSerializationError(f"{name}: the private field {item.name!r} is not transported")
        if not item.init:
            raise CommandSerializationError(
                f"{name}: the field {item.name!r} has init=False: it is not backed by the constructor"
            )
        static = inspect.getattr_static(command_class, item.name, None)
        if isinstance(static, (property, types.GetSetDescriptorType)) or (
            hasattr(static, "__get__")
            and hasattr(static, "__set__")
            and not _is_slot(command_class, item.name)
        ):
            raise CommandSerializationError(
                f"{name}: the field {item.name!r} is a property or descriptor, not stored state"
            )
        annotation = hints.get(item.name, item.type)
        _check_annotation(name, item.name, annotation)
        required = item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
        result.append(_Field(item.name, annotation, required))
    return tuple(result)


def _is_slot(command_class: type[Any], attribute: str) -> bool:
    return any(attribute in getattr(klass, "__slots__", ()) for klass in command_class.__mro__)


def _pydantic_fields(command_class: type[BaseModel], name: str) -> tuple[_Field, ...]:
    if issubclass(command_class, RootModel):
        raise CommandSerializationError(f"{name}: a RootModel has no named fields to transport")
    if command_class.__private_attributes__:
        private = ", ".join(map(repr, sorted(command_class.__private_attributes__)))
        raise CommandSerializationError(f"{name}: private attributes ({private}) are not constructor-backed")
    if command_class.model_computed_fields:
        computed = ", ".join(map(repr, sorted(command_class.model_computed_fields)))
        raise CommandSerializationError(
            f"{name}: computed fields ({computed}) are properties without storage"
        )
    if command_class.model_config.get("extra") == "allow":
        raise CommandSerializationError(f"{name}: extra='allow' admits fields that no declaration backs")
    hints = _hints(command_class, name)
    result: list[_Field] = []
    for field_name, info in command_class.model_fields.items():
        for alias in (info.alias, info.validation_alias, info.serialization_alias):
            if alias is not None and alias != field_name:
                raise CommandSerializationError(
                    f"{name}: the field {field_name!r} has an alias; the wire uses constructor names"
                )
        if info.init is False or info.init_var:
            raise CommandSerializationError(
                f"{name}: the field {field_name!r} is not backed by the constructor"
            )
        annotation = hints.get(field_name, info.annotation)
        _check_annotation(name, field_name, annotation)
        result.append(_Field(field_name, annotation, info.is_required()))
    return tuple(result)


def _check_constructor(command_class: type[Any], name: str, fields: tuple[_Field, ...]) -> None:
    try:
        signature = inspect.signature(command_class)
    except (TypeError, ValueError) as error:
        raise CommandSerializationError(
            f"{name}: its constructor has no inspectable signature: {error}"
        ) from None
    names = {item.name for item in fields}
    parameters = list(signature.parameters.values())
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise CommandSerializationError(f"{name}: a variadic constructor parameter ({parameter})")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise CommandSerializationError(f"{name}: a positional-only constructor parameter ({parameter})")
    if {parameter.name for parameter in parameters} != names:
        raise CommandSerializationError(
            f"{name}: the constructor's parameters are not its stored fields ({', '.join(sorted(names))})"
        )


def _check_annotation(name: str, field_name: str, annotation: Any) -> None:
    if not _supported(annotation):
        raise CommandSerializationError(
            f"{name}: the field {field_name!r} is declared {_show(annotation)}, which is not JSON-safe "
            "(accepted: None, bool, int, float, str, list[...], dict[str, ...], unions, Literal, Any)"
        )


def _show(annotation: Any) -> str:
    return getattr(annotation, "__qualname__", None) or repr(annotation)


def _supported(annotation: Any) -> bool:
    if annotation is Any or annotation is object or annotation is None or annotation is type(None):
        return True
    if annotation in _SCALARS or annotation is list or annotation is dict:
        return True
    origin = get_origin(annotation)
    arguments = get_args(annotation)
    if origin is typing.Annotated:
        return _supported(arguments[0])
    if origin is Union or origin is types.UnionType:
        return all(_supported(argument) for argument in arguments)
    if origin is Literal:
        return all(type(argument) in (bool, int, str) or argument is None for argument in arguments)
    if origin is list:
        return len(arguments) == 1 and _supported(arguments[0])
    if origin is dict:
        return len(arguments) == 2 and arguments[0] is str and _supported(arguments[1])
    return False


def _conforms(value: object, annotation: Any) -> bool:
    if annotation is Any or annotation is object:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    if annotation is bool or annotation is str:
        return type(value) is annotation
    if annotation is int:
        return type(value) is int
    if annotation is float:
        return type(value) is float or type(value) is int
    if annotation is list:
        return type(value) is list
    if annotation is dict:
        return type(value) is dict
    origin = get_origin(annotation)
    arguments = get_args(annotation)
    if origin is typing.Annotated:
        return _conforms(value, arguments[0])
    if origin is Union or origin is types.UnionType:
        return any(_conforms(value, argument) for argument in arguments)
    if origin is Literal:
        return any(json_safe.same(value, argument) for argument in arguments)
    if origin is list:
        return (
            isinstance(value, list) and type(value) is list and all(_conforms(v, arguments[0]) for v in value)
        )
    if origin is dict:
        return (
            isinstance(value, dict)
            and type(value) is dict
            and all(_conforms(v, arguments[1]) for v in value.values())
        )
    return False


def _state(command: object, fields: tuple[_Field, ...]) -> dict[str, Any]:
    name = type(command).__qualname__
    if isinstance(command, BaseModel):
        extra = command.model_extra
        if extra:
            raise CommandSerializationError(f"{name}: dynamic fields {', '.join(map(repr, sorted(extra)))}")
    else:
        stored = getattr(command, "__dict__", None)
        if isinstance(stored, Mapping):
            dynamic = sorted(set(stored) - {item.name for item in fields})
            if dynamic:
                raise CommandSerializationError(
                    f"{name}: attributes set outside the constructor ({', '.join(map(repr, dynamic[:5]))})"
                )
    return {item.name: getattr(command, item.name) for item in fields}


def _held(value: object) -> str:
    return json_safe.describe_type(value).removeprefix("an object of type ")


def _check_field(name: str, item: _Field, value: object, max_depth: int) -> None:
    where = f"{name}.{item.name}"
    json_safe.check_value(value, where, CommandSerializationError, max_depth)
    if not _conforms(value, item.annotation):
        raise CommandSerializationError(f"{where}: declared {_show(item.annotation)}, holds {_held(value)}")
