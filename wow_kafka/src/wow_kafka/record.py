"""``KafkaRecord``: a record a :class:`~wow_kafka.receiver.KafkaTransportReceiver` hands out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wow_kafka.offsets import PartitionOffsets
    from wow_kafka.receiver import KafkaTransportReceiver


class KafkaRecord:
    """A received Kafka record; ``ack()`` marks its offset for the next commit.

    A record read in no group (:class:`~wow_kafka.log_reader.KafkaLogReader`) has no
    receiver and no offsets: its ``ack()`` does nothing, there is no group to commit to.
    """

    __slots__ = ("_offsets", "_receiver", "key", "offset", "partition", "payload", "timestamp", "topic")

    def __init__(
        self, receiver: KafkaTransportReceiver | None, offsets: PartitionOffsets | None, record: Any
    ) -> None:
        self._receiver = receiver
        self._offsets = offsets
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

    @property
    def delivery_count(self) -> int:
        return 1  # Kafka does not count deliveries

    async def ack(self) -> None:
        offsets = self._offsets
        if offsets is not None and offsets.ack(self.offset) and self._receiver is not None:
            self._receiver._acked()

    def __repr__(self) -> str:
        return f"KafkaRecord({self.topic}[{self.position}] key={self.key!r})"
