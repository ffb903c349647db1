"""Helpers of the wow_nats tests (``eventually`` and ``opened`` are the core's test support)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from wow_core.testing import eventually, opened
from wow_core.transport import TransportMessage
from wow_nats import NatsRecord

WAIT = 10.0


def message(
    topic: str, key: str, payload: str = '{"n":0}', timestamp: int = 1700000000000
) -> TransportMessage:
    return TransportMessage(topic=topic, key=key, payload=payload, timestamp=timestamp)


async def next_record(records: AsyncIterator[NatsRecord], timeout: float = WAIT) -> NatsRecord:
    return await asyncio.wait_for(anext(records), timeout)


__all__ = ["WAIT", "eventually", "message", "next_record", "opened"]
