"""Exchange filters, their order and the chain they form (spec 003, "Filter Order").

A filter wraps the rest of the chain: it runs code before calling ``next``, and observes
its completion or error after. Filters enter from left to right and observe completion
from right to left.

Which filters a dispatcher uses: ``@filter_type(...)`` names the component kinds a filter
applies to (absent: all). How they are ordered: ``@order(value, before=..., after=...)``.
:func:`sort_filters` satisfies every before/after constraint as a whole (a topological
sort), places each filter as early as its value allows once its constraints hold (ties:
value, then registration order), ignores constraints naming an absent filter, and fails
with :class:`FilterCycleError` naming the cycle.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from wow_core.event.exchange import FunctionExchange
from wow_core.event.function import ComponentKind

logger = logging.getLogger("wow.event.filter")

Next = Callable[[FunctionExchange], Awaitable[None]]
C = TypeVar("C", bound=type[Any])


@runtime_checkable
class ExchangeFilter(Protocol):
    """One cross-cutting step of a chain."""

    async def filter(self, exchange: FunctionExchange, next: Next) -> None: ...


@dataclass(frozen=True, slots=True)
class Order:
    """``value`` (lower runs first) and the names of filters this one must run before / after."""

    value: int = 0
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


class FilterCycleError(ValueError):
    """Before/after constraints that form a cycle; ``cycle`` lists the filter names."""

    def __init__(self, cycle: Sequence[str]) -> None:
        self.cycle = tuple(cycle)
        super().__init__("filter order constraints form a cycle: " + " -> ".join(self.cycle))


def _name(ref: str | type[Any]) -> str:
    return ref if isinstance(ref, str) else ref.__name__


def order(
    value: int = 0, *, before: Iterable[str | type[Any]] = (), after: Iterable[str | type[Any]] = ()
) -> Callable[[C], C]:
    """Class decorator: this filter's :class:`Order`. Constraints name filter classes or names."""

    def mark(cls: C) -> C:
        cls.__wow_order__ = Order(value, tuple(map(_name, before)), tuple(map(_name, after)))
        return cls

    return mark


def filter_type(*kinds: ComponentKind) -> Callable[[C], C]:
    """Class decorator: the dispatchers (component kinds) this filter applies to."""

    def mark(cls: C) -> C:
        cls.__wow_filter_type__ = frozenset(kinds)
        return cls

    return mark


def filter_name(item: object) -> str:
    """A filter's name: its ``name`` attribute if it has one, else its class name."""
    name = getattr(item, "name", None)
    return name if isinstance(name, str) and name else type(item).__name__


def order_of(item: object) -> Order:
    found = getattr(item, "__wow_order__", None)
    return found if isinstance(found, Order) else Order()


def applies_to(item: object, kind: ComponentKind) -> bool:
    kinds = getattr(item, "__wow_filter_type__", None)
    return kinds is None or kind in kinds


T = TypeVar("T")


def sort_by_order(items: Sequence[T], name: Callable[[T], str], order_: Callable[[T], Order]) -> list[T]:
    """Topological order of ``items`` under their before/after constraints.

    Among the items whose constraints are satisfied, the one with the lowest
    ``(value, registration index)`` goes next.
    """
    index_of: dict[str, int] = {}
    for index, item in enumerate(items):
        key = name(item)
        if key in index_of:
            raise ValueError(f"two filters are named {key!r}")
        index_of[key] = index
    successors: list[set[int]] = [set() for _ in items]
    for index, item in enumerate(items):
        constraints = order_(item)
        for other in constraints.before:
            target = index_of.get(other)
            if target is not None and target != index:
                successors[index].add(target)
        for other in constraints.after:
            target = index_of.get(other)
            if target is not None and target != index:
                successors[target].add(index)
    indegree = [0] * len(items)
    for edges in successors:
        for target in edges:
            indegree[target] += 1
    ready = [(order_(item).value, index) for index, item in enumerate(items) if indegree[index] == 0]
    heapq.heapify(ready)
    result: list[T] = []
    while ready:
        _, index = heapq.heappop(ready)
        result.append(items[index])
        for target in successors[index]:
            indegree[target] -= 1
            if indegree[target] == 0:
                heapq.heappush(ready, (order_(items[target]).value, target))
    if len(result) < len(items):
        raise FilterCycleError([name(items[i]) for i in _find_cycle(successors, indegree)])
    return result


def _find_cycle(successors: list[set[int]], indegree: list[int]) -> list[int]:
    """One cycle among the nodes Kahn's algorithm left, in constraint direction, closed.

    Every node left has a predecessor that is left too, so walking predecessors must
    return to a node already seen: that loop is a cycle.
    """
    remaining = {i for i, degree in enumerate(indegree) if degree > 0}
    predecessors = {i: min(j for j in remaining if i in successors[j]) for i in remaining}
    path: list[int] = []
    position: dict[int, int] = {}
    node = min(remaining)
    while node not in position:
        position[node] = len(path)
        path.append(node)
        node = predecessors[node]
    cycle = path[position[node] :]
    cycle.reverse()
    return [*cycle, cycle[0]]


def sort_filters(filters: Sequence[ExchangeFilter]) -> list[ExchangeFilter]:
    return sort_by_order(filters, filter_name, order_of)


class FilterChain:
    """Sorted filters closed over a final handler; built once, invoked per exchange."""

    __slots__ = ("_entry", "filters", "name")

    def __init__(self, name: str, filters: Sequence[ExchangeFilter]) -> None:
        self.name = name
        self.filters = tuple(filters)

        entry: Next = _end
        for item in reversed(self.filters):
            entry = _link(item, entry)
        self._entry = entry

    @property
    def names(self) -> list[str]:
        return [filter_name(item) for item in self.filters]

    def invoke(self, exchange: FunctionExchange) -> Awaitable[None]:
        """Run ``exchange`` through the chain (await the result)."""
        return self._entry(exchange)

    def __repr__(self) -> str:
        return f"{self.name}FilterChain[{' -> '.join(self.names)}]"


class _Completed:
    """An awaitable that is already complete (the end of every chain)."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that finishes at once: awaiting it never suspends


_COMPLETED = _Completed()


def _end(exchange: FunctionExchange) -> Awaitable[None]:
    return _COMPLETED


def _link(item: ExchangeFilter, next_: Next) -> Next:
    bound = item.filter
    # A plain function returning the filter's coroutine: no extra coroutine frame per step.
    return lambda exchange: bound(exchange, next_)


class FilterChainBuilder:
    """Collects filters, keeps those for one component kind, sorts them, logs the chain."""

    def __init__(self, filters: Iterable[ExchangeFilter] = ()) -> None:
        self._filters: list[ExchangeFilter] = list(filters)

    def add(self, item: ExchangeFilter) -> FilterChainBuilder:
        self._filters.append(item)
        return self

    def build(self, kind: ComponentKind, name: str) -> FilterChain:
        """The chain for ``kind``; raises :class:`FilterCycleError` at start-up on a cycle."""
        selected = [item for item in self._filters if applies_to(item, kind)]
        chain = FilterChain(name, sort_filters(selected))
        logger.info("Build %s FilterChain: %s", name, " -> ".join(chain.names) or "(empty)")
        return chain
