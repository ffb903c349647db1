"""A ledger journal write the broker does not take is retried, in order, and the intake
settles nothing that depends on it (in-memory transport with an injected outage of the
ledger topic; the topic's retention and the group-less reading on Kafka are in
tests/wow_kafka/test_ledger_topic.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.accounts import ACCOUNT, Account, Deposit, Open
from tests.wow_core.cluster.test_intake import FAST, TOPIC, WAIT, FlakyStore, Receipts, account, command, send
from wow_core.cluster import CommandIntake, FailureLedger, InFlightLimit, LedgerJournal, ParkedAggregate
from wow_core.cluster.journal import JournalClosedError
from wow_core.cluster.ops import ledger_request
from wow_core.command import WaitCoordinator
from wow_core.model import AggregateId, BodyTypeRegistry, now_ms
from wow_core.modeling import AggregateRegistry, CommandKernel
from wow_core.testing import eventually
from wow_core.transport import InMemoryBroker, InMemoryTransport, TransportMessage

GROUP = "bank.intake"


class LedgerOutage(InMemoryTransport):
    """An in-memory transport whose sends to a ledger topic fail while ``down`` is set."""

    def __init__(self, broker: InMemoryBroker) -> None:
        super().__init__(broker=broker)
        self.down = False
        self.refused = 0

    async def send(self, message: TransportMessage) -> None:
        if self.down and message.topic.endswith(".ledger"):
            self.refused += 1
            raise ConnectionError("the broker does not take the ledger write")
        await super().send(message)


async def fast(seconds: float) -> None:
    await asyncio.sleep(min(seconds, 0.005))


def journal(transport: InMemoryTransport, timeout: float = 5.0) -> LedgerJournal:
    return LedgerJournal(transport, "bank", FailureLedger(), timeout=timeout, retry_backoff=0.005, sleep=fast)


def parked(name: str, position: str = "1:7") -> ParkedAggregate:
    return ParkedAggregate("bank.intake", AggregateId(ACCOUNT, name), position, "c-1", "down", 3, now_ms())


async def refused(transport: LedgerOutage, count: int) -> None:
    async def enough() -> bool:
        return transport.refused >= count

    await eventually(enough, WAIT, f"{count} refused ledger writes")


# -- the journal ----------------------------------------------------------------------------


async def test_a_refused_write_is_retried_in_order_until_the_broker_takes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = InMemoryBroker(partitions=4)
    writer_transport, reader_transport = LedgerOutage(broker), InMemoryTransport(broker=broker)
    writer, reader = journal(writer_transport), journal(reader_transport)
    await writer.start()
    await reader.start()
    try:
        writer_transport.down = True
        ann, bob = parked("ann"), parked("bob")
        park_ann = writer.park(ann)
        settle_ann = writer.settle(ann, "skip")  # written after its park, never before
        park_bob = writer.park(bob)
        await refused(writer_transport, 3)
        assert not park_ann.done()
        assert writer.unwritten == 3
        assert writer.ledger.entries() == [bob]  # this node's ledger has them at once
        await reader.caught_up()
        assert reader.ledger.entries() == []  # nothing written yet
        writer_transport.down = False
        await asyncio.wait_for(asyncio.gather(park_ann, settle_ann, park_bob), WAIT)
        assert writer.unwritten == 0
        assert writer.write_failures >= 3
        await reader.caught_up()
        assert reader.ledger.entries() == [bob]  # ann's park came before its settle
        assert "did not take the park of" in caplog.text
    finally:
        await writer.close()
        await reader.close()
        await broker_close(writer_transport, reader_transport)


async def test_close_gives_the_queue_its_timeout_then_fails_and_logs_what_was_not_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = LedgerOutage(InMemoryBroker(partitions=4))
    shut = journal(transport, timeout=0.2)
    await shut.start()
    transport.down = True
    written = shut.park(parked("cid"))
    await shut.close()
    with pytest.raises(JournalClosedError):
        await written
    assert "before the journal closed" in caplog.text
    with pytest.raises(JournalClosedError):
        await shut.park(parked("dan"))  # closed: refused at once
    await transport.close()


async def broker_close(*transports: InMemoryTransport) -> None:
    for transport in transports:
        await transport.close()


# -- the intake: nothing that depends on an unwritten write is settled ------------------------


class Node:
    def __init__(self, broker: InMemoryBroker, store: FlakyStore, timeout: float = 5.0) -> None:
        self.transport = LedgerOutage(broker)
        aggregates = AggregateRegistry([Account])
        self.bodies = aggregates.register_body_types(BodyTypeRegistry())
        self.journal = journal(self.transport, timeout)
        self.intake = CommandIntake(
            "bank",
            self.transport,
            CommandKernel(aggregates, store),
            WaitCoordinator(),
            self.bodies,
            limit=InFlightLimit(8),
            options=FAST,
            journal=self.journal,
        )


@pytest.fixture
def broker() -> InMemoryBroker:
    return InMemoryBroker(partitions=4)


@pytest.fixture
def store() -> FlakyStore:
    return FlakyStore()


@pytest.fixture
async def receipts(broker: InMemoryBroker) -> AsyncIterator[Receipts]:
    reader = Receipts(InMemoryTransport(broker=broker))
    yield reader
    await reader.close()


@pytest.fixture
async def node(broker: InMemoryBroker, store: FlakyStore) -> AsyncIterator[Node]:
    started = Node(broker, store)
    await started.intake.start()
    yield started
    started.transport.down = False
    await started.intake.stop(5)
    await started.transport.close()


async def park_one(node: Node, receipts: Receipts, store: FlakyStore, name: str) -> tuple[AggregateId, int]:
    """Open ``name``, park its deposit; the record held and the partition's checkpoint."""
    aggregate_id = account(name)
    await send(node, command(aggregate_id, Open(name)))
    opened = await receipts.next()
    store.down = True
    await send(node, command(aggregate_id, Deposit(1)))

    async def is_parked() -> bool:
        return bool(node.intake.parked()) and node.journal.unwritten == 0

    await eventually(is_parked, WAIT, "the aggregate to be parked and written")
    store.down = False
    return aggregate_id, int(opened.position.split(":")[0])


def unacknowledged(broker: InMemoryBroker) -> int:
    return broker.backlog(GROUP, TOPIC)


async def test_a_retry_the_journal_did_not_take_settles_none_of_the_aggregates_commands(
    node: Node, receipts: Receipts, store: FlakyStore, broker: InMemoryBroker
) -> None:
    erin, partition = await park_one(node, receipts, store, "erin")
    checkpoint = node.intake.checkpoint(partition)
    await send(node, command(erin, Deposit(2)))  # behind the parked one
    node.transport.down = True
    node.intake.retry(erin)
    first = await receipts.next()  # the failed command runs (and answers) at once
    assert first.version == 2
    await refused(node.transport, 2)
    assert unacknowledged(broker) == 2  # but it is not settled before the retry is written,
    assert node.intake.checkpoint(partition) == checkpoint
    assert receipts.pending() == 0  # and its lane's next command waits behind it
    node.transport.down = False
    second = await receipts.next()
    assert second.version == 3

    async def settled() -> bool:
        return unacknowledged(broker) == 0

    await eventually(settled, WAIT, "the commands to be settled once the retry is written")
    assert node.intake.checkpoint(partition) == int(second.position.split(":")[1]) + 1
    later = journal(InMemoryTransport(broker=broker))
    await later.start()
    assert later.ledger.entries() == []  # the retry is in the journal
    await later.close()


async def test_a_ledger_retry_command_is_answered_only_once_the_journal_took_the_retry(
    node: Node, receipts: Receipts, store: FlakyStore, broker: InMemoryBroker
) -> None:
    frank, _ = await park_one(node, receipts, store, "frank")
    ops = InMemoryTransport(broker=broker)
    node.transport.down = True
    answer = asyncio.create_task(ledger_request(ops, "retry", frank, timeout=WAIT))
    deposit = await receipts.next()  # the retried command runs
    assert deposit.version == 2
    await refused(node.transport, 2)
    assert not answer.done()  # its receipt would say "retried" before the journal knew
    node.transport.down = False
    retried = await answer
    assert retried.committed
    assert retried.result["parked"][0]["aggregate"] == "bank.account@frank"
    await ops.close()


async def test_a_skip_the_journal_did_not_take_waits_and_settles_nothing(
    node: Node, receipts: Receipts, store: FlakyStore, broker: InMemoryBroker
) -> None:
    gina, _ = await park_one(node, receipts, store, "gina")
    node.transport.down = True
    skipping = asyncio.create_task(node.intake.skip(gina))
    await refused(node.transport, 2)
    assert not skipping.done()
    assert unacknowledged(broker) == 1  # the skipped command is still held
    assert receipts.pending() == 0  # and its sender not told yet
    node.transport.down = False
    entry = await asyncio.wait_for(skipping, WAIT)
    assert entry.aggregate_id == gina
    assert (await receipts.next()).error_code == "COMMAND_SKIPPED"

    async def settled() -> bool:
        return unacknowledged(broker) == 0

    await eventually(settled, WAIT, "the skipped command to be settled")


async def test_a_park_the_journal_did_not_take_is_written_once_the_broker_takes_it(
    node: Node, receipts: Receipts, store: FlakyStore, broker: InMemoryBroker
) -> None:
    hugo = account("hugo")
    await send(node, command(hugo, Open("h")))
    await receipts.next()
    node.transport.down = True
    store.down = True
    await send(node, command(hugo, Deposit(1)))

    async def is_parked() -> bool:
        return bool(node.intake.parked())

    await eventually(is_parked, WAIT, "the aggregate to be parked on this node")
    await refused(node.transport, 2)
    other = journal(InMemoryTransport(broker=broker))
    await other.start()
    assert other.ledger.entries() == []  # held by this node only, for now
    node.transport.down = False

    async def everywhere() -> bool:
        await other.caught_up()
        return [entry.aggregate_id for entry in other.ledger.entries()] == [hugo]

    await eventually(everywhere, WAIT, "the park to reach the journal")
    assert unacknowledged(broker) == 1  # the parked command stays held
    await other.close()
    await other.transport.close()


async def test_a_new_partitions_commands_wait_for_the_read_barrier_while_the_journal_is_down(
    broker: InMemoryBroker, store: FlakyStore, receipts: Receipts, caplog: pytest.LogCaptureFixture
) -> None:
    node = Node(broker, store, timeout=0.1)
    await node.intake.start()
    try:
        node.transport.down = True
        await send(node, command(account("ivan"), Open("i")))  # the first of its partition here

        async def two_barriers_failed() -> bool:
            return caplog.text.count("cannot be read") >= 2

        await eventually(two_barriers_failed, WAIT, "the read barrier to fail twice")
        assert node.intake.executed == 0  # nothing runs before the node knows what is parked
        assert receipts.pending() == 0
        node.transport.down = False
        opened = await receipts.next()
        assert opened.committed
    finally:
        node.transport.down = False
        await node.intake.stop(5)
        await node.transport.close()
