"""Which aggregates this service owns: the only ones local-first hands off and filters."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from wow_core.model import NamedAggregate

LocalAggregates = Callable[[NamedAggregate], bool]
"""Whether a named aggregate belongs to this service (its local receivers may handle it).

A distributed copy marked ``local_first=true`` is filtered only by receivers of a service
that owns its aggregate; another service subscribed to the same topic still gets it.
"""


def every_aggregate_is_local(named_aggregate: NamedAggregate) -> bool:
    """The default: this service owns every aggregate it sends to (the embedded setup)."""
    return True


def local_aggregates(owned: Iterable[NamedAggregate]) -> LocalAggregates:
    """A predicate over a fixed set of owned aggregates."""
    frozen = frozenset(owned)

    def is_local(named_aggregate: NamedAggregate) -> bool:
        return named_aggregate in frozen

    return is_local
