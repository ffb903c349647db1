"""The event-store conformance suite: every EventStore implementation runs it.

Subclass :class:`EventStoreConformance` in a test module and provide one fixture,
``event_store``, that yields a fresh or shared store (tests use unique aggregate ids,
so a shared server is fine)::

    from wow_core.testing.event_store import EventStoreConformance

    class TestMyStore(EventStoreConformance):
        @pytest.fixture
        async def event_store(self):
            store = MyStore(...)
            yield store
            await store.close()

A store that serializes bodies must know the suite's body types: register
:data:`CONFORMANCE_BODY_TYPES` in its :class:`~wow_core.model.BodyTypeRegistry`.

The suite checks append and load, the optimistic version check, request-id
de-duplication per aggregate type, load ranges, the header marking and concurrent
appends (exactly one winner per version).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from wow_core.eventsourcing.store import (
    DuplicateRequestIdError,
    EventStore,
    EventVersionConflictError,
)
from wow_core.model import AggregateId, DomainEvent, DomainEventStream, NamedAggregate, new_id


@dataclass(frozen=True, slots=True)
class ConformanceOpened:
    """An event body of the suite."""

    owner: str


@dataclass(frozen=True, slots=True)
class ConformanceCredited:
    """An event body of the suite."""

    amount: int
    note: str = ""


CONFORMANCE_BODY_TYPES: tuple[type[Any], ...] = (ConformanceOpened, ConformanceCredited)
"""Body classes the suite appends; a serializing store must register them."""


def conformance_named_aggregate(aggregate_name: str = "account") -> NamedAggregate:
    return NamedAggregate("conformance", aggregate_name)


def new_aggregate_id(aggregate_name: str = "account", tenant_id: str = "t0") -> AggregateId:
    """A fresh aggregate id, so suites can share one server."""
    return AggregateId(conformance_named_aggregate(aggregate_name), uuid.uuid4().hex, tenant_id)


def make_stream(
    aggregate_id: AggregateId,
    version: int,
    bodies: Sequence[object] = (),
    *,
    request_id: str | None = None,
) -> DomainEventStream:
    """A stream of ``bodies`` (default: one credit) at ``version``."""
    command_id = new_id()
    items = list(bodies) or [ConformanceCredited(version, note=f"v{version}")]
    events = tuple(
        DomainEvent(
            aggregate_id=aggregate_id,
            body=body,
            name=type(body).__name__,
            version=version,
            sequence=index + 1,
            is_last=index == len(items) - 1,
            command_id=command_id,
        )
        for index, body in enumerate(items)
    )
    return DomainEventStream(
        aggregate_id=aggregate_id,
        version=version,
        events=events,
        command_id=command_id,
        request_id=request_id or new_id(),
    )


def _same(found: DomainEventStream, expected: DomainEventStream) -> None:
    assert found.id == expected.id
    assert found.aggregate_id == expected.aggregate_id
    assert found.version == expected.version
    assert found.command_id == expected.command_id
    assert found.request_id == expected.request_id
    assert found.create_time == expected.create_time
    assert found.header == expected.header
    assert [(e.id, e.name, e.body, e.version, e.sequence, e.is_last) for e in found.events] == [
        (e.id, e.name, e.body, e.version, e.sequence, e.is_last) for e in expected.events
    ]


class EventStoreConformance:
    """The contract of :class:`~wow_core.eventsourcing.EventStore`; subclass with an
    ``event_store`` fixture."""

    @pytest.fixture
    def event_store(self) -> EventStore:
        raise NotImplementedError("a conformance subclass provides the event_store fixture")

    # -- append and load ----------------------------------------------------------------

    async def test_append_then_load_returns_the_streams_in_order(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        first = make_stream(aggregate_id, 1, [ConformanceOpened("ada"), ConformanceCredited(5)])
        second = make_stream(aggregate_id, 2)
        await event_store.append(first)
        await event_store.append(second)
        loaded = await event_store.load(aggregate_id)
        assert len(loaded) == 2
        _same(loaded[0], first)
        _same(loaded[1], second)
        assert await event_store.last_version(aggregate_id) == 2

    async def test_unknown_aggregate_has_no_history(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        assert await event_store.load(aggregate_id) == []
        assert await event_store.last_version(aggregate_id) == 0

    async def test_append_marks_the_stream_header_read_only(self, event_store: EventStore) -> None:
        stream = make_stream(new_aggregate_id(), 1)
        await event_store.append(stream)
        assert stream.header.read_only

    async def test_tenants_are_separate_aggregates(self, event_store: EventStore) -> None:
        one = new_aggregate_id(tenant_id="t1")
        other = AggregateId(one.named_aggregate, one.id, "t2")
        await event_store.append(make_stream(one, 1))
        assert await event_store.last_version(other) == 0
        await event_store.append(make_stream(other, 1))
        assert await event_store.last_version(one) == 1

    # -- optimistic version check -------------------------------------------------------

    async def test_a_version_already_taken_conflicts(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        await event_store.append(make_stream(aggregate_id, 1))
        with pytest.raises(EventVersionConflictError) as caught:
            await event_store.append(make_stream(aggregate_id, 1))
        assert caught.value.aggregate_id == aggregate_id
        assert caught.value.expected_version == 0
        assert caught.value.actual_version == 1
        assert len(await event_store.load(aggregate_id)) == 1

    async def test_a_gap_in_versions_conflicts(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        await event_store.append(make_stream(aggregate_id, 1))
        with pytest.raises(EventVersionConflictError) as caught:
            await event_store.append(make_stream(aggregate_id, 3))
        assert caught.value.actual_version == 1
        assert await event_store.last_version(aggregate_id) == 1

    async def test_a_first_append_must_be_version_one(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        with pytest.raises(EventVersionConflictError):
            await event_store.append(make_stream(aggregate_id, 2))
        assert await event_store.load(aggregate_id) == []

    async def test_a_conflicting_append_does_not_claim_its_request_id(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        await event_store.append(make_stream(aggregate_id, 1))
        request_id = new_id()
        with pytest.raises(EventVersionConflictError):
            await event_store.append(make_stream(aggregate_id, 1, request_id=request_id))
        assert await event_store.find_request(aggregate_id.named_aggregate, request_id) is None
        await event_store.append(make_stream(aggregate_id, 2, request_id=request_id))

    # -- request-id de-duplication ------------------------------------------------------

    async def test_the_same_request_on_one_aggregate_is_a_duplicate(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        request_id = new_id()
        await event_store.append(make_stream(aggregate_id, 1, request_id=request_id))
        with pytest.raises(DuplicateRequestIdError) as caught:
            await event_store.append(make_stream(aggregate_id, 2, request_id=request_id))
        assert caught.value.aggregate_id == aggregate_id
        assert caught.value.version == 1
        assert await event_store.last_version(aggregate_id) == 1

    async def test_a_duplicate_wins_over_a_version_conflict(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        request_id = new_id()
        await event_store.append(make_stream(aggregate_id, 1, request_id=request_id))
        with pytest.raises(DuplicateRequestIdError):
            await event_store.append(make_stream(aggregate_id, 1, request_id=request_id))

    async def test_the_same_request_on_another_aggregate_of_the_type_names_the_original(
        self, event_store: EventStore
    ) -> None:
        original = new_aggregate_id()
        other = new_aggregate_id()
        request_id = new_id()
        await event_store.append(make_stream(original, 1, request_id=request_id))
        with pytest.raises(DuplicateRequestIdError) as caught:
            await event_store.append(make_stream(other, 1, request_id=request_id))
        assert caught.value.aggregate_id == original
        assert caught.value.version == 1
        assert caught.value.request_id == request_id
        assert await event_store.load(other) == []
        found = await event_store.find_request(original.named_aggregate, request_id)
        assert found is not None
        assert (found.aggregate_id, found.version) == (original, 1)

    async def test_request_ids_are_per_aggregate_type(self, event_store: EventStore) -> None:
        request_id = new_id()
        account = new_aggregate_id("account")
        order = new_aggregate_id("order")
        await event_store.append(make_stream(account, 1, request_id=request_id))
        await event_store.append(make_stream(order, 1, request_id=request_id))
        assert await event_store.last_version(order) == 1
        assert await event_store.find_request(order.named_aggregate, new_id()) is None

    # -- load ranges --------------------------------------------------------------------

    async def test_load_ranges_are_inclusive(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        for version in range(1, 6):
            await event_store.append(make_stream(aggregate_id, version))

        async def versions(head: int, tail: int | None) -> list[int]:
            return [stream.version for stream in await event_store.load(aggregate_id, head, tail)]

        assert await versions(1, None) == [1, 2, 3, 4, 5]
        assert await versions(2, 4) == [2, 3, 4]
        assert await versions(3, 3) == [3]
        assert await versions(4, None) == [4, 5]
        assert await versions(4, 99) == [4, 5]
        assert await versions(6, None) == []
        assert await versions(7, 9) == []

    async def test_a_meaningless_range_is_refused(self, event_store: EventStore) -> None:
        aggregate_id = new_aggregate_id()
        with pytest.raises(ValueError, match="head_version"):
            await event_store.load(aggregate_id, 0)
        with pytest.raises(ValueError, match="tail_version"):
            await event_store.load(aggregate_id, 3, 2)

    # -- concurrency --------------------------------------------------------------------

    async def test_concurrent_appends_of_one_version_have_exactly_one_winner(
        self, event_store: EventStore
    ) -> None:
        aggregate_id = new_aggregate_id()
        await event_store.append(make_stream(aggregate_id, 1))
        contenders = [make_stream(aggregate_id, 2) for _ in range(8)]
        results = await asyncio.wait_for(
            asyncio.gather(*(event_store.append(s) for s in contenders), return_exceptions=True), 30
        )
        winners = [s for s, r in zip(contenders, results, strict=True) if r is None]
        assert len(winners) == 1
        assert all(isinstance(r, EventVersionConflictError) for r in results if r is not None)
        loaded = await event_store.load(aggregate_id)
        assert [s.version for s in loaded] == [1, 2]
        assert loaded[1].id == winners[0].id

    async def test_concurrent_appends_of_one_request_have_exactly_one_winner(
        self, event_store: EventStore
    ) -> None:
        request_id = new_id()
        aggregate_ids = [new_aggregate_id() for _ in range(8)]
        results = await asyncio.wait_for(
            asyncio.gather(
                *(event_store.append(make_stream(a, 1, request_id=request_id)) for a in aggregate_ids),
                return_exceptions=True,
            ),
            30,
        )
        winners = [a for a, r in zip(aggregate_ids, results, strict=True) if r is None]
        assert len(winners) == 1
        for result in results:
            if result is not None:
                assert isinstance(result, DuplicateRequestIdError)
                assert result.aggregate_id == winners[0]

    async def test_concurrent_appends_to_different_aggregates_all_land(self, event_store: EventStore) -> None:
        aggregate_ids = [new_aggregate_id() for _ in range(20)]

        async def write(aggregate_id: AggregateId) -> None:
            for version in range(1, 4):
                await event_store.append(make_stream(aggregate_id, version))

        await asyncio.wait_for(asyncio.gather(*(write(a) for a in aggregate_ids)), 30)
        for aggregate_id in aggregate_ids:
            assert [s.version for s in await event_store.load(aggregate_id)] == [1, 2, 3]
