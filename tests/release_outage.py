"""The end-to-end release scenario every transport's release tests run: a runtime whose
event store fails the first two appends of a command (as in a short outage); the command
kernel releases its record each time, and the transport must deliver it again within
seconds, not only after its backend's own redelivery (an ack wait, a lease, a rebalance).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest

from wow_core.command import CommandWait
from wow_core.modeling import aggregate, on_command, on_sourcing
from wow_core.runtime.runtime import WowRuntime
from wow_core.testing import eventually


@dataclass(frozen=True)
class Tally:
    count: int = 0


@dataclass(frozen=True)
class Bump:
    pass


@dataclass(frozen=True)
class Bumped:
    pass


@aggregate("release_outage", "tally", state=Tally)
class TallyAggregate:
    @on_command(create=True)
    def bump(self, state: Tally, body: Bump) -> Bumped:
        return Bumped()

    @on_sourcing
    def bumped(self, state: Tally, event: Bumped) -> Tally:
        return Tally(state.count + 1)


async def processed_after_two_failed_appends(
    service: WowRuntime, monkeypatch: pytest.MonkeyPatch, store: type[Any], within: float, why: str
) -> None:
    """Send one command to ``service`` whose store (class ``store``) fails its first two
    appends; assert it is appended once, ``within`` seconds of the send (``why`` says
    what a slower redelivery would mean)."""
    original = store.append
    failures = [ConnectionError("the event store is down"), ConnectionError("it is still down")]

    async def append(self: Any, stream: Any) -> None:
        if failures:
            raise failures.pop(0)
        await original(self, stream)

    monkeypatch.setattr(store, "append", append)
    command = service.aggregates.command(Bump(), "t-1")
    began = time.monotonic()
    first = await asyncio.wait_for(service.gateway.send_and_wait(command, CommandWait.processed()), within)
    assert first.error_code == "PROCESSING_ERROR", first

    async def processed() -> bool:
        return await service.event_store.last_version(command.aggregate_id) == 1

    await eventually(processed, within, why)
    assert time.monotonic() - began < within, why
    assert not failures, "delivered twice more: once per failure, then processed"
    assert await service.event_store.last_version(command.aggregate_id) == 1, "appended once"
