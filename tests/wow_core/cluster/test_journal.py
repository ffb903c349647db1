"""``LedgerJournal``: the ledger topic every node reads into its failure ledger (in-memory
transport; the restart and handover on Kafka are in tests/wow_kafka/test_intake_ledger.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.accounts import ACCOUNT
from wow_core.cluster import FailureLedger, LedgerJournal, ParkedAggregate, ledger_topic
from wow_core.model import AggregateId, now_ms
from wow_core.transport import InMemoryBroker, InMemoryTransport, TransportMessage


def parked(name: str, position: str = "1:7") -> ParkedAggregate:
    return ParkedAggregate("bank.intake", AggregateId(ACCOUNT, name), position, "c-1", "down", 3, now_ms())


@pytest.fixture
async def journals() -> AsyncIterator[tuple[LedgerJournal, LedgerJournal, InMemoryTransport]]:
    transport = InMemoryTransport(broker=InMemoryBroker(partitions=4))
    first = LedgerJournal(transport, "bank", FailureLedger(), node_id="a", timeout=5)
    second = LedgerJournal(transport, "bank", FailureLedger(), node_id="b", timeout=5)
    await first.start()
    await second.start()
    yield first, second, transport
    await first.close()
    await second.close()
    await transport.close()


async def test_a_park_and_its_settle_reach_every_node_past_the_read_barrier(
    journals: tuple[LedgerJournal, LedgerJournal, InMemoryTransport],
) -> None:
    first, second, _ = journals
    entry = parked("ann")
    await first.park(entry)
    assert first.ledger.entries() == [entry]  # the writer's own, at once
    await second.caught_up()
    assert second.ledger.entries() == [entry]
    await first.settle(entry, "retry")
    await second.caught_up()
    assert first.ledger.entries() == []
    assert second.ledger.entries() == []


async def test_a_settle_of_an_older_park_leaves_a_newer_one(
    journals: tuple[LedgerJournal, LedgerJournal, InMemoryTransport],
) -> None:
    first, second, _ = journals
    await first.park(parked("bob", "1:7"))
    await first.settle(parked("bob", "1:7"), "skip")
    newer = parked("bob", "1:9")
    await first.park(newer)
    await first.settle(parked("bob", "1:7"), "skip")  # late, for the old position
    await second.caught_up()
    assert second.ledger.entries() == [newer]
    assert first.ledger.entries() == [newer]


async def test_a_record_that_is_not_a_ledger_record_is_skipped_and_reading_goes_on(
    journals: tuple[LedgerJournal, LedgerJournal, InMemoryTransport], caplog: pytest.LogCaptureFixture
) -> None:
    first, second, transport = journals
    await transport.send(TransportMessage(ledger_topic("bank"), "ledger", "not json", now_ms()))
    await transport.send(TransportMessage(ledger_topic("bank"), "ledger", '{"op": "park"}', now_ms()))
    await first.park(parked("cid"))
    await second.caught_up()
    assert [e.aggregate_id.id for e in second.ledger.entries()] == ["cid"]
    assert "not a ledger record" in caplog.text
