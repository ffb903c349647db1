"""The NATS wait notifier on the real server: one core subject per process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import nats
import pytest

from tests.wow_nats.conftest import Names
from wow_core.command import CommandStage, CommandWait, WaitCoordinator, WaitSignal
from wow_core.command.notifier import WaitSignalSink
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.spi import WaitEndpoint, encode_signal
from wow_nats import NatsSettings
from wow_nats.wait_notifier import NatsWaitNotifier

AGG = AggregateId(NamedAggregate("bank", "account"), "a-1")


def command() -> CommandMessage[Any]:
    return CommandMessage(AGG, {"n": 1}, "deposit")


def notifier(nats_url: str, names: Names) -> NatsWaitNotifier:
    return NatsWaitNotifier(NatsSettings(servers=[nats_url]), topic_prefix=names.topic_prefix)


async def test_a_signal_notified_to_an_endpoint_completes_the_wait_there(nats_url: str, names: Names) -> None:
    caller, sender = notifier(nats_url, names), notifier(nats_url, names)
    coordinator = WaitCoordinator()
    try:
        endpoint = await caller.start(WaitSignalSink(coordinator.receive))
        assert endpoint == WaitEndpoint("nats", caller.subject)
        waiter = coordinator.register(command(), CommandWait.processed())
        await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 2))
        result = await waiter.future
        assert (result.stage, result.aggregate_version) == (CommandStage.PROCESSED, 2)
    finally:
        await caller.close()
        await sender.close()


async def test_hostile_payloads_on_the_subject_are_dropped_and_it_keeps_working(
    nats_url: str, names: Names
) -> None:
    caller = notifier(nats_url, names)
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive)
    raw = await nats.connect(nats_url)
    try:
        endpoint = await caller.start(sink)
        waiter = coordinator.register(command(), CommandWait.processed())
        for payload in (b"\xff", b"{}", b"null", b'{"v": 1, "stage": 3}'):
            await raw.publish(endpoint.address, payload)
        await raw.publish(
            endpoint.address, encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED)).encode()
        )
        assert (await waiter.future).stage is CommandStage.PROCESSED
        assert sink.malformed == 4
    finally:
        await raw.close()
        await caller.close()


async def test_start_returns_only_once_the_server_has_the_subscription(nats_url: str, names: Names) -> None:
    """nats-py's ``flush()`` writes its PING straight to the socket, ahead of a SUB still in
    its write buffer: a PONG proved nothing, and signals another connection published
    right after ``start`` were lost when the SUB was written late (a loaded event loop;
    here its writes are held back 0.5 s)."""
    caller = notifier(nats_url, names)
    coordinator = WaitCoordinator()
    raw = await nats.connect(nats_url)
    client = await caller._connection.client()
    transport: Any = client._transport
    writelines = transport.writelines

    def late(data: Iterable[bytes]) -> None:
        asyncio.get_running_loop().call_later(0.5, writelines, list(data))

    transport.writelines = late
    try:
        endpoint = await caller.start(WaitSignalSink(coordinator.receive))
        transport.writelines = writelines
        waiter = coordinator.register(command(), CommandWait.processed())
        await raw.publish(
            endpoint.address, encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED)).encode()
        )
        assert (await asyncio.wait_for(waiter.future, 5)).stage is CommandStage.PROCESSED
    finally:
        transport.writelines = writelines
        await raw.close()
        await caller.close()


async def test_subjects_of_another_form_are_refused(nats_url: str, names: Names) -> None:
    sender = notifier(nats_url, names)
    try:
        with pytest.raises(ValueError, match="not a wait subject"):
            await sender.notify(WaitEndpoint("nats", "orders.>"), WaitSignal("c", CommandStage.PROCESSED))
    finally:
        await sender.close()
