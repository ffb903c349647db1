"""The reacting service of the cross-process wait tests: ``wow run tests.wait_apps:reactor``.

It hosts no aggregate: its projection and its saga handle the ``Recorded`` events of the
journal ledger (:mod:`tests.wow_kafka.journal_app`, run by other processes), so a caller
waiting for ``PROJECTED`` or ``SAGA_HANDLED`` is signalled by this process, which is
neither the caller nor the one that processed the command.

For a ledger key starting ``c-`` the saga sends a ``record`` command of its own, to the
key ``<key>-echo``, which the journal instances process and this projection projects:
the hops of a chain wait (``CommandWait.chain``), each in another process.
"""

from __future__ import annotations

from tests.wow_kafka.journal_app import AGGREGATE, CONTEXT, Record, Recorded
from wow_core.event import on_event, projection, stateless_saga
from wow_core.model import AggregateId, CommandMessage, DomainEvent, NamedAggregate
from wow_core.runtime.app import WowApp

LEDGER = f"{CONTEXT}.ledger"
ECHO = "-echo"


@projection(context=CONTEXT, aggregates=[LEDGER])
class LedgerTotals:
    def __init__(self) -> None:
        self.seen = 0

    @on_event
    def recorded(self, event: Recorded) -> None:
        self.seen += 1


@stateless_saga(context=CONTEXT, aggregates=[LEDGER])
class LedgerSaga:
    @on_event
    def recorded(self, event: DomainEvent[Recorded]) -> CommandMessage[Record] | None:
        key = event.aggregate_id.id
        if not key.startswith("c-") or key.endswith(ECHO):
            return None  # handled: nothing to send
        echo = key + ECHO
        return CommandMessage(
            AggregateId(NamedAggregate(CONTEXT, AGGREGATE), echo),
            Record(echo, 0),
            "record",
            allow_create=True,
        )


reactor = WowApp("reactor", body_types=[Record, Recorded], components=[LedgerTotals, LedgerSaga])
