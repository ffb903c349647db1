"""Rebalances: revoked partitions stop, acknowledged work is kept, in-flight work returns."""

from __future__ import annotations

import asyncio

import pytest

from tests.wow_kafka.conftest import test_settings, unique
from tests.wow_kafka.helpers import Collector, message
from wow_kafka import KafkaTransport

pytestmark = pytest.mark.kafka


async def test_a_joining_member_takes_partitions_and_redelivers_only_in_flight(kafka_bootstrap: str) -> None:
    settings = test_settings(kafka_bootstrap, partitions=4, revocation_drain_timeout_ms=0)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}rebalance.split.command"
    group = unique("split")
    try:
        first = transport.open(group, [topic])
        await first.ready()
        assert len(first.assigned) == 4
        first.open_processing()
        done = [f"done{i}" for i in range(40)]
        in_flight = [f"flight{i}" for i in range(12)]
        # the first member acknowledges the "done" records and keeps the others in flight
        a = Collector(first, ack=lambda record: record.key.startswith("done"))
        await transport.send_many([message(topic, key, key) for key in done])
        await a.count(40)
        await transport.send_many([message(topic, key, key) for key in in_flight])
        await a.count(52)
        before = first.assignments

        second = transport.open(group, [topic])
        b = Collector(second)
        first.assignment_changed.clear()
        await second.ready()
        second.open_processing()
        async with asyncio.timeout(30):
            while first.assignments == before:
                first.assignment_changed.clear()
                await first.assignment_changed.wait()
        assert first.assigned
        assert second.assigned
        assert not (first.assigned & second.assigned)
        assert len(first.assigned | second.assigned) == 4

        # in-flight records of partitions that moved come back on the new owner; the
        # acknowledged ones never do. In-flight records of partitions the first member
        # kept stay in flight there.
        moved = {tp.partition for tp in second.assigned}
        expected = {r.key for r in a.records if r.key.startswith("flight") and r.partition in moved}
        assert expected, "no in-flight record on a moved partition: spread more keys"
        await b.wait_for(lambda records: {r.key for r in records} >= expected)
        assert {r.key for r in b.records} == expected
        assert len(b.records) == len(expected)
        await a.stop()
        await b.stop()
    finally:
        await transport.close()


async def test_in_flight_records_finishing_during_the_drain_are_not_redelivered(kafka_bootstrap: str) -> None:
    settings = test_settings(kafka_bootstrap, partitions=2, revocation_drain_timeout_ms=10000)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}rebalance.drain.command"
    group = unique("drain")
    try:
        first = transport.open(group, [topic])
        await first.ready()
        first.open_processing()
        a = Collector(first, ack=False)
        keys = [f"k{i}" for i in range(20)]
        await transport.send_many([message(topic, key, key) for key in keys])
        records = await a.count(20)
        second = transport.open(group, [topic])
        b = Collector(second)
        joining = asyncio.create_task(second.ready())
        # the first member is revoked and waits for its in-flight records: finish them now
        await asyncio.wait_for(first.revocation_started.wait(), 30)
        assert first.in_flight == 20
        for record in records:
            await record.ack()
        await joining
        second.open_processing()
        await transport.send(message(topic, "after", "after"))
        await asyncio.wait_for(
            asyncio.gather(
                a.wait_for(lambda rs: any(r.key == "after" for r in rs)),
                b.wait_for(lambda rs: any(r.key == "after" for r in rs)),
                return_exceptions=True,
            ),
            30,
        )
        assert [r.key for r in b.records if r.key != "after"] == []
        await a.stop()
        await b.stop()
    finally:
        await transport.close()
