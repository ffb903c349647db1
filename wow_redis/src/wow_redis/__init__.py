"""wow_redis: Redis Streams transport, Redis event store and snapshot repository.

Importing the package is cheap: each name is imported on first use, so loading its
plugin entry point (every ``wow`` process does) costs nothing until the feature is used.
"""

from __future__ import annotations

from wow_core._lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep the import of the package cheap
if TYPE_CHECKING:
    from wow_redis.event_store import EventStoreDataError, RedisEventStore, RedisSnapshotRepository
    from wow_redis.naming import RedisTopicNaming, dead_letter_stream
    from wow_redis.observer import RedisMessageBusObserver
    from wow_redis.receiver import RedisStreamReceiver
    from wow_redis.record import RedisRecord
    from wow_redis.settings import GroupStart, RedisSettings
    from wow_redis.transport import RedisStreamTransport

__version__ = "0.1.0"

_EXPORTS = {
    "EventStoreDataError": "wow_redis.event_store",
    "RedisEventStore": "wow_redis.event_store",
    "RedisSnapshotRepository": "wow_redis.event_store",
    "RedisTopicNaming": "wow_redis.naming",
    "dead_letter_stream": "wow_redis.naming",
    "RedisMessageBusObserver": "wow_redis.observer",
    "RedisStreamReceiver": "wow_redis.receiver",
    "RedisRecord": "wow_redis.record",
    "GroupStart": "wow_redis.settings",
    "RedisSettings": "wow_redis.settings",
    "RedisStreamTransport": "wow_redis.transport",
}

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

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
