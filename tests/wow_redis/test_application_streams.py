"""Application-command streams on a real Redis: under ``WOW_REDIS__KEY_PREFIX`` like every
other stream and key (the default empty prefix keeps the core's name), and a record that
is not a command envelope left pending at once, not retried."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis

from tests.wow_core.application.commands import ChargeCard
from tests.wow_redis.conftest import REDIS_URL
from wow_core import transport_registry
from wow_core.application import (
    ApplicationCommandBus,
    ApplicationCommands,
    ApplicationSettings,
    CommandWorker,
    JsonCommandSerializer,
    Operation,
    OperationStatus,
    TransportMiddleware,
    TransportRegistry,
)
from wow_core.testing.support import eventually
from wow_core.transport import TransportMessage
from wow_redis import RedisSettings, RedisStreamTransport

pytestmark = pytest.mark.redis


def test_the_application_stream_keeps_the_core_name_without_a_key_prefix() -> None:
    registry = TransportRegistry({"payments": RedisStreamTransport(RedisSettings())}, topic_prefix="acme.")
    assert registry.topic("payments") == "acme.application.payments"


def test_the_application_stream_is_under_the_key_prefix() -> None:
    transport = RedisStreamTransport(RedisSettings(key_prefix="outside-app1:"))
    registry = TransportRegistry({"payments": transport}, topic_prefix="outsideapp1.")
    assert registry.topic("payments") == "outside-app1:outsideapp1.application.payments"


@dataclass
class App:
    registry: TransportRegistry
    bus: ApplicationCommandBus
    worker: CommandWorker
    stream: str
    unprefixed: str
    handled: list[Operation] = field(default_factory=list)


@pytest.fixture
async def app(redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[App]:
    """A producer and an in-process worker, both built from the environment, as
    ``wow worker`` builds them."""
    topic_prefix = f"t{uuid.uuid4().hex[:10]}."
    for name, value in {
        "WOW_SERVICE_NAME": "shop",
        "WOW_MESSAGING__TOPIC_PREFIX": topic_prefix,
        "WOW_APPLICATION__TRANSPORTS": '{"payments": "redis"}',
        "WOW_REDIS__URL": REDIS_URL,
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
    }.items():
        monkeypatch.setenv(name, value)
    unprefixed = f"{topic_prefix}application.payments"
    try:
        async with transport_registry() as registry:
            handled: list[Operation] = []

            async def charge(command: ChargeCard, operation: Operation) -> None:
                handled.append(operation)

            serializer = JsonCommandSerializer()
            bus = ApplicationCommandBus([TransportMiddleware(registry, serializer)])
            bus.register(ChargeCard, charge)
            # a retry would show as a 30 s pause
            settings = ApplicationSettings.model_validate(
                {"worker": {"retry_backoff": 30, "retry_backoff_max": 30}}
            )
            worker = ApplicationCommands(bus, serializer).worker(
                registry, "payments", settings, service_name="shop"
            )
            made = App(registry, bus, worker, prefix + unprefixed, unprefixed, handled)
            yield made
    finally:
        await redis.delete(unprefixed, unprefixed + ".dlq")


async def serve(app: App) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.ensure_future(app.worker.run(stop, ready))
    await asyncio.wait_for(ready.wait(), 10)
    return stop, task


async def test_producer_and_worker_built_from_the_environment_use_the_prefixed_stream(
    app: App, redis: Redis
) -> None:
    assert app.registry.topic("payments") == app.stream
    operation = await app.bus.dispatch(ChargeCard("4242", 10))
    assert operation.status is OperationStatus.QUEUED
    assert await redis.exists(app.stream) == 1, "the stream carries WOW_REDIS__KEY_PREFIX"
    assert await redis.exists(app.unprefixed) == 0
    stop, task = await serve(app)
    try:

        async def handled() -> bool:
            return len(app.handled) == 1

        await eventually(handled, what="the worker to run the queued command")
        assert app.handled[0].attributes[CommandWorker.ATTR_ORIGINAL_OPERATION_ID] == operation.operation_id
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_a_record_that_is_not_an_envelope_is_left_pending_at_once_and_the_worker_goes_on(
    app: App, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    transport = app.registry.get("payments")
    await transport.send(TransportMessage(topic=app.stream, key="k", payload="not json", timestamp=0))
    await app.bus.dispatch(ChargeCard("4242", 10))
    stop, task = await serve(app)
    try:

        async def handled() -> bool:
            return len(app.handled) == 1

        await eventually(handled, what="the command after the bad record to run")

        def left_pending() -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if r.name == "wow.application.worker" and "is not a command envelope" in r.getMessage()
            ]

        async def reported() -> bool:
            return bool(left_pending())

        await eventually(reported, timeout=5, what="the bad record to be reported (a retry would pause 30 s)")
        [line] = left_pending()
        assert line.startswith(f"record {app.stream}/")
        assert line.count(app.stream) == 1, "the stream is named once"
        assert "left unacknowledged" in line
        assert not [r for r in caplog.records if "attempt" in r.getMessage()], "it was not retried"
        pending = await redis.xpending(app.stream, app.worker.group)
        assert pending["pending"] == 1, "the bad record stays in the group's pending list (XPENDING)"
        assert await redis.exists(app.stream + ".dlq") == 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
