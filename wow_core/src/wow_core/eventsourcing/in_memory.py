"""In-memory event store and snapshot repository: one process, no durability.

Suited to tests, the embedded default and ``wow demo``. Both keep everything they are
given until the process ends; nothing is evicted. Messages are stored as they are
given (streams are immutable values; their headers are marked read-only), and nothing
else is allocated per append: the request-id index points at the stored stream itself,
so a long history costs the garbage collector as few objects as it can.
"""

from __future__ import annotations

from wow_core.eventsourcing.store import (
    AppendedRequest,
    DuplicateRequestIdError,
    EventVersionConflictError,
    Snapshot,
    check_range,
)
from wow_core.model import AggregateId, DomainEventStream, NamedAggregate


class InMemoryEventStore:
    """An :class:`~wow_core.eventsourcing.EventStore` held in dictionaries.

    Every append runs without an ``await`` between its checks and its write, so on one
    event loop it is atomic.
    """

    __slots__ = ("_requests", "_streams")

    def __init__(self) -> None:
        self._streams: dict[AggregateId, list[DomainEventStream]] = {}
        # Per named aggregate: request id -> the stream appended for it.
        self._requests: dict[NamedAggregate, dict[str, DomainEventStream]] = {}

    async def append(self, stream: DomainEventStream) -> None:
        aggregate_id = stream.aggregate_id
        streams = self._streams.get(aggregate_id)
        current = len(streams) if streams else 0
        requests = self._requests.get(aggregate_id.named_aggregate)
        if requests is None:
            requests = self._requests[aggregate_id.named_aggregate] = {}
        original = requests.get(stream.request_id)
        if original is not None:
            raise DuplicateRequestIdError(stream.request_id, original.aggregate_id, original.version)
        if stream.version != current + 1:
            raise EventVersionConflictError(aggregate_id, stream.version - 1, current)
        stream.header.with_read_only()
        if streams is None:
            self._streams[aggregate_id] = [stream]
        else:
            streams.append(stream)
        requests[stream.request_id] = stream

    async def load(
        self, aggregate_id: AggregateId, head_version: int = 1, tail_version: int | None = None
    ) -> list[DomainEventStream]:
        check_range(head_version, tail_version)
        streams = self._streams.get(aggregate_id)
        if not streams:
            return []
        # Versions are dense from 1, so version v sits at index v - 1.
        end = len(streams) if tail_version is None else min(tail_version, len(streams))
        return streams[head_version - 1 : end]

    async def last_version(self, aggregate_id: AggregateId) -> int:
        streams = self._streams.get(aggregate_id)
        return len(streams) if streams else 0

    async def find_request(self, named_aggregate: NamedAggregate, request_id: str) -> AppendedRequest | None:
        requests = self._requests.get(named_aggregate)
        original = None if requests is None else requests.get(request_id)
        if original is None:
            return None
        return AppendedRequest(request_id, original.aggregate_id, original.version)

    async def close(self) -> None:
        pass

    def __len__(self) -> int:
        """Streams held, over every aggregate."""
        return sum(len(streams) for streams in self._streams.values())


class InMemorySnapshotRepository:
    """A :class:`~wow_core.eventsourcing.SnapshotRepository` held in a dictionary."""

    __slots__ = ("_snapshots",)

    def __init__(self) -> None:
        self._snapshots: dict[AggregateId, Snapshot] = {}

    async def load(self, aggregate_id: AggregateId) -> Snapshot | None:
        return self._snapshots.get(aggregate_id)

    async def save(self, snapshot: Snapshot) -> bool:
        held = self._snapshots.get(snapshot.aggregate_id)
        if held is not None and held.version >= snapshot.version:
            return False
        self._snapshots[snapshot.aggregate_id] = snapshot
        return True

    async def close(self) -> None:
        pass

    def __len__(self) -> int:
        return len(self._snapshots)


__all__ = ["InMemoryEventStore", "InMemorySnapshotRepository"]
