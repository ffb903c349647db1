"""The failure ledger of the cluster intake: aggregates parked after a technical failure.

An aggregate is parked when a command of it failed for a technical reason (a contended or
unknown outcome, an executor that is closing, a store that is down, a receipt the broker
did not acknowledge) more often than the intake's retries allow. The entry names the
subscription (``name``), the aggregate and the position of the failed command on the
command topic (``from_position``, as ``me.ahoo.wow.spi.ledger.ParkedAggregate.fromPosition``):
that command and the aggregate's later ones wait, unacknowledged (the partition's
checkpoint stays below ``from_position``), until an operator retries or skips it
(:meth:`~wow_core.cluster.CommandIntake.retry`, :meth:`~wow_core.cluster.CommandIntake.skip`).
Other aggregates keep flowing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from wow_core.model import AggregateId


@dataclass(frozen=True, slots=True)
class ParkedAggregate:
    """One parked aggregate of the subscription ``name``.

    ``from_position`` is the ``partition:offset`` of the command that failed, the first
    one to run again on a retry; ``waiting`` counts the commands held behind it when it
    was parked (more may arrive). ``error`` is the last failure, ``attempts`` how often
    the command ran.
    """

    name: str
    aggregate_id: AggregateId
    from_position: str
    command_id: str
    error: str
    attempts: int
    parked_at: int
    waiting: int = 0


class ParkedNotFoundError(LookupError):
    """No aggregate of that id is parked under that subscription."""


class FailureLedger:
    """The parked aggregates of a node, by subscription name and aggregate id."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[str, AggregateId], ParkedAggregate] = {}

    def park(self, entry: ParkedAggregate) -> None:
        self._entries[(entry.name, entry.aggregate_id)] = entry

    def get(self, name: str, aggregate_id: AggregateId) -> ParkedAggregate | None:
        return self._entries.get((name, aggregate_id))

    def remove(self, name: str, aggregate_id: AggregateId) -> ParkedAggregate:
        """Take the entry out; :class:`ParkedNotFoundError` if there is none."""
        entry = self._entries.pop((name, aggregate_id), None)
        if entry is None:
            raise ParkedNotFoundError(f"{aggregate_id} is not parked under {name!r}")
        return entry

    def discard(self, name: str, aggregate_id: AggregateId) -> ParkedAggregate | None:
        """Take the entry out if there is one (its partition moved to another owner)."""
        return self._entries.pop((name, aggregate_id), None)

    def entries(self, name: str | None = None) -> list[ParkedAggregate]:
        """The parked aggregates (of subscription ``name``), oldest first."""
        found = [e for e in self._entries.values() if name is None or e.name == name]
        return sorted(found, key=lambda e: (e.parked_at, e.from_position))

    def __iter__(self) -> Iterator[ParkedAggregate]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self._entries)
