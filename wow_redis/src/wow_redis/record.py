"""``RedisRecord``: one stream entry delivered to a :class:`~wow_redis.receiver.RedisStreamReceiver`.

An entry's fields: ``msg`` (the payload, UTF-8), ``key`` (the aggregate id) and ``ts``
(the sender's timestamp, milliseconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wow_redis.receiver import RedisStreamReceiver

MSG_FIELD = b"msg"
KEY_FIELD = b"key"
TIMESTAMP_FIELD = b"ts"


def entry_timestamp(entry_id: str) -> int:
    """The milliseconds part of a stream entry id: when the server added it."""
    head, _, _ = entry_id.partition("-")
    try:
        return int(head)
    except ValueError:
        return 0


class RedisRecord:
    """One stream entry delivered to this consumer; ``ack()`` is an ``XACK``.

    ``timestamp`` is the sender's (the ``ts`` field), or when the server added the entry
    (the id's milliseconds) for an entry written without one. ``position`` is
    ``<stream>/<entry id>``. ``release()`` (the consumer did not finish it) has this
    receiver deliver it again after a delay growing with its delivery count.
    """

    __slots__ = ("_receiver", "delivery_count", "entry_id", "key", "payload", "timestamp", "topic")

    def __init__(
        self,
        receiver: RedisStreamReceiver,
        topic: str,
        entry_id: str,
        key: str,
        payload: str,
        delivery_count: int,
        timestamp: int,
    ) -> None:
        self._receiver = receiver
        self.topic = topic
        self.entry_id = entry_id
        self.key = key
        self.payload = payload
        self.timestamp = timestamp
        self.delivery_count = delivery_count

    @property
    def position(self) -> str:
        return f"{self.topic}/{self.entry_id}"

    async def ack(self) -> None:
        receiver = self._receiver
        if receiver.fast_ack:  # the common case, without another coroutine
            receiver.ack_queued(self.topic, self.entry_id)
        else:
            await receiver.acknowledge(self.topic, self.entry_id)

    def release(self) -> None:
        """Hand the entry back: delivered again by this receiver after
        ``release_delay_for(delivery_count)`` (:class:`~wow_core.transport.ReleasingRecord`);
        an ``ack()`` or another delivery (recovery) meanwhile cancels it."""
        self._receiver.released(self.topic, self.entry_id, self.delivery_count)

    def __repr__(self) -> str:
        return f"RedisRecord({self.position} key={self.key!r} deliveries={self.delivery_count})"
