"""The Redis wait notifier on the real server: one pub/sub channel per process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import ConnectionPool, Redis

from wow_core.command import CommandStage, CommandWait, WaitCoordinator, WaitSignal
from wow_core.command.notifier import WaitSignalSink
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.spi import WaitEndpoint, encode_signal
from wow_core.testing import eventually
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


async def test_the_channel_is_subscribed_again_after_its_connection_was_killed(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    """A lost subscription connection (a Redis restart, a proxy timeout) is re-established:
    once the notifier says it receives again, waits registered afterwards are signalled.

    The server's subscriber count is no such promise: redis-py resubscribes while it
    reconnects and then raises, and the notifier closes that connection before it
    subscribes afresh; a signal published in between was lost (the flake this replaces)."""
    caller, sender = RedisWaitNotifier(settings_for()), RedisWaitNotifier(settings_for())
    coordinator = WaitCoordinator()
    endpoint = await caller.start(WaitSignalSink(coordinator.receive))
    try:
        assert (caller.receiving, caller.subscriptions) == (True, 1)
        pubsub = caller._pubsub
        assert pubsub is not None
        assert pubsub.connection is not None
        host, port = pubsub.connection._writer.get_extra_info("sockname")[:2]  # type: ignore[union-attr]

        async def subscribers() -> int:
            return int((await redis.pubsub_numsub(caller.channel))[0][1])

        assert await subscribers() == 1
        await redis.execute_command("CLIENT", "KILL", "ADDR", f"{host}:{port}")

        async def receiving_again() -> bool:
            return caller.receiving and caller.subscriptions >= 2

        # the reader notices, backs off, subscribes again and reads the confirmation
        await eventually(receiving_again, timeout=15, what="the wait channel to be subscribed again")
        assert await subscribers() == 1
        waiter = coordinator.register(command(), CommandWait.processed())
        await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 2))
        assert (await asyncio.wait_for(waiter.future, 5)).aggregate_version == 2
        assert sender.undelivered == 0
    finally:
        await caller.close()
        await sender.close()
    assert not caller.receiving


async def test_concurrent_notifications_share_round_trips_and_arrive_in_call_order(
    settings_for: Callable[..., RedisSettings], redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 signals notified at once go out pipelined on one connection, in few round trips
    (one ``PUBLISH`` round trip each made the service process spend more time notifying
    than processing: see the waits benchmark), and the caller receives them in the order
    ``notify`` was called."""
    caller, sender = RedisWaitNotifier(settings_for()), RedisWaitNotifier(settings_for())
    coordinator = WaitCoordinator()
    received: list[str] = []

    def deliver(signal: WaitSignal) -> bool:
        received.append(signal.command_id)
        return coordinator.receive(signal)

    endpoint = await caller.start(WaitSignalSink(deliver))
    await sender.notify(endpoint, WaitSignal("warm-up", CommandStage.PROCESSED))  # connects
    checkouts = 0
    get_connection = ConnectionPool.get_connection

    async def counted(pool: ConnectionPool, *args: Any, **kwargs: Any) -> Any:
        nonlocal checkouts
        checkouts += 1
        return await get_connection(pool, *args, **kwargs)

    try:
        waiters = [coordinator.register(command(), CommandWait.processed()) for _ in range(200)]
        monkeypatch.setattr(ConnectionPool, "get_connection", counted)
        await asyncio.gather(
            *(sender.notify(endpoint, WaitSignal(w.command.id, CommandStage.PROCESSED)) for w in waiters)
        )
        monkeypatch.undo()
        await asyncio.wait_for(asyncio.gather(*(w.future for w in waiters)), 10)
        assert received[1:] == [w.command.id for w in waiters]
        assert checkouts <= 5, f"{checkouts} round trips for 200 notifications"
    finally:
        await caller.close()
        await sender.close()
