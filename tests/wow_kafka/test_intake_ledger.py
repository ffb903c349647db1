"""The cluster intake's failure ledger on Kafka is durable and cluster-wide.

A node parks aggregates during a store outage and stops; the store comes back; a new
owner of the partitions (a restarted node: a fresh process state, a fresh ledger) holds
the parked aggregates' commands instead of running them, ``wow.ledger.list`` answers with
the parked aggregates of every partition, a retry drains one, a skip settles the other
with a ``COMMAND_SKIPPED`` receipt to its sender, and a node started afterwards reads a
ledger with nothing parked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.accounts import ACCOUNT, Account, Deposit, Open
from tests.wow_kafka.conftest import test_settings
from wow_core.cluster import (
    CommandIntake,
    CommandReceipt,
    CommandWire,
    FailureLedger,
    InFlightLimit,
    IntakeOptions,
    LedgerJournal,
    ReplyTo,
)
from wow_core.cluster.ops import ledger_request
from wow_core.command import WaitCoordinator
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, now_ms
from wow_core.modeling import AggregateRegistry, CommandKernel
from wow_core.testing import eventually
from wow_core.transport import TransportMessage, TransportReceiver
from wow_kafka import KafkaSettings, KafkaTransport

pytestmark = pytest.mark.kafka

WAIT = 30.0
FAST = IntakeOptions(retries=1, retry_backoff=0.01, max_retry_backoff=0.02)


class FlakyStore(InMemoryEventStore):
    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def append(self, stream: Any) -> None:
        if self.down:
            raise ConnectionError("event store is down")
        await super().append(stream)


class Node:
    def __init__(self, settings: KafkaSettings, store: FlakyStore) -> None:
        self.transport = KafkaTransport(settings)
        self.prefix = settings.topic_prefix or "wow."
        aggregates = AggregateRegistry([Account])
        self.bodies = aggregates.register_body_types(BodyTypeRegistry())
        self.journal = LedgerJournal(self.transport, "bank", FailureLedger(), prefix=self.prefix)
        self.intake = CommandIntake(
            "bank",
            self.transport,
            CommandKernel(aggregates, store),
            WaitCoordinator(),
            self.bodies,
            limit=InFlightLimit(8),
            options=FAST,
            prefix=self.prefix,
            journal=self.journal,
        )

    async def send(self, aggregate_id: AggregateId, body: object) -> CommandMessage[Any]:
        command: CommandMessage[Any] = CommandMessage(aggregate_id, body, type(body).__name__)
        wire = CommandWire(command, ReplyTo("orders", committed=True))
        await self.transport.send(
            TransportMessage(self.intake.topic, wire.key, wire.encode(self.bodies), now_ms())
        )
        return command

    async def close(self) -> None:
        await self.intake.stop(5)
        await self.transport.close()


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return test_settings(kafka_bootstrap, partitions=2)


@pytest.fixture
async def receipts(settings: KafkaSettings) -> AsyncIterator[TransportReceiver]:
    transport = KafkaTransport(settings)
    receiver = transport.open("orders", [f"{settings.topic_prefix}orders.receipts"])
    await receiver.ready()
    receiver.open_processing()
    yield receiver
    await receiver.close()
    await transport.close()


async def receipt_of(receipts: TransportReceiver, command_id: str) -> CommandReceipt:
    async for record in receipts:
        await record.ack()
        receipt = CommandReceipt.decode(record.payload)
        if receipt.command_id == command_id:
            return receipt
    raise AssertionError("the receipts ended")


async def test_a_new_owner_holds_what_was_parked_lists_every_partition_and_retry_or_skip_settles_it(
    settings: KafkaSettings, receipts: TransportReceiver
) -> None:
    store = FlakyStore()
    # aggregates on both partitions (keys spread by the partitioner)
    ids = [AggregateId(ACCOUNT, f"acct-{n}") for n in range(6)]  # partitions 0, 0, 1, 1, 0, 0
    first = Node(settings, store)
    try:
        await first.intake.start()
        for aggregate_id in ids:
            await first.send(aggregate_id, Open("o"))
        for aggregate_id in ids:
            await eventually(_version(store, aggregate_id, 1), WAIT, "the accounts to open")
        store.down = True
        failed = {aggregate_id: await first.send(aggregate_id, Deposit(1)) for aggregate_id in ids}

        async def all_parked() -> bool:
            return len(first.intake.parked()) == len(ids)

        await eventually(all_parked, WAIT, "every aggregate to be parked")
        positions = {entry.from_position.split(":")[0] for entry in first.intake.parked()}
        assert len(positions) == 2, "the test needs parked aggregates on both partitions"
    finally:
        await first.close()
    store.down = False  # the store is back; nothing may run the held commands but the ledger

    second = Node(settings, store)
    ops = KafkaTransport(settings)
    try:
        await second.intake.start()
        assert len(second.intake.parked()) == len(ids)  # read from the journal, not redone

        async def held() -> bool:
            lanes = second.intake._lanes
            return all(lanes.get(a) is not None and lanes[a].parked is not None for a in ids)

        await eventually(held, WAIT, "the new owner to hold the parked aggregates' commands")
        assert [await store.last_version(a) for a in ids] == [1] * len(ids)

        listed = await ledger_request(ops, "list", ids[0], prefix=second.prefix, timeout=WAIT)
        assert listed.committed
        assert len(listed.result["parked"]) == len(ids)  # every partition's, from one owner

        # the owner's own API, which the ledger commands call (their wire path: the in-memory tests)
        second.intake.retry(ids[0])
        await eventually(_version(store, ids[0], 2), WAIT, "the retried deposit")
        await second.intake.skip(ids[1])
        answer = await receipt_of(receipts, failed[ids[1]].id)
        assert (answer.committed, answer.error_code) == (False, "COMMAND_SKIPPED")
        assert await store.last_version(ids[1]) == 1
        for aggregate_id in ids[2:]:
            second.intake.retry(aggregate_id)  # the owner's own API, as the ledger command does
        for aggregate_id in ids[2:]:
            await eventually(_version(store, aggregate_id, 2), WAIT, "the retried deposits")
    finally:
        await second.close()
        await ops.close()

    later = KafkaTransport(settings)
    journal = LedgerJournal(later, "bank", FailureLedger(), prefix=settings.topic_prefix or "wow.")
    try:
        await journal.start()
        assert journal.ledger.entries() == []  # every park was settled, durably
        assert journal.applied >= 2 * len(ids)
    finally:
        await journal.close()
        await later.close()


def _version(store: FlakyStore, aggregate_id: AggregateId, version: int) -> Any:
    async def reached() -> bool:
        return await store.last_version(aggregate_id) == version

    return reached
