"""The read model of the records and the scheduler's lease: :class:`CompensationStore`.

The records themselves are the ``ExecutionFailed`` aggregates in the event store; the
store keeps the latest state of each (written by the ``ExecutionFailedProjector`` from
the state events, a save keeping only a newer version), so that the scheduler can pick
due records and an operator can list and filter them. It is a view: losing an entry
loses no history, the next state event of that record writes it again.

Two implementations: :class:`InMemoryCompensationStore` (one process) and
:class:`~wow_compensation.redis_store.RedisCompensationStore` (shared by every instance
of the service and by the ``wow compensation`` command line).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import TypeAdapter

from wow_compensation.model import ExecutionFailedState, ExecutionFailedStatus, Recoverable


class Queue(StrEnum):
    """Where a record stands, as the operations page groups them."""

    TO_RETRY = "to_retry"
    """Retryable and due: the scheduler takes it on its next run."""
    EXECUTING = "executing"
    """PREPARED and not timed out: a compensation is running."""
    NEXT_RETRY = "next_retry"
    """Retryable, its next retry not due yet."""
    NON_RETRYABLE = "non_retryable"
    """Retries exhausted: only a force prepare (or a new retry spec) moves it."""
    SUCCEEDED = "succeeded"
    UNRECOVERABLE = "unrecoverable"
    """Marked (or classified) UNRECOVERABLE: never retried by the scheduler."""


@dataclass(frozen=True)
class ExecutionRecord:
    """The latest state of one record and its aggregate version."""

    state: ExecutionFailedState
    version: int
    updated_at: int

    @property
    def id(self) -> str:
        return self.state.id

    def queue(self, now: int) -> Queue:
        state = self.state
        if state.status is ExecutionFailedStatus.SUCCEEDED:
            return Queue.SUCCEEDED
        if state.status is ExecutionFailedStatus.PREPARED and not state.timed_out(now):
            return Queue.EXECUTING
        if state.recoverable is Recoverable.UNRECOVERABLE:
            return Queue.UNRECOVERABLE
        if state.retry_state.retries >= state.retry_spec.max_retries:
            return Queue.NON_RETRYABLE
        return Queue.TO_RETRY if state.is_due(now) else Queue.NEXT_RETRY

    def due_at(self) -> int | None:
        """When the scheduler may take it (epoch ms), or None: never by itself."""
        state = self.state
        if state.recoverable is Recoverable.UNRECOVERABLE:
            return None
        if state.retry_state.retries >= state.retry_spec.max_retries:
            return None
        if state.status is ExecutionFailedStatus.FAILED:
            return state.retry_state.next_retry_at
        if state.status is ExecutionFailedStatus.PREPARED:
            return state.retry_state.timeout_at
        return None


@dataclass(frozen=True)
class RecordQuery:
    """Exact filters (all optional, all must match) and a page."""

    id: str | None = None
    event_id: str | None = None
    status: ExecutionFailedStatus | None = None
    recoverable: Recoverable | None = None
    queue: Queue | None = None
    aggregate: str | None = None
    """``context.aggregate`` of the failed event."""
    aggregate_id: str | None = None
    processor: str | None = None
    function: str | None = None
    """``context.processor.function`` or the bare function name."""
    offset: int = 0
    limit: int = 50

    def __post_init__(self) -> None:
        if self.offset < 0 or not 1 <= self.limit <= 1000:
            raise ValueError("offset must be >= 0 and limit in 1..1000")

    def matches(self, record: ExecutionRecord, now: int) -> bool:
        state = record.state
        event, function = state.event, state.function
        checks = (
            (self.id, state.id),
            (self.event_id, event.event_id if event else None),
            (self.status, state.status),
            (self.recoverable, state.recoverable),
            (self.aggregate, event.aggregate if event else None),
            (self.aggregate_id, event.aggregate_id if event else None),
            (self.processor, function.processor_name if function else None),
        )
        if any(wanted is not None and wanted != found for wanted, found in checks):
            return False
        if self.function is not None and (
            function is None or self.function not in (function.qualified_name, function.function_name)
        ):
            return False
        return self.queue is None or record.queue(now) is self.queue


@dataclass(frozen=True)
class Page:
    items: tuple[ExecutionRecord, ...]
    total: int
    counts: Mapping[Queue, int] = field(default_factory=dict)
    """Records per queue over the whole store (not only the filtered ones)."""


@runtime_checkable
class CompensationStore(Protocol):
    async def save(self, record: ExecutionRecord) -> bool:
        """Keep ``record`` unless a record of the same or a later version is held."""
        ...

    async def get(self, record_id: str) -> ExecutionRecord | None: ...

    async def by_event_id(self, event_id: str) -> list[ExecutionRecord]:
        """Every record of the event (one per function that failed on it)."""
        ...

    async def records(self) -> list[ExecutionRecord]:
        """Every record (the lists filter these)."""
        ...

    async def due(self, now: int, limit: int) -> list[ExecutionRecord]:
        """At most ``limit`` records the scheduler may prepare at ``now``, the longest due first."""
        ...

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        """Hold the lease ``name`` for ``ttl`` seconds unless another holder has it;
        ``holder`` renews its own."""
        ...

    async def release_lease(self, name: str, holder: str) -> None: ...

    async def close(self) -> None: ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def query(store: CompensationStore, q: RecordQuery, now: int | None = None) -> Page:
    """The records ``q`` selects, newest failure first, with the counts per queue."""
    at = now_ms() if now is None else now
    if q.id is not None:
        found = await store.get(q.id)
        candidates = [found] if found is not None else []
        everything = await store.records()
    elif q.event_id is not None:
        candidates = await store.by_event_id(q.event_id)
        everything = await store.records()
    else:
        candidates = everything = await store.records()
    counts = count_queues(everything, at)
    selected = sorted((r for r in candidates if q.matches(r, at)), key=lambda r: (-r.state.execute_at, r.id))
    return Page(tuple(selected[q.offset : q.offset + q.limit]), len(selected), counts)


def count_queues(records: Iterable[ExecutionRecord], now: int) -> dict[Queue, int]:
    counts = dict.fromkeys(Queue, 0)
    for record in records:
        counts[record.queue(now)] += 1
    return counts


_STATE = TypeAdapter(ExecutionFailedState)


def encode_state(state: ExecutionFailedState) -> bytes:
    return _STATE.dump_json(state)


def decode_state(data: bytes | str) -> ExecutionFailedState:
    return _STATE.validate_json(data)


class InMemoryCompensationStore:
    """The read model and lease in this process (the in-memory runtime)."""

    def __init__(self) -> None:
        self._records: dict[str, ExecutionRecord] = {}
        self._leases: dict[str, tuple[str, float]] = {}

    async def save(self, record: ExecutionRecord) -> bool:
        held = self._records.get(record.id)
        if held is not None and held.version >= record.version:
            return False
        self._records[record.id] = record
        return True

    async def get(self, record_id: str) -> ExecutionRecord | None:
        return self._records.get(record_id)

    async def by_event_id(self, event_id: str) -> list[ExecutionRecord]:
        return [r for r in self._records.values() if r.state.event and r.state.event.event_id == event_id]

    async def records(self) -> list[ExecutionRecord]:
        return list(self._records.values())

    async def due(self, now: int, limit: int) -> list[ExecutionRecord]:
        due = [(at, r.id, r) for r in self._records.values() if (at := r.due_at()) is not None and at <= now]
        return [r for _, _, r in sorted(due, key=lambda item: (item[0], item[1]))[:limit]]

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        now = time.monotonic()
        held = self._leases.get(name)
        if held is not None and held[0] != holder and held[1] > now:
            return False
        self._leases[name] = (holder, now + ttl)
        return True

    async def release_lease(self, name: str, holder: str) -> None:
        held = self._leases.get(name)
        if held is not None and held[0] == holder:
            del self._leases[name]

    async def close(self) -> None:
        return None
