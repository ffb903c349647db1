"""The service the operations page tests run: the bank account and the failing
``Ledger`` projection on the in-memory runtime, the scheduler off (an operator retries),
the page's records made by a failing ``opened`` function."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from tests.accounts import Account, Open
from tests.wow_compensation.domain import Ledger
from wow_compensation.model import ExecutionFailedStatus
from wow_compensation.recorder import CompensationFailureRecorder
from wow_compensation.store import ExecutionRecord, RecordQuery, query
from wow_core import WowApp
from wow_core.command import CommandWait
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually

TOKEN = "operator-token-0123456789"


@dataclass
class PageService:
    runtime: WowRuntime
    ledger: Ledger
    recorder: CompensationFailureRecorder

    async def open_failing(self, owner: str = "ann") -> ExecutionRecord:
        """Open an account while the ledger fails: the record of ``Ledger.opened``."""
        self.ledger.switches.on.add("opened")
        result = await self.runtime.gateway.send_and_wait(
            self.runtime.aggregates.command(Open(owner)), CommandWait.processed()
        )
        assert result.succeeded, result
        assert result.aggregate_id is not None
        found: list[ExecutionRecord] = []

        async def recorded() -> bool:
            page = await query(self.recorder.store, RecordQuery(aggregate_id=result.aggregate_id.id))  # type: ignore[union-attr]
            found[:] = page.items
            return len(found) == 1

        await eventually(recorded, 5, "the record of Ledger.opened")
        return found[0]

    async def record(self, record_id: str) -> ExecutionRecord:
        record = await self.recorder.store.get(record_id)
        assert record is not None
        return record

    async def settled(self, record_id: str, status: ExecutionFailedStatus) -> ExecutionRecord:
        async def reached() -> bool:
            return (await self.record(record_id)).state.status is status

        await eventually(reached, 5, f"{record_id} {status.value}")
        return await self.record(record_id)


@asynccontextmanager
async def page_service(settings: WowSettings | None = None) -> AsyncIterator[PageService]:
    """Run the service (the caller sets FAST and WOW_COMPENSATION__SCHEDULER__ENABLED=false)."""
    ledger = Ledger()
    runtime = WowApp("bank", aggregates=[Account], components=[ledger]).runtime(
        settings or WowSettings(service_name="bank")
    )
    assert runtime.event_dispatch is not None
    recorders = {id(d.handler.recorder): d.handler.recorder for d in runtime.event_dispatch.dispatchers}
    [recorder] = [r for r in recorders.values() if isinstance(r, CompensationFailureRecorder)]
    async with runtime:
        yield PageService(runtime, ledger, recorder)
