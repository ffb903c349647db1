"""The reacting service of the cross-process wait tests: ``wow run tests.wait_apps:reactor``.

It hosts no aggregate: its projection and its saga handle the ``Recorded`` events of the
journal ledger (:mod:`tests.wow_kafka.journal_app`, run by other processes), so a caller
waiting for ``PROJECTED`` or ``SAGA_HANDLED`` is signalled by this process, which is
neither the caller nor the one that processed the command.
"""

from __future__ import annotations

from tests.wow_kafka.journal_app import CONTEXT, Record, Recorded
from wow_core.event import on_event, projection, stateless_saga
from wow_core.runtime.app import WowApp

LEDGER = f"{CONTEXT}.ledger"


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
    def recorded(self, event: Recorded) -> None:
        return None  # handled: nothing to send


reactor = WowApp("reactor", body_types=[Record, Recorded], components=[LedgerTotals, LedgerSaga])
