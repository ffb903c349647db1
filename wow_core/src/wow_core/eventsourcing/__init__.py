"""Event sourcing: the EventStore and SnapshotRepository SPIs and their in-memory implementations."""

from wow_core.eventsourcing.in_memory import InMemoryEventStore, InMemorySnapshotRepository
from wow_core.eventsourcing.store import (
    AppendedRequest,
    CodecAware,
    DuplicateRequestIdError,
    EventStore,
    EventStoreError,
    EventVersionConflictError,
    Snapshot,
    SnapshotRepository,
    check_range,
)

__all__ = [
    "AppendedRequest",
    "CodecAware",
    "DuplicateRequestIdError",
    "EventStore",
    "EventStoreError",
    "EventVersionConflictError",
    "InMemoryEventStore",
    "InMemorySnapshotRepository",
    "Snapshot",
    "SnapshotRepository",
    "check_range",
]
