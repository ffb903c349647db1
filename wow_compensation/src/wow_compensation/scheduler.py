"""The compensation scheduler: prepares the due records, one instance at a time.

Every ``WOW_COMPENSATION__SCHEDULER__INTERVAL`` seconds, the instance that holds the
store's scheduler lease takes at most ``batch`` due records (RECOVERABLE or UNKNOWN,
below the retry cap, FAILED with the next retry reached or PREPARED and timed out) and
sends each a ``PrepareCompensation`` at the version it read. The ``Replayer`` of the
service that hosts the function replays the prepared record.

Exclusion: the lease keeps two instances from running at once, and the prepare itself
is decided by the record's aggregate (the event store's version check serialises it):
a scheduler's prepare (``due_only``) is refused unless the record is due at that
moment, so an instance whose lease ran out during a run, or that read a stale read
model, cannot prepare a record another instance prepared meanwhile
(``COMPENSATION_IN_PROGRESS``, or ``NOT_DUE`` once that compensation settled).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from wow_compensation.service import ActionRefused, CompensationCommands
from wow_compensation.settings import SchedulerSettings
from wow_compensation.store import CompensationStore, now_ms

log = logging.getLogger("wow.compensation.scheduler")

LEASE = "scheduler"


class CompensationScheduler:
    """Runs with the runtime's dispatchers (``start``/``stop``); see the module doc."""

    name = "CompensationScheduler"

    def __init__(
        self,
        store: CompensationStore,
        commands: CompensationCommands,
        settings: SchedulerSettings,
        *,
        holder: str | None = None,
    ) -> None:
        self.store = store
        self.commands = commands
        self.settings = settings
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.runs = 0
        self.prepared = 0

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self, timeout: float | None = None) -> bool:
        task, self._task = self._task, None
        if task is None:
            return True
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(Exception):
            await self.store.release_lease(LEASE, self.holder)
        return True

    def wake(self) -> None:
        """Run now rather than at the end of the interval (tests, the operations page)."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("compensation scheduler run failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.interval)
            self._wake.clear()

    async def run_once(self) -> int:
        """One run: prepare what is due if this instance holds the lease; the count prepared."""
        if not await self.store.acquire_lease(LEASE, self.holder, self.settings.lease):
            return 0
        self.runs += 1
        prepared = 0
        now = now_ms()
        for record in await self.store.due(now, self.settings.batch):
            if not record.state.is_due(now):
                continue  # the read model's index and the state disagree: the state decides
            try:
                await self.commands.prepare(record.id, due_only=True)
            except ActionRefused as refused:
                log.info("compensation %s not prepared: %s", record.id, refused)
                continue
            prepared += 1
        self.prepared += prepared
        if prepared:
            log.info("compensation scheduler prepared %d record(s)", prepared)
        return prepared
