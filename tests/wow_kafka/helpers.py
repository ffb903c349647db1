"""Small helpers of the Kafka tests: collect records with deadlines, never sleep."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from aiokafka import AIOKafkaConsumer

from wow_core.transport import TransportMessage, TransportRecord
from wow_kafka import KafkaRecord, KafkaTransport, KafkaTransportReceiver


def message(topic: str, key: str, payload: str) -> TransportMessage:
    return TransportMessage(topic, key, payload, int(time.time() * 1000))


async def raw_records(
    transport: KafkaTransport, topic: str, count: int, timeout: float = 30
) -> list[tuple[bytes | None, bytes | None, dict[str, str]]]:
    """The first ``count`` records of ``topic`` read by a plain aiokafka consumer, from the
    start: key, value and headers (values decoded as UTF-8)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=transport.settings.bootstrap_list,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        found: list[tuple[bytes | None, bytes | None, dict[str, str]]] = []
        async with asyncio.timeout(timeout):
            while len(found) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    found.extend((r.key, r.value, {k: v.decode() for k, v in r.headers}) for r in records)
        return found
    finally:
        await consumer.stop()


class Collector:
    """Drains a receiver in a task; tests wait on conditions over what arrived."""

    def __init__(
        self,
        receiver: KafkaTransportReceiver,
        *,
        ack: bool | Callable[[KafkaRecord], bool] = True,
        changed: asyncio.Event | None = None,
    ):
        self.receiver = receiver
        self.records: list[KafkaRecord] = []
        self._ack = ack
        self._changed = changed if changed is not None else asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        iterator: AsyncIterator[TransportRecord] = aiter(self.receiver)
        async for record in iterator:
            assert isinstance(record, KafkaRecord)
            self.records.append(record)
            if self._ack is True or (callable(self._ack) and self._ack(record)):
                await record.ack()
            self._changed.set()

    async def wait_for(self, condition: Callable[[list[KafkaRecord]], bool], timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while not condition(self.records):
                self._changed.clear()
                await self._changed.wait()

    async def count(self, n: int, timeout: float = 20.0) -> list[KafkaRecord]:
        await self.wait_for(lambda records: len(records) >= n, timeout)
        return self.records

    def payloads(self) -> list[str]:
        return [record.payload for record in self.records]

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
