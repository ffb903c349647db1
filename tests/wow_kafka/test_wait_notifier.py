"""The Kafka wait notifier on a real broker: one partition of the service's signal topic
per process, records keyed by process id."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from wow_core.command import CommandStage, CommandWait, WaitCoordinator, WaitSignal
from wow_core.command.notifier import WaitSignalSink
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.spi import WaitEndpoint, encode_signal
from wow_kafka import KafkaSettings
from wow_kafka.wait_notifier import KafkaWaitNotifier

AGG = AggregateId(NamedAggregate("bank", "account"), "a-1")


def command() -> CommandMessage[Any]:
    return CommandMessage(AGG, {"n": 1}, "deposit")


def notifier(settings: KafkaSettings) -> KafkaWaitNotifier:
    return KafkaWaitNotifier(settings, topic_prefix=settings.topic_prefix or "wow.", service="caller")


async def test_a_signal_reaches_its_process_and_no_other_on_the_same_partition(
    kafka_settings: KafkaSettings,
) -> None:
    settings = kafka_settings.model_copy(update={"partitions": 1})  # both callers read one partition
    first, second, sender = notifier(settings), notifier(settings), notifier(settings)
    coordinators = WaitCoordinator(), WaitCoordinator()
    sinks = WaitSignalSink(coordinators[0].receive), WaitSignalSink(coordinators[1].receive)
    try:
        endpoint = await first.start(sinks[0])
        await second.start(sinks[1])
        assert endpoint.address == f"{first.topic}/0/{first.process_id}"
        waiter = coordinators[0].register(command(), CommandWait.processed())
        await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 5))
        result = await waiter.future
        assert (result.stage, result.aggregate_version) == (CommandStage.PROCESSED, 5)
        # the other process read the same partition and kept nothing of it
        assert (sinks[1].received, sinks[1].unmatched) == (0, 0)
    finally:
        for each in (first, second, sender):
            await each.close()


async def test_hostile_records_are_dropped_and_reading_goes_on(kafka_settings: KafkaSettings) -> None:
    caller = notifier(kafka_settings)
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive)
    raw = AIOKafkaProducer(bootstrap_servers=kafka_settings.bootstrap_list)
    await raw.start()
    try:
        endpoint = await caller.start(sink)
        topic, partition, key = endpoint.address.split("/")
        waiter = coordinator.register(command(), CommandWait.processed())
        for payload in (b"\xff", b"{}", b"[]", b'{"v": 1, "command_id": 3}'):
            await raw.send_and_wait(topic, payload, key=key.encode(), partition=int(partition))
        valid = encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED)).encode()
        await raw.send_and_wait(topic, valid, key=key.encode(), partition=int(partition))
        assert (await waiter.future).stage is CommandStage.PROCESSED
        assert sink.malformed == 4
    finally:
        await raw.stop()
        await caller.close()


async def test_endpoints_of_another_form_are_refused(kafka_settings: KafkaSettings) -> None:
    sender = notifier(kafka_settings)
    try:
        for address in ("orders/0/" + "a" * 32, f"{sender.topic}/x/" + "a" * 32, f"{sender.topic}/0/me"):
            with pytest.raises(ValueError, match="not a wait endpoint"):
                await sender.notify(WaitEndpoint("kafka", address), WaitSignal("c", CommandStage.PROCESSED))
    finally:
        await sender.close()


async def test_the_signal_topic_is_created_with_a_short_retention(kafka_settings: KafkaSettings) -> None:
    """What a dead caller leaves on its partition is dropped by the broker, not kept forever."""
    settings = kafka_settings.model_copy(update={"wait_retention_ms": 123_000})
    caller = notifier(settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    try:
        await caller.start(WaitSignalSink(WaitCoordinator().receive))
        await admin.start()
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, caller.topic)])
        entries = {entry[0]: entry[1] for entry in described[0].resources[0][4]}
        assert entries["retention.ms"] == "123000"
    finally:
        await caller.close()
        await admin.close()


async def test_signals_are_read_within_the_transports_fetch_wait(kafka_settings: KafkaSettings) -> None:
    """The receiving half fetches with ``WOW_KAFKA__FETCH_MAX_WAIT_MS`` (50 ms here), as
    the transport's consumers do, not aiokafka's default of 500 ms: a broker that holds
    an empty fetch for its whole wait (tansu does) would add up to 500 ms to every
    cross-process wait. Twenty signals one at a time: their median delay stays far below
    what a 500 ms fetch wait gives (about 250 ms)."""
    assert kafka_settings.fetch_max_wait_ms == 50
    caller, sender = notifier(kafka_settings), notifier(kafka_settings)
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive)
    loop = asyncio.get_running_loop()
    try:
        endpoint = await caller.start(sink)
        await sender.notify(endpoint, WaitSignal("warm-up", CommandStage.PROCESSED))  # metadata, connection
        delays = []
        for _ in range(20):
            waiter = coordinator.register(command(), CommandWait.processed())
            sent = loop.time()
            await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 1))
            await asyncio.wait_for(waiter.future, 5)
            delays.append(loop.time() - sent)
            coordinator.unregister(waiter)
        assert statistics.median(delays) < 0.15, sorted(round(d * 1000) for d in delays)
    finally:
        await sender.close()
        await caller.close()


async def test_wait_topics_known_from_the_first_metadata_stay_known_after_a_new_one(
    kafka_settings: KafkaSettings,
) -> None:
    """aiokafka's client asks for every topic's metadata while it tracks none, so a wait
    topic that existed when the notifier's producer started is known without being
    tracked; the first refresh after another topic becomes tracked drops it, and a signal
    queued for it meanwhile has no leader until it expires (the caller's wait hangs).
    Every topic the notifier produces to, and its own, must be tracked."""
    caller = notifier(kafka_settings)  # creates the service's signal topic
    third = KafkaWaitNotifier(
        kafka_settings, topic_prefix=kafka_settings.topic_prefix or "wow.", service="third"
    )
    newcomer = KafkaWaitNotifier(
        kafka_settings, topic_prefix=kafka_settings.topic_prefix or "wow.", service="newcomer"
    )
    sender = notifier(kafka_settings)  # the same service: its own topic exists already
    coordinators = WaitCoordinator(), WaitCoordinator(), WaitCoordinator()
    try:
        own_endpoint = await caller.start(WaitSignalSink(coordinators[0].receive))
        third_endpoint = await third.start(WaitSignalSink(coordinators[1].receive))
        await sender.start(WaitSignalSink(WaitCoordinator().receive))
        producer = sender._producer
        assert producer is not None
        cluster = producer.client.cluster
        assert cluster.partitions_for_topic(caller.topic)  # its own topic, known from the start
        await sender.notify(third_endpoint, WaitSignal("before", CommandStage.PROCESSED))
        # a topic created after the sender started: the first one its client must track
        newcomer_endpoint = await newcomer.start(WaitSignalSink(coordinators[2].receive))
        await asyncio.wait_for(sender.notify(newcomer_endpoint, WaitSignal("new", CommandStage.PROCESSED)), 5)
        await producer.client.force_metadata_update()
        assert cluster.partitions_for_topic(caller.topic), "its own topic dropped by the refresh"
        assert cluster.partitions_for_topic(third.topic), "a topic sent to dropped by the refresh"
        for coordinator, endpoint in ((coordinators[0], own_endpoint), (coordinators[1], third_endpoint)):
            waiter = coordinator.register(command(), CommandWait.processed())
            signal = WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 2)
            await asyncio.wait_for(sender.notify(endpoint, signal), 5)
            assert (await asyncio.wait_for(waiter.future, 5)).aggregate_version == 2
    finally:
        for each in (sender, newcomer, third, caller):
            await each.close()
