"""Command body validation, run by the gateway before sending and by the kernel before
any aggregate decides a command.

A body is valid when pydantic validates it against its own class: field types and
constraints (``Annotated[int, Field(gt=0)]``, pydantic validators) of a dataclass or a
pydantic model. A body may add cross-field rules with a ``violations()`` method that
returns messages (or :class:`Violation` s); any it returns make the command invalid.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from wow_core.command.stages import Violation

_adapters: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    adapter = _adapters.get(cls)
    if adapter is None:
        adapter = _adapters[cls] = TypeAdapter(cls)
    return adapter


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


def _field_violations(body: object) -> list[Violation]:
    plan = _plan(type(body))
    if plan is None:
        return []
    names, validate = plan
    try:
        validate({name: getattr(body, name) for name in names})
    except ValidationError as error:
        return [
            Violation(".".join(str(part) for part in item["loc"]), item["msg"]) for item in error.errors()
        ]
    return []


_RECENT_LIMIT = 8192
_recent_valid: OrderedDict[int, object] = OrderedDict()
"""Bodies found valid lately, by identity: the gateway validates a body, the kernel of
the same process receives that very object and need not validate it again. The dict
holds the bodies themselves, so an id cannot be reused while it is remembered. Bodies are
values: one changed after it was sent is not validated again. The oldest is forgotten
first, in constant time (``popitem(last=False)``: a plain dict's ``next(iter(...))``
walks over every slot deleted before it, a tenth of a send's CPU once it was full)."""


def validate_body(body: object) -> list[Violation]:
    """The violations of ``body``; empty when it is valid."""
    key = id(body)
    if _recent_valid.get(key) is body:
        return []
    found = _field_violations(body)
    custom = getattr(body, "violations", None)
    if callable(custom):
        extra: Iterable[object] = custom() or ()
        found.extend(item if isinstance(item, Violation) else Violation("", str(item)) for item in extra)
    if not found:
        if len(_recent_valid) >= _RECENT_LIMIT:
            _recent_valid.popitem(last=False)
        _recent_valid[key] = body
    return found
