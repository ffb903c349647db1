"""Helpers of the Redis tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from wow_core.testing import eventually, opened
from wow_core.transport import TransportMessage, TransportRecord
from wow_redis import RedisStreamReceiver


def message(topic: str, key: str = "k1", payload: str = '{"n":1}') -> TransportMessage:
    return TransportMessage(topic=topic, key=key, payload=payload, timestamp=int(time.time() * 1000))


async def take(
    receiver: RedisStreamReceiver | AsyncIterator[TransportRecord], count: int, timeout: float = 10.0
) -> list[TransportRecord]:
    """The next ``count`` records, or TimeoutError."""
    iterator = receiver if not isinstance(receiver, RedisStreamReceiver) else aiter(receiver)
    records: list[TransportRecord] = []

    async def collect() -> None:
        while len(records) < count:
            records.append(await anext(iterator))

    await asyncio.wait_for(collect(), timeout)
    return records


def next_record(iterator: AsyncIterator[TransportRecord]) -> asyncio.Task[TransportRecord]:
    """The next record as a task: a test can check it is not done yet without cancelling it."""

    async def get() -> TransportRecord:
        return await anext(iterator)

    return asyncio.ensure_future(get())


__all__ = ["eventually", "message", "next_record", "opened", "take"]
