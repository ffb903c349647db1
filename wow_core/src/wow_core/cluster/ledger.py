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
from typing import Any

from wow_core.model import AggregateId, NamedAggregate


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

    def discard_at(self, name: str, aggregate_id: AggregateId, from_position: str) -> ParkedAggregate | None:
        """Take the entry out if it is parked at ``from_position`` (a settle of that park)."""
        entry = self._entries.get((name, aggregate_id))
        if entry is None or entry.from_position != from_position:
            return None
        return self._entries.pop((name, aggregate_id))

    def entries(self, name: str | None = None) -> list[ParkedAggregate]:
        """The parked aggregates (of subscription ``name``), oldest first."""
        found = [e for e in self._entries.values() if name is None or e.name == name]
        return sorted(found, key=lambda e: (e.parked_at, e.from_position))

    def __iter__(self) -> Iterator[ParkedAggregate]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self._entries)


def parked_to_json(entry: ParkedAggregate) -> dict[str, Any]:
    """A parked aggregate as a JSON-ready dict (the ledger commands' receipts and the
    ledger topic carry it); :func:`parked_from_json` reads it back."""
    aggregate_id = entry.aggregate_id
    return {
        "name": entry.name,
        "aggregate": f"{aggregate_id.named_aggregate}@{aggregate_id.id}",
        "tenant": aggregate_id.tenant_id,
        "from_position": entry.from_position,
        "command_id": entry.command_id,
        "error": entry.error,
        "attempts": entry.attempts,
        "parked_at": entry.parked_at,
        "waiting": entry.waiting,
    }


def aggregate_from_json(data: dict[str, Any]) -> AggregateId:
    """The ``aggregate`` (``context.aggregate@id``) and ``tenant`` of a ledger dict."""
    named, _, aggregate_id = str(data["aggregate"]).partition("@")
    return AggregateId(NamedAggregate.parse(named), aggregate_id, str(data["tenant"]))


def parked_from_json(data: dict[str, Any]) -> ParkedAggregate:
    """The inverse of :func:`parked_to_json`; ``KeyError``/``ValueError`` if malformed."""
    return ParkedAggregate(
        name=str(data["name"]),
        aggregate_id=aggregate_from_json(data),
        from_position=str(data["from_position"]),
        command_id=str(data["command_id"]),
        error=str(data["error"]),
        attempts=int(data["attempts"]),
        parked_at=int(data["parked_at"]),
        waiting=int(data.get("waiting", 0)),
    )
