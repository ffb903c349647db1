"""Command body validation, run by the gateway before sending and by the kernel before
any aggregate decides a command.

A body is valid when pydantic validates it against its own class: field types and
constraints (``Annotated[int, Field(gt=0)]``, pydantic validators) of a dataclass or a
pydantic model. A body may add cross-field rules with a ``violations()`` method that
returns messages (or :class:`Violation` s); any it returns make the command invalid.

:func:`validate_body` applies the rules a receiver applies to a command body from the
wire (``WOW_COMMAND__STRICT_BODIES=true``, the default): the body's field values, written
as JSON as they are, must pass the codec's strict validator of the class
(:func:`~wow_core.model.wire.command_body_validator`). So ``"5"``, ``True`` or ``1.0``
for an ``int`` is a violation in-process as it is on the wire, never a value the
command function receives. A body whose values JSON cannot carry (an arbitrary object
of a class allowing arbitrary types) is validated in lax mode instead: it can only be
handed over in-process. :func:`validate_body_lax` (``WOW_COMMAND__STRICT_BODIES=false``)
is pydantic's lax mode: what it would convert is accepted, and left unconverted.

pydantic is not called for a plain dataclass body whose fields are all annotated ``str``,
``int``, ``float``, ``bool`` or ``bytes`` (no ``Annotated`` constraint, no
``__post_init__``) and hold values of exactly those types: pydantic would find nothing
to report. Any other value (an ``int`` for a ``float``, a subclass, ``None``) and every
other body goes through pydantic, so the violations are the same either way.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticSerializationError, to_json

from wow_core.command.stages import Violation
from wow_core.model.wire import command_body_validator

_adapters: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    adapter = _adapters.get(cls)
    if adapter is None:
        adapter = _adapters[cls] = TypeAdapter(cls)
    return adapter


_EXACT = (str, int, float, bool, bytes)
"""Field types a value of exactly that type always satisfies in pydantic (no constraint)."""

_exact_types: dict[type[Any], tuple[tuple[str, type[Any]], ...] | None] = {}


def _exact_fields(cls: type[Any]) -> tuple[tuple[str, type[Any]], ...] | None:
    """For a plain dataclass whose every init field is annotated with one of :data:`_EXACT`
    (no ``Annotated`` constraint, no ``__post_init__``, no pydantic configuration): its
    ``(name, type)`` pairs; otherwise None (pydantic validates every body of the class)."""
    if cls in _exact_types:
        return _exact_types[cls]
    exact: tuple[tuple[str, type[Any]], ...] | None = None
    if (
        dataclasses.is_dataclass(cls)
        and not hasattr(cls, "__post_init__")
        and not hasattr(cls, "__pydantic_config__")
        and not hasattr(cls, "__pydantic_validator__")
    ):
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception:
            hints = None
        if hints is not None:
            init = [f for f in dataclasses.fields(cls) if f.init]
            pairs = [(f.name, hints.get(f.name)) for f in init]
            constrained = any(isinstance(f.default, FieldInfo) for f in init)
            if not constrained and all(kind in _EXACT for _, kind in pairs):
                exact = tuple((name, kind) for name, kind in pairs if isinstance(kind, type))
    _exact_types[cls] = exact
    return exact


def _exactly_typed(body: object, exact: tuple[tuple[str, type[Any]], ...]) -> bool:
    """Every field holds a value of exactly its annotated type (then pydantic finds no
    violation: none of these types has a constraint; ``bool`` is not taken for ``int``)."""
    return all(type(getattr(body, name)) is kind for name, kind in exact)


_plans: dict[type[Any], tuple[tuple[str, ...], Any] | None] = {}


def _plan(cls: type[Any]) -> tuple[tuple[str, ...], Any] | None:
    """The field names and validating callable of a body class (None: not validated)."""
    if cls in _plans:
        return _plans[cls]
    plan: tuple[tuple[str, ...], Any] | None
    if issubclass(cls, BaseModel):
        plan = (tuple(cls.model_fields), cls.model_validate)
    elif dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
        plan = (names, _adapter(cls).validate_python)
    else:
        plan = None
    _plans[cls] = plan
    return plan


def _violations_of(error: ValidationError) -> list[Violation]:
    return [Violation(".".join(str(part) for part in item["loc"]), item["msg"]) for item in error.errors()]


def _field_violations(body: object, *, strict: bool) -> list[Violation]:
    cls = type(body)
    exact = _exact_fields(cls)
    if exact is not None and _exactly_typed(body, exact):
        return []  # what pydantic would find, without building a dict and validating it
    plan = _plan(cls)
    if plan is None:
        return []
    names, validate = plan
    values = {name: getattr(body, name) for name in names}
    try:
        if strict:
            try:
                # The values as they are (``True`` stays ``true``, not the ``1`` the
                # class's serializer would write for an int), then the codec's own check.
                text = to_json(values, inf_nan_mode="constants")
            except PydanticSerializationError:
                validate(values)  # a value JSON cannot carry: in-process only, checked laxly
            else:
                command_body_validator(cls)(text)
        else:
            validate(values)
    except ValidationError as error:
        return _violations_of(error)
    return []


_RECENT_LIMIT = 8192
_recent_valid: OrderedDict[int, object] = OrderedDict()
"""Bodies found valid lately, by identity: the gateway validates a body, the kernel of
the same process receives that very object and need not validate it again. The dict
holds the bodies themselves, so an id cannot be reused while it is remembered. Bodies are
values: one changed after it was sent is not validated again. The oldest is forgotten
first, in constant time (``popitem(last=False)``: a plain dict's ``next(iter(...))``
walks over every slot deleted before it, a tenth of a send's CPU once it was full)."""
_recent_lax_valid: OrderedDict[int, object] = OrderedDict()
"""The same for :func:`validate_body_lax` (a body valid in lax mode may not be strictly)."""


def _validate(body: object, strict: bool, recent: OrderedDict[int, object]) -> list[Violation]:
    key = id(body)
    if recent.get(key) is body:
        return []
    found = _field_violations(body, strict=strict)
    custom = getattr(body, "violations", None)
    if callable(custom):
        extra: Iterable[object] = custom() or ()
        found.extend(item if isinstance(item, Violation) else Violation("", str(item)) for item in extra)
    if not found:
        if len(recent) >= _RECENT_LIMIT:
            recent.popitem(last=False)
        recent[key] = body
    return found


def validate_body(body: object) -> list[Violation]:
    """The violations of ``body`` by the strict rules of the wire; empty when it is valid."""
    return _validate(body, True, _recent_valid)


def validate_body_lax(body: object) -> list[Violation]:
    """The violations of ``body`` in pydantic's lax mode (``WOW_COMMAND__STRICT_BODIES=false``)."""
    return _validate(body, False, _recent_lax_valid)


def body_validator(strict: bool) -> Callable[[object], list[Violation]]:
    """:func:`validate_body` or, for ``strict=False``, :func:`validate_body_lax`."""
    return validate_body if strict else validate_body_lax
