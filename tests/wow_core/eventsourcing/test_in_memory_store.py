from __future__ import annotations

import pytest

from wow_core.eventsourcing import InMemoryEventStore, InMemorySnapshotRepository, Snapshot
from wow_core.testing.event_store import EventStoreConformance, new_aggregate_id


class TestInMemoryEventStore(EventStoreConformance):
    @pytest.fixture
    def event_store(self) -> InMemoryEventStore:
        return InMemoryEventStore()


async def test_snapshot_repository_keeps_only_newer_snapshots() -> None:
    repository = InMemorySnapshotRepository()
    aggregate_id = new_aggregate_id()
    assert await repository.load(aggregate_id) is None
    assert await repository.save(Snapshot(aggregate_id, 3, {"v": 3}))
    assert not await repository.save(Snapshot(aggregate_id, 2, {"v": 2}))
    assert not await repository.save(Snapshot(aggregate_id, 3, {"v": "again"}))
    held = await repository.load(aggregate_id)
    assert held is not None
    assert held.state == {"v": 3}
    assert await repository.save(Snapshot(aggregate_id, 4, {"v": 4}))
    assert len(repository) == 1


def test_a_snapshot_has_a_version() -> None:
    with pytest.raises(ValueError, match="version"):
        Snapshot(new_aggregate_id(), 0, None)
