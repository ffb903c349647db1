"""Names of aggregates: who owns a message."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")

DEFAULT_TENANT_ID = "(0)"


def _check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(
            f"{kind} {value!r} is not valid: use letters, digits, '_' and '-', "
            "starting with a letter or digit"
        )
    return value


@dataclass(frozen=True, slots=True)
class NamedAggregate:
    """An aggregate type inside a bounded context, e.g. ``bank.account``.

    It names a topic: every message of one named aggregate travels on the same
    topic of its kind (command, event, state).
    """

    context_name: str
    aggregate_name: str
    _hash: int = field(init=False, repr=False, compare=False)
    key: str = field(init=False, repr=False, compare=False)
    """``context.aggregate``, interned: a key that equals another named aggregate's
    exactly when the two are equal (a name holds no ``.``), hashed without a Python call
    (the metrics caches are keyed by it on every message)."""

    def __post_init__(self) -> None:
        _check_name("context name", self.context_name)
        _check_name("aggregate name", self.aggregate_name)
        # Named aggregates key routes, registries and stores: hash once.
        object.__setattr__(self, "_hash", hash((self.context_name, self.aggregate_name)))
        object.__setattr__(self, "key", sys.intern(f"{self.context_name}.{self.aggregate_name}"))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (
            self._hash == other._hash
            and self.context_name == other.context_name
            and self.aggregate_name == other.aggregate_name
        )

    def __str__(self) -> str:
        return self.key

    @classmethod
    def parse(cls, text: str) -> NamedAggregate:
        """Parse ``context.aggregate``."""
        context, sep, aggregate = text.partition(".")
        if not sep:
            raise ValueError(f"named aggregate {text!r} must look like 'context.aggregate'")
        return cls(context, aggregate)


@dataclass(frozen=True, slots=True)
class AggregateId:
    """One aggregate instance: its named aggregate, its id and its tenant."""

    named_aggregate: NamedAggregate
    id: str
    tenant_id: str = DEFAULT_TENANT_ID
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("aggregate id must be a non-empty string")
        if not isinstance(self.tenant_id, str) or not self.tenant_id:
            raise ValueError("tenant id must be a non-empty string")
        # Aggregate ids key every lane, cache and store lookup: hash once.
        object.__setattr__(self, "_hash", hash((self.named_aggregate, self.id, self.tenant_id)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (
            self._hash == other._hash
            and self.id == other.id
            and self.tenant_id == other.tenant_id
            and self.named_aggregate == other.named_aggregate
        )

    @property
    def context_name(self) -> str:
        return self.named_aggregate.context_name

    @property
    def aggregate_name(self) -> str:
        return self.named_aggregate.aggregate_name

    def __str__(self) -> str:
        return f"{self.named_aggregate}@{self.id}"
