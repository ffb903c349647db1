"""The core's metrics count exactly as before they moved onto the middleware layer.

One scenario on the embedded default (local-first buses over the in-memory transport)
with ``WOW_METRICS=in_memory``: a creation, a rejection, a duplicate request, a version
conflict met once, a Void command. Every counter series is compared with what the same
scenario counts on the commit before the move (b10261e: the figures below were taken
there, and this test passes there unchanged).
"""

from __future__ import annotations

from typing import Any

from dependency_injector import providers

from tests.accounts import Account, Deposit, Open, Withdraw
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.eventsourcing.store import EventVersionConflictError
from wow_core.metrics import InMemoryMetrics
from wow_core.model import DomainEventStream
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually


class ConflictOnce(InMemoryEventStore):
    """Refuses the first append of a stream at ``version`` with a version conflict."""

    def __init__(self, version: int) -> None:
        super().__init__()
        self.conflict_at = version

    async def append(self, stream: DomainEventStream) -> None:
        if stream.version == self.conflict_at:
            self.conflict_at = 0
            raise EventVersionConflictError(stream.aggregate_id, stream.version - 1, stream.version)
        await super().append(stream)


def counters(metrics: InMemoryMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    found: dict[str, dict[Any, float]] = {}
    for name in metrics.names():
        series: Any = metrics.series(name)["counters"]
        if series:
            found[name] = dict(series)
    return found


def tags(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs.items()))


SENT = {"aggregate": "bank.account", "transport": "in_memory", "outcome": "ok"}
SNAPSHOT = {"component": "snapshot", "context": "bank", "aggregate": "account", "outcome": "HANDLED"}

EXPECTED = {
    "wow.bus.sent": {
        tags(kind="command", source="gateway", **SENT): 7.0,
        tags(kind="event", source="", **SENT): 4.0,
        tags(kind="state", source="", **SENT): 4.0,
    },
    "wow.bus.received": {
        tags(kind="command", aggregate="bank.account", group="bank.command"): 7.0,
        tags(kind="state", aggregate="bank.account", group="bank.bank.SnapshotDispatcher"): 4.0,
    },
    "wow.command.duplicates": {(): 1.0},
    "wow.command.rejections": {tags(code="INSUFFICIENT_FUNDS"): 1.0},
    "wow.command.version_conflicts": {(): 1.0},
    "wow.command.void_dropped": {(): 1.0},
    "wow.local_first.copies.sent": {
        tags(bus="command", aggregate="bank.account", local_first="true"): 6.0,
        tags(bus="command", aggregate="bank.account", local_first="false"): 1.0,
        tags(bus="event", aggregate="bank.account", local_first="false"): 4.0,
        tags(bus="state", aggregate="bank.account", local_first="true"): 4.0,
    },
    "wow.local_first.filtered": {tags(bus="command"): 6.0, tags(bus="state"): 4.0},
    "wow.local_first.sends": {
        tags(bus="command", outcome="handed_off"): 6.0,
        tags(bus="command", outcome="skipped"): 1.0,
        tags(bus="event", outcome="refused"): 4.0,
        tags(bus="state", outcome="handed_off"): 4.0,
    },
    "wow.processing.outcomes": {
        tags(message="Opened", processor="SnapshotDispatcher", **SNAPSHOT): 1.0,
        tags(message="Deposited", processor="SnapshotDispatcher", **SNAPSHOT): 3.0,
    },
}


async def test_every_core_counter_counts_as_before_the_move() -> None:
    container = create_container(WowSettings(metrics="in_memory"))
    container.event_store.override(providers.Object(ConflictOnce(version=3)))
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    metrics = container.metrics()
    assert isinstance(metrics, InMemoryMetrics)
    gateway = runtime.gateway
    async with runtime:
        opened = await gateway.send_and_wait(runtime.aggregates.command(Open("ada", 10)), timeout=5)
        assert opened.aggregate_id is not None
        account = opened.aggregate_id.id
        rejected = await gateway.send_and_wait(runtime.aggregates.command(Withdraw(99), account), timeout=5)
        assert rejected.error_code == "INSUFFICIENT_FUNDS"
        first = runtime.aggregates.command(Deposit(1), account, request_id="once")
        again = runtime.aggregates.command(Deposit(1), account, request_id="once")
        assert not (await gateway.send_and_wait(first, timeout=5)).duplicate
        assert (await gateway.send_and_wait(again, timeout=5)).duplicate
        conflicted = await gateway.send_and_wait(runtime.aggregates.command(Deposit(2), account), timeout=5)
        assert conflicted.aggregate_version == 3, "decided again after the conflict"
        await gateway.send(runtime.aggregates.command(Deposit(5), account, is_void=True))
        last = await gateway.send_and_wait(runtime.aggregates.command(Deposit(1), account), timeout=5)
        assert last.aggregate_version == 4, "the Void command before it was dropped"

        async def every_copy_received() -> bool:
            # Every copy is sent after its admission, so it arrives after the call returned.
            received = metrics.counter_value
            return received("wow.bus.received", kind="command") == 7 and (
                received("wow.bus.received", kind="state") == 4
            )

        await eventually(every_copy_received, timeout=10, what="every command and state copy to arrive")
    assert counters(metrics) == EXPECTED
