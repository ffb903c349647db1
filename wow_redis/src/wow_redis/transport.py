"""``RedisStreamTransport``: the Transport SPI over Redis Streams (spec 000, "Redis").

- ``send`` XADDs the message JSON to the topic's stream under the field ``msg`` (and
  the aggregate id under ``key``), with ``MAXLEN ~ maxlen`` retention. It completes when
  the stream add completed: SENT proves the entry is in the stream, not that any
  consumer group read, processed or acknowledged it.
- ``open(group, topics)`` returns a :class:`~wow_redis.receiver.RedisStreamReceiver`:
  one consumer of the group (created or reused per stream), reading new entries,
  recovering idle ones, acknowledging with ``XACK``.
- Topics are named ``<context>.<aggregate>:<command|event|state>``
  (:class:`~wow_redis.naming.RedisTopicNaming`), application-command topics
  ``<topic_prefix>application.<name>``; ``WOW_REDIS__KEY_PREFIX`` comes before both.
- ``decode_failure_default`` is ``LEAVE_PENDING``: an undecodable entry stays in the
  group's pending list, visible with ``XPENDING``, reported through
  :class:`~wow_redis.observer.RedisMessageBusObserver`; recovery brings it back and,
  past ``max_deliveries``, moves it to ``<stream>.dlq``.

The transport owns one redis-py client (one connection pool) created on first use in
the running event loop; ``close()`` closes every receiver, waits for queued sends and
closes the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from redis.asyncio import Redis

from wow_core.metrics import Metrics
from wow_core.transport import (
    DecodeFailure,
    DecodeFailureAction,
    DecodeFailureDefault,
    TopicNaming,
    TransportBase,
    TransportMessage,
)
from wow_redis.connection import create_client, ping
from wow_redis.naming import RedisTopicNaming, application_stream
from wow_redis.observer import RedisMessageBusObserver
from wow_redis.receiver import RedisStreamReceiver
from wow_redis.record import RedisRecord
from wow_redis.sender import StreamWriter
from wow_redis.settings import SECTION, RedisSettings

if TYPE_CHECKING:
    from wow_core.transport.settings import ProcessSettings


class RedisStreamTransport(TransportBase[RedisStreamReceiver]):
    """Redis Streams as a :class:`~wow_core.transport.Transport`; see the module docstring."""

    label = "Redis"

    def __init__(
        self,
        settings: RedisSettings | None = None,
        *,
        naming: TopicNaming | None = None,
        observer: RedisMessageBusObserver | None = None,
        metrics: Metrics | None = None,
        client: Redis | None = None,
    ) -> None:
        self.settings = settings or RedisSettings()
        super().__init__(
            naming or RedisTopicNaming(self.settings.key_prefix), DecodeFailureDefault.LEAVE_PENDING
        )
        self.observer = observer or RedisMessageBusObserver(metrics)
        self.consumer_name = self.settings.resolved_consumer_name()
        self._client = client
        self._owns_client = client is None
        self._writer: StreamWriter | None = None
        self._slots: dict[str, set[int]] = {}

    @classmethod
    def from_settings(
        cls, settings: ProcessSettings, *, metrics: Metrics | None = None
    ) -> RedisStreamTransport:
        """The transport of the runtime: ``WOW_REDIS__*`` plus the messaging context aliases."""
        redis_settings = settings.section(SECTION, RedisSettings)
        naming = RedisTopicNaming(redis_settings.key_prefix, settings.messaging.context_aliases)
        return cls(redis_settings, naming=naming, metrics=metrics)

    # -- the Transport protocol -------------------------------------------------------

    @property
    def name(self) -> str:
        return "redis"

    @property
    def client(self) -> Redis:
        """The redis-py client (created on first use)."""
        if self._client is None:
            self._client = create_client(self.settings)
        return self._client

    async def start(self) -> None:
        """Check the server answers (PING); idempotent."""
        self._check_open()
        await ping(self.client, self.settings.socket_timeout)

    async def send(self, message: TransportMessage) -> None:
        self._check_open()
        await self._stream_writer().add(message)

    async def send_many(self, messages: Sequence[TransportMessage]) -> None:
        self._check_open()
        await self._stream_writer().add_many(messages)

    def open(self, group: str, topics: Sequence[str]) -> RedisStreamReceiver:
        """A new consumer of ``group``: ``<consumer_name>`` for the first open receiver of
        the group in this transport, ``<consumer_name>-<n>`` for further concurrent ones.

        A closed receiver frees its slot, so a receiver opened again after a close reads
        the pending entries its predecessor left behind.
        """
        self._check_open()
        if not group:
            raise ValueError("a consumer group needs a name")
        slots = self._slots.setdefault(group, set())
        slot = next(n for n in range(len(slots) + 1) if n not in slots)
        slots.add(slot)
        consumer = self.consumer_name if slot == 0 else f"{self.consumer_name}-{slot}"

        def release(receiver: RedisStreamReceiver) -> None:
            self.receiver_closed(receiver)
            slots.discard(slot)

        receiver = RedisStreamReceiver(
            client=self.client,
            settings=self.settings,
            group=group,
            topics=topics,
            consumer=consumer,
            observer=self.observer,
            create_groups=self._stream_writer().create_groups,
            on_close=release,
        )
        return self._track(receiver)

    async def close(self) -> None:
        """Close every receiver, wait for queued sends, close the connections; idempotent."""
        if not self._mark_closed():
            return
        receivers = self._open_receivers()
        if receivers:
            await asyncio.gather(*(r.close() for r in receivers), return_exceptions=True)
        if self._writer is not None:
            await self._writer.close(self.settings.socket_timeout)
        if self._client is not None and self._owns_client:
            await self._client.aclose()

    # -- ApplicationTopicNaming ------------------------------------------------------

    def application_topic(self, name: str, topic_prefix: str) -> str:
        """The stream of application transport ``name``, under ``WOW_REDIS__KEY_PREFIX``
        like every other stream (:func:`~wow_redis.naming.application_stream`)."""
        return application_stream(self.settings.key_prefix, topic_prefix, name)

    # -- DecodeFailureObserver -------------------------------------------------------

    def decode_failure_handled(self, failure: DecodeFailure, action: DecodeFailureAction) -> None:
        """Report an entry the bus could not decode and left pending (the default policy).

        The entry stays in the group's pending list (``XPENDING``); recovery delivers it
        again and, past ``max_deliveries``, moves it to ``<stream>.dlq``.
        """
        if action is DecodeFailureAction.LEAVE_PENDING:
            record = failure.record
            entry_id = record.entry_id if isinstance(record, RedisRecord) else record.position
            self.observer.undecodable(failure.topic, failure.group, entry_id, str(failure.error))

    # -- helpers ----------------------------------------------------------------------

    def _stream_writer(self) -> StreamWriter:
        writer = self._writer
        if writer is None:
            writer = self._writer = StreamWriter(self.client, self.settings, self.observer)
        return writer

    def __repr__(self) -> str:
        return f"RedisStreamTransport(consumer={self.consumer_name!r}, settings={self.settings!r})"
