"""Filter order: a topological sort under before/after, ties by value then registration."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wow_core.event import ComponentKind, FilterCycleError, FunctionExchange, Next, Order, filter_type, order
from wow_core.event.filter import FilterChainBuilder, sort_by_order, sort_filters


@dataclass
class Named:
    name: str
    order: Order

    async def filter(self, exchange: FunctionExchange, next: Next) -> None:
        await next(exchange)


def sorted_names(*items: Named) -> list[str]:
    return [item.name for item in sort_by_order(list(items), lambda i: i.name, lambda i: i.order)]


def test_the_spec_example_places_each_filter_as_early_as_its_value_allows() -> None:
    x = Named("X", Order(100, before=("Y",)))
    y = Named("Y", Order(0))
    z = Named("Z", Order(50))
    assert sorted_names(x, y, z) == ["Z", "X", "Y"]


def test_ties_go_by_value_then_registration_order() -> None:
    assert sorted_names(Named("b", Order(5)), Named("a", Order(5)), Named("c", Order(1))) == ["c", "b", "a"]


def test_after_constraints_hold_and_absent_names_are_ignored() -> None:
    a = Named("A", Order(0, after=("B",), before=("Ghost",)))
    b = Named("B", Order(10, after=("Nobody",)))
    assert sorted_names(a, b) == ["B", "A"]


def test_a_cycle_fails_naming_the_filters_in_it() -> None:
    a = Named("A", Order(0, before=("B",)))
    b = Named("B", Order(0, before=("C",)))
    c = Named("C", Order(0, before=("A",)))
    d = Named("D", Order(0, after=("C",)))
    with pytest.raises(FilterCycleError) as caught:
        sorted_names(d, a, b, c)
    cycle = caught.value.cycle
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"A", "B", "C"}
    assert "D" not in cycle
    # consecutive names respect the constraint direction: each must run before the next
    edges = {("A", "B"), ("B", "C"), ("C", "A")}
    assert all(pair in edges for pair in itertools.pairwise(cycle))
    assert "A" in str(caught.value)
    assert " -> " in str(caught.value)


def test_a_filter_ordered_before_itself_is_ignored_and_two_filters_with_one_name_refused() -> None:
    assert sorted_names(Named("A", Order(0, before=("A",)))) == ["A"]
    with pytest.raises(ValueError, match="two filters"):
        sorted_names(Named("A", Order(0)), Named("A", Order(1)))


@st.composite
def constrained(draw: st.DrawFn) -> list[Named]:
    count = draw(st.integers(1, 8))
    labels = [f"F{i}" for i in range(count)]
    extra = ["Ghost"]
    items = []
    for i, label in enumerate(labels):
        # only constraints towards higher indices (plus absent names): acyclic by construction
        later = labels[i + 1 :] + extra
        earlier_allowed = extra
        before = draw(st.lists(st.sampled_from(later), max_size=3, unique=True))
        after = draw(st.lists(st.sampled_from(earlier_allowed), max_size=1, unique=True))
        items.append(Named(label, Order(draw(st.integers(-5, 5)), tuple(before), tuple(after))))
    permutation = draw(st.permutations(items))
    # turn some "before" constraints into the equivalent "after" on the other filter
    flipped: list[Named] = []
    by_name = {item.name: item for item in permutation}
    moved: dict[str, list[str]] = {}
    for item in permutation:
        keep = []
        for other in item.order.before:
            if other in by_name and draw(st.booleans()):
                moved.setdefault(other, []).append(item.name)
            else:
                keep.append(other)
        flipped.append(Named(item.name, Order(item.order.value, tuple(keep), item.order.after)))
    return [
        Named(i.name, Order(i.order.value, i.order.before, i.order.after + tuple(moved.get(i.name, []))))
        for i in flipped
    ]


@settings(max_examples=300, deadline=None)
@given(constrained())
def test_every_produced_order_satisfies_every_constraint(items: list[Named]) -> None:
    result = sorted_names(*items)
    assert sorted(result) == sorted(item.name for item in items)
    position = {name: index for index, name in enumerate(result)}
    for item in items:
        for other in item.order.before:
            if other in position:
                assert position[item.name] < position[other]
        for other in item.order.after:
            if other in position:
                assert position[other] < position[item.name]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=8))
def test_without_constraints_the_order_is_value_then_registration(values: list[int]) -> None:
    items = [Named(f"F{i}", Order(v)) for i, v in enumerate(values)]
    expected = [item.name for item in sorted(items, key=lambda i: (i.order.value, int(i.name[1:])))]
    assert sorted_names(*items) == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6), st.data())
def test_any_cycle_is_detected(size: int, data: st.DataObject) -> None:
    labels = [f"F{i}" for i in range(size)]
    ring = data.draw(st.permutations(labels))
    items = [Named(label, Order(0, before=(ring[(ring.index(label) + 1) % size],))) for label in labels]
    with pytest.raises(FilterCycleError) as caught:
        sorted_names(*items)
    assert set(caught.value.cycle) == set(labels)


@order(10)
@filter_type(ComponentKind.PROJECTION)
class ProjectionOnly:
    async def filter(self, exchange: FunctionExchange, next: Next) -> None:
        await next(exchange)


@order(5, before=[ProjectionOnly])
class Everywhere:
    async def filter(self, exchange: FunctionExchange, next: Next) -> None:
        await next(exchange)


def test_filter_type_selects_per_dispatcher_and_the_built_chain_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    builder = FilterChainBuilder([ProjectionOnly(), Everywhere()])
    with caplog.at_level(logging.INFO, logger="wow.event.filter"):
        projection_chain = builder.build(ComponentKind.PROJECTION, "svc.ProjectionDispatcher")
        saga_chain = builder.build(ComponentKind.STATELESS_SAGA, "svc.StatelessSagaDispatcher")
    assert projection_chain.names == ["Everywhere", "ProjectionOnly"]
    assert saga_chain.names == ["Everywhere"]
    assert "Build svc.ProjectionDispatcher FilterChain: Everywhere -> ProjectionOnly" in caplog.text
    assert sort_filters([ProjectionOnly(), Everywhere()])[0].__class__ is Everywhere


def test_a_cycle_fails_building_the_chain_at_start_up() -> None:
    @order(0, before=["B"])
    class A:
        async def filter(self, exchange: FunctionExchange, next: Next) -> None: ...

    @order(0, before=[A])
    class B:
        async def filter(self, exchange: FunctionExchange, next: Next) -> None: ...

    with pytest.raises(FilterCycleError, match=r"A -> B -> A|B -> A -> B"):
        FilterChainBuilder([A(), B()]).build(ComponentKind.PROJECTION, "p")
