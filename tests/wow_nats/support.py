"""Helpers of the wow_nats tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from wow_core.transport import TransportMessage
from wow_nats import NatsReceiver, NatsRecord, NatsTransport

WAIT = 10.0


def message(
    topic: str, key: str, payload: str = '{"n":0}', timestamp: int = 1700000000000
) -> TransportMessage:
    return TransportMessage(topic=topic, key=key, payload=payload, timestamp=timestamp)


async def eventually(condition: Callable[[], Awaitable[bool]], timeout: float = WAIT) -> None:
    """Poll ``condition`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


async def next_record(records: AsyncIterator[NatsRecord], timeout: float = WAIT) -> NatsRecord:
    return await asyncio.wait_for(anext(records), timeout)


async def opened(transport: NatsTransport, group: str, topics: list[str]) -> NatsReceiver:
    """A receiver of ``group`` on ``topics``: ready, processing open."""
    receiver = transport.open(group, topics)
    await receiver.ready()
    receiver.open_processing()
    return receiver
