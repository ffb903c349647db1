"""Test doubles of the application tests: a transport that records or fails sends, a record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wow_core.transport import InMemoryTransport
from wow_core.transport.spi import TransportMessage, TransportReceiver


class RecordingTransport:
    """Keeps what is sent; ``fail_with`` makes ``send`` raise it (after keeping nothing)."""

    name = "recording"

    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.sent: list[TransportMessage] = []
        self.fail_with = fail_with
        self._inner = InMemoryTransport()

    async def start(self) -> None:
        return None

    async def send(self, message: TransportMessage) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append(message)

    def open(self, group: str, topics: Sequence[str]) -> TransportReceiver:
        return self._inner.open(group, topics)

    async def close(self) -> None:
        return None


@dataclass
class FakeRecord:
    """A received record that counts its acknowledgements."""

    payload: str
    topic: str = "wow.application.payments"
    key: str = "k"
    timestamp: int = 0
    position: str = "0"
    delivery_count: int = 1
    acks: int = 0

    async def ack(self) -> None:
        self.acks += 1
