"""The decode-failure policy SPI (``TransportDecodeFailureHandler``).

A record that is not a message (not JSON, wrong shape, unknown body type, a key or
topic that does not match the message inside) is never a crash of the consumer loop
and never a silent drop: it goes to the configured handler, stays retrievable, is
counted, and the receiver goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from wow_core.model import DecodeError
from wow_core.transport.spi import Transport, TransportRecord


class DecodeFailureAction(StrEnum):
    ACK = "ack"
    """The raw record was kept elsewhere (a dead-letter topic): acknowledge it."""
    LEAVE_PENDING = "leave_pending"
    """Leave the record unacknowledged; the backend keeps it visible."""


@dataclass(frozen=True, slots=True)
class DecodeFailure:
    """A record a receiver of ``group`` could not decode, and why."""

    group: str
    record: TransportRecord
    error: DecodeError

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def key(self) -> str:
        return self.record.key

    @property
    def position(self) -> str:
        return self.record.position


@runtime_checkable
class TransportDecodeFailureHandler(Protocol):
    """Decides what happens to an undecodable record."""

    async def handle(self, failure: DecodeFailure, transport: Transport) -> DecodeFailureAction: ...
