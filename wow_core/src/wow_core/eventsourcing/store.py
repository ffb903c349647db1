"""The event store and snapshot repository SPIs.

An :class:`EventStore` is the authoritative history of aggregates: an append of a
:class:`~wow_core.model.DomainEventStream` either becomes history whole or not at all.
Two rules are decided *inside* the append, atomically with the write, so that no
caller can race them:

- **optimistic version check**: a stream of version ``n`` is appended only when the
  aggregate is at version ``n - 1``; otherwise :class:`EventVersionConflictError`;
- **request-id de-duplication per aggregate type**: a stream whose request id was
  already appended for the same named aggregate (any aggregate id, any tenant) is not
  written; :class:`DuplicateRequestIdError` names the original aggregate and version.

A :class:`SnapshotRepository` keeps the latest sourced state of an aggregate as an
optimisation: losing a snapshot loses no history, the state is sourced again from
the events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from wow_core.model import AggregateId, DomainEventStream, MessageCodec, NamedAggregate, now_ms


class EventStoreError(RuntimeError):
    """Base of the errors an event store reports."""


class EventVersionConflictError(EventStoreError):
    """The aggregate was not at ``expected_version`` when the append was attempted."""

    def __init__(self, aggregate_id: AggregateId, expected_version: int, actual_version: int) -> None:
        super().__init__(
            f"version conflict on {aggregate_id}: appending version {expected_version + 1} "
            f"expects version {expected_version}, the store is at {actual_version}"
        )
        self.aggregate_id = aggregate_id
        self.expected_version = expected_version
        self.actual_version = actual_version


class DuplicateRequestIdError(EventStoreError):
    """The request id was already appended for this aggregate type; nothing was written.

    ``aggregate_id`` and ``version`` are those of the *original* append.
    """

    def __init__(self, request_id: str, aggregate_id: AggregateId, version: int) -> None:
        super().__init__(
            f"request {request_id!r} was already appended to {aggregate_id} at version {version}"
        )
        self.request_id = request_id
        self.aggregate_id = aggregate_id
        self.version = version


@dataclass(frozen=True, slots=True)
class AppendedRequest:
    """Where a request id was appended: the original aggregate and version."""

    request_id: str
    aggregate_id: AggregateId
    version: int


@runtime_checkable
class EventStore(Protocol):
    """The history of aggregates (see the module docstring for the append rules)."""

    async def append(self, stream: DomainEventStream) -> None:
        """Append ``stream`` at ``stream.version``.

        Raises :class:`EventVersionConflictError` when the aggregate is not at
        ``stream.version - 1`` and :class:`DuplicateRequestIdError` when its request id
        was already appended for the aggregate's named aggregate. Either way nothing
        is written.
        """
        ...

    async def load(
        self, aggregate_id: AggregateId, head_version: int = 1, tail_version: int | None = None
    ) -> list[DomainEventStream]:
        """The streams of versions ``head_version..tail_version`` (inclusive; ``None``: to
        the end), in version order. An unknown aggregate has none."""
        ...

    async def last_version(self, aggregate_id: AggregateId) -> int:
        """The aggregate's current version; 0 when it has no history."""
        ...

    async def find_request(self, named_aggregate: NamedAggregate, request_id: str) -> AppendedRequest | None:
        """Where ``request_id`` was appended for ``named_aggregate``, if it was."""
        ...

    async def close(self) -> None: ...


def check_range(head_version: int, tail_version: int | None) -> None:
    """Reject a load range no store can answer meaningfully."""
    if head_version < 1:
        raise ValueError(f"head_version must be >= 1, got {head_version}")
    if tail_version is not None and tail_version < head_version:
        raise ValueError(f"tail_version {tail_version} is before head_version {head_version}")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state of an aggregate sourced up to ``version``."""

    aggregate_id: AggregateId
    version: int
    state: Any
    deleted: bool = False
    snapshot_time: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ValueError("a snapshot's version starts at 1")


@runtime_checkable
class SnapshotRepository(Protocol):
    """The latest snapshot of each aggregate.

    ``save`` keeps a snapshot only when it is newer than the one held, so a late,
    older snapshot never replaces a newer one.
    """

    async def load(self, aggregate_id: AggregateId) -> Snapshot | None: ...

    async def save(self, snapshot: Snapshot) -> bool:
        """Keep ``snapshot`` if newer than the one held; return whether it was kept."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class CodecAware(Protocol):
    """An event store or snapshot repository that serializes: the runtime hands it the
    process's :class:`~wow_core.model.MessageCodec` (whose body types registry holds every
    event and state class of the registered aggregates) right after building it."""

    def use_codec(self, codec: MessageCodec) -> None: ...
