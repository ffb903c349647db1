"""``NatsRecord``: one JetStream message as a :class:`~wow_core.transport.TransportRecord`."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote, unquote

from nats.aio.msg import Msg

KEY_HEADER = "Wow-Key"
"""The record key (the aggregate id) travels as a header, the payload stays the JSON."""
ENCODED_KEY_HEADER = "Wow-Key-Encoded"
"""A key that a header cannot carry as it is (spaces at its ends, control characters such
as CR/LF that would end the header), percent-encoded."""
TIMESTAMP_HEADER = "Wow-Timestamp"
"""The sender's timestamp (epoch milliseconds)."""


def key_headers(key: str) -> dict[str, str]:
    """The header that carries ``key`` unchanged through NATS."""
    if key.isprintable() and key == key.strip():
        return {KEY_HEADER: key}
    return {ENCODED_KEY_HEADER: quote(key, safe="")}


def key_of(headers: dict[str, str]) -> str:
    """The key of a record's headers; empty when it has none (not sent by wow-py)."""
    encoded = headers.get(ENCODED_KEY_HEADER)
    if encoded is not None:
        return unquote(encoded)
    return headers.get(KEY_HEADER, "")


class NatsRecord:
    """A delivered JetStream message of one group's durable consumer.

    ``position`` is ``<stream>:<stream sequence>``; ``delivery_count`` is JetStream's
    ``num_delivered`` (1 on first delivery). :meth:`ack` acknowledges the message for its
    group: JetStream does not deliver it to that group again. The ack is a plain publish
    (not a confirmed double-ack), so an ack lost with the connection means the record
    is delivered again after the ack wait: at least once, never lost.
    """

    __slots__ = (
        "_done",
        "_msg",
        "delivery_count",
        "key",
        "on_settle",
        "payload",
        "position",
        "sequence",
        "timestamp",
        "topic",
    )

    def __init__(
        self,
        msg: Msg,
        *,
        topic: str,
        key: str,
        payload: str,
        timestamp: int,
        position: str,
        delivery_count: int,
        sequence: int = 0,
    ) -> None:
        self._msg = msg
        self._done = False
        self.on_settle: Callable[[NatsRecord], None] | None = None
        self.sequence = sequence
        """The stream sequence."""
        self.topic = topic
        self.key = key
        self.payload = payload
        self.timestamp = timestamp
        self.position = position
        self.delivery_count = delivery_count

    @property
    def settled(self) -> bool:
        """True once acknowledged, negatively acknowledged or terminated."""
        return self._done

    async def ack(self) -> None:
        """Acknowledge; idempotent. After the receiver closed (and handed it back) a no-op."""
        if self._settle():
            await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        """Ask for redelivery now (or after ``delay`` seconds) instead of after the ack wait."""
        if self._settle():
            await self._msg.nak(delay)

    async def in_progress(self) -> None:
        """Restart the ack wait of a record whose processing takes long."""
        if not self._done:
            await self._msg.in_progress()

    async def term(self) -> None:
        """Tell JetStream never to deliver this record to this group again (not an ack)."""
        if self._settle():
            await self._msg.term()

    def _settle(self) -> bool:
        if self._done:
            return False
        self._done = True
        if self.on_settle is not None:
            self.on_settle(self)
        return True

    def __repr__(self) -> str:
        return f"NatsRecord({self.topic} key={self.key!r} at {self.position} #{self.delivery_count})"
