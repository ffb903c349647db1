"""The Redis wait notifier on the real server: one pub/sub channel per process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from wow_core.command import CommandStage, CommandWait, WaitCoordinator, WaitSignal
from wow_core.command.notifier import WaitSignalSink
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.spi import WaitEndpoint, encode_signal
from wow_redis import RedisSettings
from wow_redis.wait_notifier import RedisWaitNotifier

pytestmark = pytest.mark.redis

AGG = AggregateId(NamedAggregate("bank", "account"), "a-1")


def command() -> CommandMessage[Any]:
    return CommandMessage(AGG, {"n": 1}, "deposit")


async def test_a_signal_notified_to_an_endpoint_completes_the_wait_there(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    caller, sender = RedisWaitNotifier(settings_for()), RedisWaitNotifier(settings_for())
    coordinator = WaitCoordinator()
    endpoint = await caller.start(WaitSignalSink(coordinator.receive))
    try:
        assert endpoint == WaitEndpoint("redis", caller.channel)
        waiter = coordinator.register(command(), CommandWait.processed())
        await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 4))
        result = await waiter.future
        assert (result.stage, result.aggregate_version) == (CommandStage.PROCESSED, 4)
    finally:
        await caller.close()
        await sender.close()


async def test_hostile_payloads_on_the_channel_are_dropped_and_the_channel_keeps_working(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    notifier = RedisWaitNotifier(settings_for())
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive)
    endpoint = await notifier.start(sink)
    try:
        waiter = coordinator.register(command(), CommandWait.processed())
        for payload in (b"\xff", b"{}", b"[1, 2]", b'{"v": 1}', b"x" * 2_000_000):
            await redis.publish(endpoint.address, payload)
        await redis.publish(
            endpoint.address, encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED))
        )
        assert (await waiter.future).stage is CommandStage.PROCESSED
        assert sink.malformed == 5
    finally:
        await notifier.close()


async def test_a_dead_endpoint_keeps_nothing_and_other_channels_are_refused(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis
) -> None:
    notifier = RedisWaitNotifier(settings_for())
    try:
        gone = WaitEndpoint("redis", f"{prefix}wow:wait:" + "d" * 32)  # nobody subscribes
        await notifier.notify(gone, WaitSignal("c-1", CommandStage.PROCESSED))
        assert notifier.undelivered == 1
        assert [key async for key in redis.scan_iter(match=f"{prefix}*")] == []
        with pytest.raises(ValueError, match="not a wait channel"):
            await notifier.notify(
                WaitEndpoint("redis", "someone-elses-channel"), WaitSignal("c", CommandStage.PROCESSED)
            )
    finally:
        await notifier.close()
