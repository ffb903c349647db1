"""``KafkaRecord``: a record a :class:`~wow_kafka.receiver.KafkaTransportReceiver` hands out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wow_kafka.offsets import PartitionOffsets
    from wow_kafka.receiver import KafkaTransportReceiver


class KafkaRecord:
    """A received Kafka record; ``ack()`` marks its offset for the next commit.

    ``release()`` (the SPI's :class:`~wow_core.transport.spi.ReleasingRecord`) hands an
    unfinished record back: its receiver delivers it again after
    ``WOW_KAFKA__RELEASE_DELAY_MS``, doubled per delivery (see
    :meth:`~wow_kafka.receiver.KafkaTransportReceiver.released`). ``delivery_count``
    counts this member's deliveries of the record in the current assignment: Kafka
    itself counts none, so a record delivered again after a rebalance or a restart
    starts at 1.

    A record read in no group (:class:`~wow_kafka.log_reader.KafkaLogReader`) has no
    receiver and no offsets: its ``ack()`` and ``release()`` do nothing, there is no
    group to commit to.
    """

    __slots__ = (
        "_offsets",
        "_raw",
        "_receiver",
        "delivery_count",
        "key",
        "offset",
        "partition",
        "payload",
        "timestamp",
        "topic",
    )

    def __init__(
        self,
        receiver: KafkaTransportReceiver | None,
        offsets: PartitionOffsets | None,
        record: Any,
        delivery_count: int = 1,
    ) -> None:
        self._receiver = receiver
        self._offsets = offsets
        self._raw = record
        self.delivery_count = delivery_count
        self.topic: str = record.topic
        self.partition: int = record.partition
        self.offset: int = record.offset
        key, value = record.key, record.value
        # surrogateescape keeps undecodable bytes: a dead letter carries the original bytes
        self.key = "" if key is None else key.decode("utf-8", "surrogateescape")
        self.payload = "" if value is None else value.decode("utf-8", "surrogateescape")
        self.timestamp: int = record.timestamp

    @property
    def position(self) -> str:
        return f"{self.partition}:{self.offset}"

    async def ack(self) -> None:
        offsets = self._offsets
        if offsets is None:
            return
        receiver = self._receiver
        if offsets.ack(self.offset) and receiver is not None:
            receiver._acked()
        if receiver is not None and receiver._releases:
            receiver._cancel_release(self)

    def release(self) -> None:
        """Deliver this unfinished record again to this member soon; returns at once."""
        receiver = self._receiver
        if receiver is not None and self._offsets is not None:
            receiver.released(self)

    def __repr__(self) -> str:
        return f"KafkaRecord({self.topic}[{self.position}] key={self.key!r})"
