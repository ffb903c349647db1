"""An event processor of the bank: an audit trail of large movements.

``send_and_wait(..., wait=CommandWait.event_handled())`` returns once an event processor
handled the command's events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wow_core import DomainEvent, event_processor, on_event

from .domain import MoneyDeposited, MoneyWithdrawn

LARGE = 10_000


@event_processor
@dataclass
class LargeMovementAudit:
    """Remembers every deposit or withdrawal of at least ``LARGE`` cents."""

    entries: list[tuple[str, str, int]] = field(default_factory=list)

    @on_event
    def moved(self, event: DomainEvent[MoneyDeposited | MoneyWithdrawn]) -> None:
        if event.body.amount >= LARGE:
            self.entries.append((event.aggregate_id.id, event.name, event.body.amount))
