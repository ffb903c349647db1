"""wow_redis: Redis Streams transport, Redis event store and snapshot repository."""

from wow_redis.event_store import EventStoreDataError, RedisEventStore, RedisSnapshotRepository
from wow_redis.naming import RedisTopicNaming, dead_letter_stream
from wow_redis.observer import RedisMessageBusObserver
from wow_redis.receiver import RedisStreamReceiver
from wow_redis.record import RedisRecord
from wow_redis.settings import GroupStart, RedisSettings
from wow_redis.transport import RedisStreamTransport

__version__ = "0.1.0"

__all__ = [
    "EventStoreDataError",
    "RedisEventStore",
    "RedisSnapshotRepository",
    "GroupStart",
    "RedisMessageBusObserver",
    "RedisRecord",
    "RedisSettings",
    "RedisStreamReceiver",
    "RedisStreamTransport",
    "RedisTopicNaming",
    "dead_letter_stream",
]
