"""Helpers of the Redis tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

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


def named_url(url: str, name: str) -> str:
    """``url`` whose connections name themselves ``name`` (``CLIENT SETNAME`` on connect,
    reconnects included): what :func:`own_clients` finds."""
    return f"{url}{'&' if '?' in url else '?'}client_name={name}"


async def own_clients(redis: Any, name: str, command: str | None = None) -> list[str]:
    """The ids of the connections named ``name`` (and, given ``command``, running it):
    a fault test kills only its own connections, never those of the other tests and
    sessions sharing the server."""
    found: list[str] = []
    for line in (await redis.execute_command("CLIENT", "LIST")).decode().splitlines():
        fields = dict(part.split("=", 1) for part in line.split(" ") if "=" in part)
        if fields.get("name") == name and (command is None or fields.get("cmd") == command):
            found.append(fields["id"])
    return found
