"""PigeonTransport: records fly between transports of the same loft, in one process.

What it guarantees: a record sent after a receiver's ``ready()`` returned reaches that
receiver's group, in send order. What it does not: records survive nothing (no
persistence, no redelivery), and a group opened after a send never sees that record.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from pydantic import Field, SecretStr

from wow_core.spi import SettingsSection, TransportMessage, TransportReceiver, TransportRecord


class PigeonSettings(SettingsSection):
    """``WOW_PIGEON__*``: the settings section this plugin contributes (frozen, bounded,
    unknown variables refused)."""

    loft: str = Field("home", description="Transports of the same loft exchange records.")
    ring_code: SecretStr = Field(SecretStr(""), description="Leg-ring code; a secret, so masked.")


@dataclass(frozen=True, slots=True)
class PigeonRecord:
    topic: str
    key: str
    payload: str
    timestamp: int
    position: str
    delivery_count: int = 1

    async def ack(self) -> None:
        return None  # nothing is kept, so nothing to release


class _Loft:
    def __init__(self) -> None:
        self.groups: dict[str, tuple[frozenset[str], asyncio.Queue[PigeonRecord | None]]] = {}
        self.sequence = itertools.count(1)


_LOFTS: dict[str, _Loft] = {}


class PigeonReceiver:
    def __init__(self, loft: _Loft, group: str, topics: Sequence[str]) -> None:
        self._queue: asyncio.Queue[PigeonRecord | None] = asyncio.Queue()
        loft.groups[group] = (frozenset(topics), self._queue)
        self._loft, self._group = loft, group
        self._processing = asyncio.Event()

    async def ready(self) -> None:
        return None  # registered in the loft at open(): nothing sent afterwards is missed

    def open_processing(self) -> None:
        self._processing.set()

    def __aiter__(self) -> AsyncIterator[TransportRecord]:
        return self._records()

    async def _records(self) -> AsyncIterator[TransportRecord]:
        await self._processing.wait()
        while (record := await self._queue.get()) is not None:
            yield record

    async def close(self) -> None:
        self._loft.groups.pop(self._group, None)
        self._queue.put_nowait(None)


class PigeonTransport:
    """The SPI's five members and nothing else: the bus names the topics (from
    ``WOW_MESSAGING__TOPIC_PREFIX``) and dead-letters undecodable records."""

    def __init__(self, settings: PigeonSettings) -> None:
        self.settings = settings
        self._loft = _LOFTS.setdefault(settings.loft, _Loft())

    @property
    def name(self) -> str:
        return "carrier_pigeon"

    async def start(self) -> None:
        return None

    async def send(self, message: TransportMessage) -> None:
        position = str(next(self._loft.sequence))
        for topics, queue in self._loft.groups.values():
            if message.topic in topics:
                queue.put_nowait(
                    PigeonRecord(message.topic, message.key, message.payload, message.timestamp, position)
                )

    def open(self, group: str, topics: Sequence[str]) -> TransportReceiver:
        return PigeonReceiver(self._loft, group, topics)

    async def close(self) -> None:
        return None
