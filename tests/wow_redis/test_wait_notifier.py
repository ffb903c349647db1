"""The Redis wait notifier on the real server: one wait stream per process, read on
across lost connections."""

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
        assert endpoint == WaitEndpoint("redis", caller.stream)
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
            await redis.xadd(endpoint.address, {b"s": payload})
        await redis.xadd(endpoint.address, {b"other": b"field"})
        await redis.xadd(
            endpoint.address, {b"s": encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED))}
        )
        assert (await waiter.future).stage is CommandStage.PROCESSED
        assert sink.malformed == 6
    finally:
        await notifier.close()


async def test_a_dead_endpoint_keeps_nothing_and_other_addresses_are_refused(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis
) -> None:
    notifier = RedisWaitNotifier(settings_for())
    try:
        gone = WaitEndpoint("redis", f"{prefix}wow:waits:" + "d" * 32)  # nobody made it
        await notifier.notify(gone, WaitSignal("c-1", CommandStage.PROCESSED))
        old_form = WaitEndpoint("redis", f"{prefix}wow:wait:" + "d" * 32)  # nobody subscribes
        await notifier.notify(old_form, WaitSignal("c-2", CommandStage.PROCESSED))
        assert notifier.undelivered == 2
        assert [key async for key in redis.scan_iter(match=f"{prefix}*")] == [], "NOMKSTREAM: nothing made"
        with pytest.raises(ValueError, match="not a wait stream"):
            await notifier.notify(
                WaitEndpoint("redis", "someone-elses-stream"), WaitSignal("c", CommandStage.PROCESSED)
            )
    finally:
        await notifier.close()


async def test_a_caller_of_the_pub_sub_form_is_still_answered(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis
) -> None:
    notifier = RedisWaitNotifier(settings_for())
    channel = f"{prefix}wow:wait:" + "e" * 32
    pubsub = redis.pubsub()
    await pubsub.subscribe(channel)
    try:
        async with asyncio.timeout(5):
            while (await pubsub.get_message(timeout=1)) is None:
                pass  # the subscription's confirmation
        await notifier.notify(WaitEndpoint("redis", channel), WaitSignal("c-1", CommandStage.PROCESSED))
        async with asyncio.timeout(5):
            message = None
            while message is None:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        assert b'"command_id":"c-1"' in message["data"].replace(b" ", b"")
        assert notifier.undelivered == 0
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await notifier.close()


async def test_a_closed_caller_deletes_its_stream_and_a_dead_one_leaves_it_for_the_ttl(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    closed = RedisWaitNotifier(settings_for())
    await closed.start(WaitSignalSink(WaitCoordinator().receive))
    assert await redis.exists(closed.stream)
    await closed.close()
    assert not await redis.exists(closed.stream), "close deletes it"

    dead = RedisWaitNotifier(settings_for(wait_stream_ttl=1.0))
    await dead.start(WaitSignalSink(WaitCoordinator().receive))
    assert dead._reader is not None
    dead._reader.cancel()  # it dies: nobody refreshes or deletes its stream
    assert 0 < await redis.pttl(dead.stream) <= 1000

    async def expired() -> bool:
        return not await redis.exists(dead.stream)

    await eventually(expired, timeout=5, what="the dead caller's stream to expire")
    sender = RedisWaitNotifier(settings_for())
    try:
        await sender.notify(WaitEndpoint("redis", dead.stream), WaitSignal("c", CommandStage.PROCESSED))
        assert sender.undelivered == 1
        assert not await redis.exists(dead.stream)
    finally:
        await sender.close()
        await dead.close()


async def test_a_caller_refreshes_its_stream_and_makes_it_again_when_the_server_lost_it(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    caller, sender = RedisWaitNotifier(settings_for(wait_stream_ttl=1.5)), RedisWaitNotifier(settings_for())
    coordinator = WaitCoordinator()
    endpoint = await caller.start(WaitSignalSink(coordinator.receive))
    try:
        await asyncio.sleep(2.0)  # past the TTL: kept alive by the refreshes
        assert await redis.exists(caller.stream)
        await redis.delete(caller.stream)  # as a server that lost its data

        async def made_again() -> bool:
            return bool(await redis.exists(caller.stream)) and caller.subscriptions >= 2

        await eventually(made_again, timeout=5, what="the lost stream to be made again")
        waiter = coordinator.register(command(), CommandWait.processed())
        await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 3))
        assert (await asyncio.wait_for(waiter.future, 5)).aggregate_version == 3
    finally:
        await caller.close()
        await sender.close()


async def test_the_stream_is_trimmed_for_a_caller_that_does_not_read(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    # the publisher trims (XADD MAXLEN ~): the service's setting bounds its callers' streams
    caller, sender = RedisWaitNotifier(settings_for()), RedisWaitNotifier(settings_for(wait_stream_maxlen=10))
    endpoint = await caller.start(WaitSignalSink(WaitCoordinator().receive))
    assert caller._reader is not None
    caller._reader.cancel()
    try:
        await asyncio.gather(
            *(sender.notify(endpoint, WaitSignal(f"c-{n}", CommandStage.PROCESSED)) for n in range(2000))
        )
        assert await redis.xlen(caller.stream) <= 300, "MAXLEN ~ 10: trimmed by whole nodes"
    finally:
        await caller.close()
        await sender.close()


async def reader_connection(redis: Redis, notifier: RedisWaitNotifier) -> str:
    """The address of the connection ``notifier`` reads its stream on."""
    name = f"wow-wait-{notifier.stream[-32:-24]}"
    for client in await redis.client_list():
        if client.get("name") == name:
            return str(client["addr"])
    raise AssertionError(f"no connection named {name}")


async def test_signals_notified_while_the_callers_connection_is_lost_arrive_once_it_is_back(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    """A lost reading connection (a proxy timeout, a network blip, a server restart that
    kept its data): what was notified meanwhile waits in the stream and is read when the
    connection is back, each signal once (pub/sub lost these: the waits timed out)."""
    caller = RedisWaitNotifier(settings_for(reconnect_backoff=1.0, reconnect_backoff_max=1.0))
    sender = RedisWaitNotifier(settings_for())
    coordinator = WaitCoordinator()
    received: list[str] = []

    def deliver(signal: WaitSignal) -> bool:
        received.append(signal.command_id)
        return coordinator.receive(signal)

    endpoint = await caller.start(WaitSignalSink(deliver))
    try:
        assert (caller.receiving, caller.subscriptions) == (True, 1)
        await redis.execute_command("CLIENT", "KILL", "ADDR", await reader_connection(redis, caller))

        async def lost() -> bool:
            return not caller.receiving

        await eventually(lost, timeout=5, what="the reader to notice its lost connection")
        waiters = [coordinator.register(command(), CommandWait.processed()) for _ in range(5)]
        for n, waiter in enumerate(waiters):
            await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, n))
        assert not caller.receiving, "notified while the caller was away"
        results = await asyncio.wait_for(asyncio.gather(*(w.future for w in waiters)), 10)
        assert [r.aggregate_version for r in results] == [0, 1, 2, 3, 4]
        assert received == [w.command.id for w in waiters], "each once, in order"
        assert (caller.receiving, caller.subscriptions) == (True, 2)
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


async def test_a_ttl_shorter_than_the_block_time_still_keeps_a_reading_callers_stream(
    settings_for: Callable[..., RedisSettings], redis: Redis
) -> None:
    caller = RedisWaitNotifier(settings_for(block_time=2.0, wait_stream_ttl=0.6))
    await caller.start(WaitSignalSink(WaitCoordinator().receive))
    try:
        for _ in range(6):
            await asyncio.sleep(0.25)
            assert await redis.exists(caller.stream), "refreshed before it expired"
        assert caller.subscriptions == 1, "never lost"
    finally:
        await caller.close()
