"""The cluster intake across a Kafka rebalance: two members of one intake group.

When a second member joins, the group revokes the first member's partitions. The old
owner drops the commands of those partitions it had queued and not started, finishes the
ones in flight, and only then lets the revocation complete, so the new owner never runs a
partition's commands while the old one still does (the receiver's revocation listener,
the optional SPI method ``set_revocation_listener``).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.accounts import ACCOUNT, Account, Deposit, Open
from tests.wow_kafka.conftest import test_settings
from wow_core.cluster import CommandIntake, CommandWire, InFlightLimit
from wow_core.command import WaitCoordinator
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage
from wow_core.modeling import AggregateRegistry, CommandKernel, CommandOutcome
from wow_core.transport import TransportMessage
from wow_kafka import KafkaSettings, KafkaTransport, KafkaTransportReceiver

pytestmark = pytest.mark.kafka

ACCOUNTS = 12
DECIDE = 0.1  # seconds each decision takes: the old owner has a queue when the new one joins
WAIT = 60.0


@dataclass
class Run:
    node: str
    aggregate: str
    command_id: str
    started: float
    ended: float = 0.0
    during_revocation: bool = False
    """Started after the node's revocation began and before its next assignment."""


@dataclass
class Journal:
    runs: list[Run] = field(default_factory=list)


class TimedKernel(CommandKernel):
    """Records when each command is decided on which node; each decision takes DECIDE."""

    node = ""
    journal: Journal
    receiver: KafkaTransportReceiver | None = None

    async def process(self, command: CommandMessage[Any]) -> CommandOutcome:
        loop = asyncio.get_running_loop()
        receiver = self.receiver
        revoking = receiver is not None and receiver.revocation_started.is_set() and receiver.assignments == 1
        run = Run(self.node, command.aggregate_id.id, command.id, loop.time(), during_revocation=revoking)
        self.journal.runs.append(run)
        await asyncio.sleep(DECIDE)  # a decision that takes time (a slow store)
        try:
            return await super().process(command)
        finally:
            run.ended = loop.time()


class Member:
    def __init__(
        self, name: str, settings: KafkaSettings, store: InMemoryEventStore, journal: Journal
    ) -> None:
        self.transport = KafkaTransport(settings)
        aggregates = AggregateRegistry([Account])
        self.bodies = aggregates.register_body_types(BodyTypeRegistry())
        self.kernel = TimedKernel(aggregates, store)
        self.kernel.node = name
        self.kernel.journal = journal
        self.intake = CommandIntake(
            "bank",
            self.transport,
            self.kernel,
            WaitCoordinator(),
            self.bodies,
            limit=InFlightLimit(2, 1),  # one command at a time: the rest wait in lanes
            prefix=settings.topic_prefix or "wow.",
        )

    async def start(self) -> KafkaTransportReceiver:
        await self.intake.prepare()
        receiver = self.intake._receiver
        assert isinstance(receiver, KafkaTransportReceiver)
        self.kernel.receiver = receiver
        await self.intake.start()
        return receiver

    async def close(self) -> None:
        await self.intake.stop(5)
        await self.transport.close()


async def test_a_revoked_partitions_queued_commands_are_dropped_and_never_run_by_two_owners_at_once(
    kafka_bootstrap: str,
) -> None:
    settings = test_settings(kafka_bootstrap, partitions=2, revocation_drain_timeout_ms=1500)
    store = InMemoryEventStore()
    journal = Journal()
    first = Member("A", settings, store, journal)
    second = Member("B", settings, store, journal)
    try:
        first_rx = await first.start()
        assert len(first_rx.assigned) == 2
        ids = [AggregateId(ACCOUNT, f"r{n}") for n in range(ACCOUNTS)]
        messages = []
        for aggregate_id in ids:
            for body in (Open("o"), Deposit(5)):
                wire = CommandWire(CommandMessage(aggregate_id, body, type(body).__name__))
                messages.append(TransportMessage(first.intake.topic, wire.key, wire.encode(first.bodies), 0))
        for message in messages:
            await first.transport.send(message)
        async with asyncio.timeout(WAIT):
            while len(journal.runs) < 2:  # A is busy, with the rest queued in its lanes  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # polling a journal other tasks append to
        second_rx = await second.start()  # joins: A's partitions are revoked
        assert first_rx.revocation_started.is_set()
        async with asyncio.timeout(WAIT):
            while True:
                versions = [await store.last_version(aggregate_id) for aggregate_id in ids]
                if all(version == 2 for version in versions):
                    break
                await asyncio.sleep(0.05)
        assert second_rx.assigned
        assert first_rx.assigned
        dropped = first.intake.revoked_dropped
    finally:
        await second.close()
        await first.close()

    late = [run for run in journal.runs if run.node == "A" and run.during_revocation]
    assert late == [], "the old owner started queued commands of revoked partitions"
    assert dropped > 0, "nothing was queued at the revocation: the test proved nothing"
    by_aggregate: dict[str, list[Run]] = {}
    for run in journal.runs:
        by_aggregate.setdefault(run.aggregate, []).append(run)
    for aggregate, runs in by_aggregate.items():
        runs.sort(key=lambda run: run.started)
        for before, after in itertools.pairwise(runs):
            assert after.started >= before.ended, f"{aggregate}: {before} and {after} ran at once"
