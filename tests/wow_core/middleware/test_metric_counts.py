"""The core's metrics count exactly as before they moved onto the middleware layer.

One scenario on the embedded default (local-first buses over the in-memory transport)
with ``WOW_METRICS=in_memory``: a creation, a rejection, a duplicate request, a version
conflict met once, a Void command. Every counter series is compared with what the same
scenario counts on the commit before the move (b10261e: the figures below were taken
there, and this test passes there unchanged).

A second scenario pins the local-first series (sends by route, filtered copies, copies
sent, hand-off timeouts, the backlog gauge), the event-processing series (outcomes,
rejected messages) and decode failures, taken on 3a06fa9, before they moved from
constructor parameters of local-first, the dispatch pipeline and the decode-failure
handler onto the middleware layer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dependency_injector import providers

from tests.accounts import Account, Deposit, Deposited, Open, Withdraw
from tests.wow_core.middleware.copies import keep_every_copy
from wow_core.event import event_processor, on_event
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.eventsourcing.store import EventVersionConflictError
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import undecorated
from wow_core.model import DomainEventStream
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually
from wow_core.transport import TransportMessage


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
    keep_every_copy(runtime)  # the copies go out and come back, as over a broker
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


# -- local-first and event-processing series ---------------------------------------------


@event_processor(context="bank", aggregates=["bank.account"])
class Auditor:
    """Fails on a deposit of 13; holds a deposit of 7 (once) until ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = False
        self.seen: list[int] = []

    @on_event
    async def deposited(self, event: Deposited) -> None:
        self.seen.append(event.amount)
        if event.amount == 13:
            raise ValueError("the audit log is gone")
        if event.amount == 7 and not self.held:
            self.held = True
            await self.release.wait()


def gauges(metrics: InMemoryMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    found: dict[str, dict[Any, float]] = {}
    for name in metrics.names():
        series: Any = metrics.series(name)["gauges"]
        if series:
            found[name] = dict(series)
    return found


AUDITOR = {"component": "event_processor", "context": "bank", "aggregate": "account", "processor": "Auditor"}
LF_ACCOUNT = {"aggregate": "bank.account"}

EXPECTED_LOCAL_FIRST_AND_PROCESSING = {
    "wow.bus.received": {
        tags(kind="command", aggregate="bank.account", group="bank.command"): 6.0,
        tags(kind="event", aggregate="bank.account", group="bank.bank.DomainEventDispatcher"): 6.0,
        tags(kind="state", aggregate="bank.account", group="bank.bank.SnapshotDispatcher"): 6.0,
    },
    "wow.bus.sent": {
        tags(kind="command", source="gateway", **SENT): 6.0,
        tags(kind="event", source="", **SENT): 6.0,
        tags(kind="state", source="", **SENT): 6.0,
    },
    "wow.local_first.copies.sent": {
        tags(bus="command", local_first="true", **LF_ACCOUNT): 6.0,
        tags(bus="event", local_first="true", **LF_ACCOUNT): 5.0,
        tags(bus="event", local_first="false", **LF_ACCOUNT): 1.0,
        tags(bus="state", local_first="true", **LF_ACCOUNT): 6.0,
    },
    "wow.local_first.filtered": {tags(bus="command"): 6.0, tags(bus="event"): 5.0, tags(bus="state"): 6.0},
    "wow.local_first.hand_off.timeouts": {tags(bus="event", **LF_ACCOUNT): 1.0},
    "wow.local_first.sends": {
        tags(bus="command", outcome="handed_off"): 6.0,
        tags(bus="event", outcome="handed_off"): 6.0,
        tags(bus="state", outcome="handed_off"): 6.0,
    },
    "wow.processing.outcomes": {
        tags(message="Opened", processor="SnapshotDispatcher", **SNAPSHOT): 2.0,
        tags(message="Deposited", processor="SnapshotDispatcher", **SNAPSHOT): 4.0,
        tags(message="Deposited", outcome="HANDLED", **AUDITOR): 3.0,
        tags(message="Deposited", outcome="FAILURE_UNRECORDED", **AUDITOR): 1.0,
    },
    "wow.processing.rejected": {tags(component="event_processor", reason="header"): 1.0},
    "wow.transport.decode_failures": {tags(kind="not_json", transport="in_memory"): 1.0},
}
EXPECTED_GAUGES = {
    "wow.local_first.backlog": {
        tags(bus="command", **LF_ACCOUNT): 0.0,
        tags(bus="event", **LF_ACCOUNT): 0.0,
        tags(bus="state", **LF_ACCOUNT): 0.0,
    }
}


async def test_local_first_and_processing_series_count_as_before_the_move() -> None:
    """An event processor that fails once, holds one admission past the hand-off timeout,
    a command whose events carry a half-named compensation header, and one record that is
    not a message: every counter and gauge series, pinned."""
    settings = WowSettings.model_validate(
        {"metrics": "in_memory", "event": {"bus": {"local_first": {"hand_off_timeout": 1.0}}}}
    )
    container = create_container(settings)
    auditor = Auditor()
    runtime = build_runtime(WowApp("bank", aggregates=[Account], components=[auditor]), container=container)
    keep_every_copy(runtime)  # the copies go out and come back, as over a broker
    metrics = container.metrics()
    assert isinstance(metrics, InMemoryMetrics)
    gateway = runtime.gateway
    command = runtime.aggregates.command
    async with runtime:
        opened = await gateway.send_and_wait(command(Open("ada", 10)), timeout=5)
        assert opened.aggregate_id is not None
        ada = opened.aggregate_id.id
        await gateway.send_and_wait(command(Deposit(1), ada), timeout=5)
        await gateway.send_and_wait(command(Deposit(13), ada), timeout=5)
        half_named = {"compensation.function": "deposited"}
        await gateway.send_and_wait(command(Deposit(2), ada, header=half_named), timeout=5)
        # A second account holds one admission past the hand-off timeout.
        other = await gateway.send_and_wait(command(Open("bob", 0)), timeout=5)
        assert other.aggregate_id is not None
        await gateway.send_and_wait(command(Deposit(7), other.aggregate_id.id), timeout=5)

        async def timed_out() -> bool:
            return metrics.counter_value("wow.local_first.hand_off.timeouts", bus="event") == 1

        await eventually(timed_out, timeout=10, what="the held admission to time out")
        auditor.release.set()

        async def seen_twice() -> bool:  # the local exchange, then its unmarked copy
            return auditor.seen.count(7) == 2

        await eventually(seen_twice, timeout=10, what="the unmarked copy of the held deposit")
        # A record that is not a message, on the command topic.
        topic = undecorated(runtime.command_bus).distributed_bus.topic(opened.aggregate_id.named_aggregate)
        assert runtime.transport is not None
        await runtime.transport.send(TransportMessage(topic=topic, key=ada, payload=b"not json", timestamp=0))

        async def counted() -> bool:
            return metrics.counter_value("wow.transport.decode_failures") == 1 and (
                metrics.counter_value("wow.bus.received", kind="state") == 6
            )

        await eventually(counted, timeout=10, what="the decode failure and every state copy")
    assert counters(metrics) == EXPECTED_LOCAL_FIRST_AND_PROCESSING
    assert gauges(metrics) == EXPECTED_GAUGES
