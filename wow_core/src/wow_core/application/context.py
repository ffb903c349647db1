"""Operation context serializers: which operation attributes cross the asynchronous boundary.

:class:`OperationContextSerializer` turns an operation's transportable attributes into
a string and back into a ``dict``. :class:`JsonOperationContextSerializer` moves only
the attributes named on its allowlist (empty by default: nothing crosses unless
declared), as strict JSON (:mod:`wow_core.application.json_safe`: exact ``int`` and
``float`` types, signed zero kept, no non-finite float, no object). A name starting with
``__`` is reserved for trusted runtime state and cannot be allowlisted; ``deserialize``
refuses a payload carrying an attribute that is not on the allowlist or is reserved.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from wow_core.application import json_safe
from wow_core.application.errors import OperationContextError
from wow_core.application.operation import RESERVED_PREFIX, Operation

__all__ = ["JsonOperationContextSerializer", "OperationContextSerializer"]

_WHERE = "operation context"


@runtime_checkable
class OperationContextSerializer(Protocol):
    def serialize(self, operation: Operation) -> str: ...

    def deserialize(self, payload: str) -> dict[str, Any]: ...


class JsonOperationContextSerializer:
    """Allowlisted attributes as a JSON object (see the module docstring).

    Attributes of the allowlist that the operation does not have are left out; an
    attribute not on the allowlist stays in this process.
    """

    __slots__ = ("allowlist", "max_depth")

    def __init__(
        self, allowlist: Iterable[str] = (), *, max_depth: int = json_safe.DEFAULT_MAX_DEPTH
    ) -> None:
        if isinstance(allowlist, (str, bytes)):
            raise TypeError("the allowlist is an iterable of attribute names, not one string")
        names: list[str] = []
        for name in allowlist:
            if type(name) is not str or not name:
                raise TypeError(f"an allowlisted attribute name is a non-empty string, not {name!r}")
            if name.startswith(RESERVED_PREFIX):
                raise ValueError(
                    f"{name!r} is reserved (a name starting with {RESERVED_PREFIX!r}), not allowlistable"
                )
            names.append(name)
        if type(max_depth) is not int or max_depth < 1:
            raise ValueError(f"max_depth is a positive integer, not {max_depth!r}")
        self.allowlist: frozenset[str] = frozenset(names)
        self.max_depth = max_depth

    def serialize(self, operation: Operation) -> str:
        context = {name: value for name, value in operation.attributes.items() if name in self.allowlist}
        return json_safe.encode(context, _WHERE, OperationContextError, self.max_depth, envelope=True)

    def deserialize(self, payload: str) -> dict[str, Any]:
        context = json_safe.decode(payload, _WHERE, OperationContextError, self.max_depth, envelope=True)
        if type(context) is not dict:
            raise OperationContextError("operation context: the payload is not a JSON object")
        for name in context:
            if name.startswith(RESERVED_PREFIX):
                raise OperationContextError(f"operation context: {name!r} is a reserved attribute")
            if name not in self.allowlist:
                raise OperationContextError(f"operation context: {name!r} is not on the allowlist")
        return context
