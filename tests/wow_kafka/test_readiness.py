"""Readiness and processing admission of the Kafka receiver."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest
from aiokafka.errors import CommitFailedError

from tests.wow_kafka.conftest import unique
from tests.wow_kafka.helpers import Collector, message
from wow_kafka import KafkaSettings, KafkaTransport

pytestmark = pytest.mark.kafka


def boundaries(caplog: pytest.LogCaptureFixture, group: str) -> dict[int, str]:
    """partition -> why its start was chosen, from the receiver's per-partition log lines."""
    found: dict[int, str] = {}
    for line in caplog.messages:
        # the logged id is the Kafka group id: the transport's group prefix, then ``group``
        pattern = rf"group '[^']*{re.escape(group)}': .*\[(\d+)\] starts at offset \d+ \(([a-z ]+)\)"
        match = re.search(pattern, line)
        if match:
            found[int(match.group(1))] = match.group(2)
    return found


async def test_a_new_group_starts_at_the_earliest_retained_record_by_default(
    transport: KafkaTransport, caplog: pytest.LogCaptureFixture
) -> None:
    """A command sent before the group anchored is not skipped: commands are deduplicated."""
    assert transport.settings.auto_offset_reset == "earliest"
    topic = f"{transport.settings.topic_prefix}ready.earliest.command"
    before = [f"b{i}" for i in range(12)]
    await transport.send_many([message(topic, key, f"before-{key}") for key in before])
    group = unique("fresh")
    receiver = transport.open(group, [topic])
    with caplog.at_level(logging.INFO, logger="wow_kafka.receiver"):
        await receiver.ready()
    assert set(boundaries(caplog, group).values()) == {"reset earliest"}
    assert set(boundaries(caplog, group)) == set(range(transport.settings.partitions))
    after = [f"a{i}" for i in range(12)]
    await transport.send_many([message(topic, key, f"after-{key}") for key in after])
    receiver.open_processing()
    collector = Collector(receiver)
    await collector.wait_for(lambda records: {r.key for r in records} >= {*before, *after})
    await collector.stop()
    await receiver.close()


async def test_with_latest_a_new_group_skips_what_was_sent_before_it_anchored(
    kafka_settings: KafkaSettings, caplog: pytest.LogCaptureFixture
) -> None:
    transport = KafkaTransport(kafka_settings.model_copy(update={"auto_offset_reset": "latest"}))
    try:
        topic = f"{transport.settings.topic_prefix}ready.latest.command"
        await transport.send(message(topic, "before", "old"))  # history a latest group skips
        group = unique("fresh")
        receiver = transport.open(group, [topic])
        with caplog.at_level(logging.INFO, logger="wow_kafka.receiver"):
            await receiver.ready()
        assert set(boundaries(caplog, group).values()) == {"reset latest"}
        keys = [f"k{i}" for i in range(30)]  # spread over every partition
        await transport.send_many([message(topic, key, f"new-{key}") for key in keys])
        receiver.open_processing()
        collector = Collector(receiver)
        await collector.wait_for(lambda records: {r.key for r in records} >= set(keys))
        assert "old" not in collector.payloads()
        await collector.stop()
    finally:
        await transport.close()


async def test_the_anchor_is_committed_so_the_next_owner_misses_nothing(
    kafka_settings: KafkaSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """Without committing the anchor, a member taking over would reset to 'latest' again."""
    transport = KafkaTransport(kafka_settings.model_copy(update={"auto_offset_reset": "latest"}))
    topic = f"{transport.settings.topic_prefix}ready.handover.command"
    group = unique("handover")
    first = transport.open(group, [topic])
    await first.ready()
    keys = [f"k{i}" for i in range(12)]
    await transport.send_many([message(topic, key, key) for key in keys])
    await first.close()  # never opened processing: consumed nothing

    second = transport.open(group, [topic])
    with caplog.at_level(logging.INFO, logger="wow_kafka.receiver"):
        await second.ready()
    assert set(boundaries(caplog, group).values()) == {"committed"}  # the first member's anchors
    second.open_processing()
    collector = Collector(second)
    await collector.wait_for(lambda records: {r.key for r in records} >= set(keys))
    await collector.stop()
    await transport.close()


async def test_nothing_is_yielded_before_open_processing(transport: KafkaTransport) -> None:
    topic = f"{transport.settings.topic_prefix}ready.admission.command"
    receiver = transport.open(unique("admission"), [topic])
    await receiver.ready()
    await transport.send(message(topic, "a", "1"))
    iterator = aiter(receiver)
    pending = asyncio.ensure_future(anext(iterator))
    done, _ = await asyncio.wait({pending}, timeout=1.0)
    assert not done, "a record reached the consumer before processing was opened"
    assert receiver.processing_open is False
    receiver.open_processing()
    record = await asyncio.wait_for(pending, 20)
    assert record.payload == "1"
    await record.ack()
    await receiver.close()


async def test_iteration_ends_when_the_receiver_closes(transport: KafkaTransport) -> None:
    topic = f"{transport.settings.topic_prefix}ready.close.command"
    receiver = transport.open(unique("close"), [topic])
    await receiver.ready()
    receiver.open_processing()
    collected: list[object] = []

    async def drain() -> None:
        async for record in receiver:
            collected.append(record)

    task = asyncio.create_task(drain())
    await asyncio.sleep(0)
    await receiver.close()
    await asyncio.wait_for(task, 10)
    assert collected == []
    with pytest.raises(Exception, match="closed"):
        await receiver.ready()


async def test_readiness_waits_for_an_anchoring_that_succeeds(transport: KafkaTransport) -> None:
    """An anchoring interrupted by a rebalance leaves the member not ready and paused."""
    topic = f"{transport.settings.topic_prefix}ready.interrupted.command"
    group = unique("interrupted")
    first = transport.open(group, [topic])
    attempts: list[int] = []
    failed = asyncio.Event()
    original = first._anchor

    async def interrupted_once(consumer: Any, assigned: Any) -> Any:
        attempts.append(len(assigned))
        if len(attempts) == 1:
            failed.set()
            raise CommitFailedError("the group rebalanced while anchoring (simulated)")
        return await original(consumer, assigned)

    first._anchor = interrupted_once  # type: ignore[method-assign]
    becoming_ready = asyncio.create_task(first.ready())
    await asyncio.wait_for(failed.wait(), 30)
    done, _ = await asyncio.wait({becoming_ready}, timeout=1.0)
    assert not done, "ready() completed although no partition was anchored"
    assert first.assigned == frozenset()

    second = transport.open(group, [topic])  # a rebalance: the first member anchors again
    await asyncio.wait_for(asyncio.gather(becoming_ready, second.ready()), 30)
    assert len(attempts) >= 2
    keys = [f"k{i}" for i in range(12)]
    await transport.send_many([message(topic, key, key) for key in keys])
    first.open_processing()
    second.open_processing()
    changed = asyncio.Event()
    a, b = Collector(first, changed=changed), Collector(second, changed=changed)
    async with asyncio.timeout(30):
        while {r.key for r in a.records} | {r.key for r in b.records} != set(keys):
            changed.clear()
            await changed.wait()
    await a.stop()
    await b.stop()
