"""The read model and the scheduler lease on Redis (``WOW_COMPENSATION__STORE=redis``).

Keys, under the ``WOW_REDIS__KEY_PREFIX``:

- ``compensation:records``: hash, record id -> the state as JSON;
- ``compensation:versions``: hash, record id -> its aggregate version (a save keeps only
  a newer version, decided inside one script);
- ``compensation:event:<event id>``: set of the record ids of one event;
- ``compensation:due``: sorted set, record id scored by when the scheduler may take it;
- ``compensation:lease:<name>``: the holder of a lease, with its expiry (``SET NX PX``).

The lists read the whole records hash and filter in the process: fit for the volumes
an operator looks at (thousands), not for millions of records.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from wow_compensation.store import ExecutionRecord, decode_state, encode_state
from wow_core.transport.settings import ProcessSettings

_SAVE = """
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held and tonumber(held) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
redis.call('SADD', KEYS[3], ARGV[1])
if ARGV[4] == '' then redis.call('ZREM', KEYS[4], ARGV[1])
else redis.call('ZADD', KEYS[4], tonumber(ARGV[4]), ARGV[1]) end
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_RENEW = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not held then return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0 end
return 0
"""


class RedisCompensationStore:
    """A :class:`~wow_compensation.store.CompensationStore` on Redis; see the module doc."""

    def __init__(self, url: str, key_prefix: str = "", *, client: Redis | None = None) -> None:
        self.prefix = f"{key_prefix}compensation:"
        self._client = client
        self._owns_client = client is None
        self._url = url
        self._save: Any = None
        self._release: Any = None
        self._renew: Any = None

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> RedisCompensationStore:
        from wow_redis.settings import SECTION, RedisSettings

        redis = settings.section(SECTION, RedisSettings)
        return cls(redis.url, redis.key_prefix)

    @property
    def client(self) -> Redis:
        if self._client is None:
            self._client = Redis.from_url(self._url)
        return self._client

    def _key(self, name: str) -> str:
        return self.prefix + name

    async def save(self, record: ExecutionRecord) -> bool:
        if self._save is None:
            self._save = self.client.register_script(_SAVE)
        event_id = record.state.event.event_id if record.state.event else ""
        due = record.due_at()
        kept = await self._save(
            keys=[
                self._key("records"),
                self._key("versions"),
                self._key(f"event:{event_id}"),
                self._key("due"),
                self._key("updated"),
            ],
            args=[
                record.id,
                record.version,
                encode_state(record.state),
                "" if due is None else due,
                record.updated_at,
            ],
        )
        return bool(kept)

    def _record(self, record_id: str, data: Any, version: Any, updated: Any) -> ExecutionRecord:
        return ExecutionRecord(decode_state(data), int(version or 0), int(updated or 0))

    async def get(self, record_id: str) -> ExecutionRecord | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self._key("records"), record_id)
        pipe.hget(self._key("versions"), record_id)
        pipe.hget(self._key("updated"), record_id)
        data, version, updated = await pipe.execute()
        return None if data is None else self._record(record_id, data, version, updated)

    async def _many(self, ids: list[str]) -> list[ExecutionRecord]:
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self._key("records"), ids)
        pipe.hmget(self._key("versions"), ids)
        pipe.hmget(self._key("updated"), ids)
        datas, versions, updated = await pipe.execute()
        return [
            self._record(record_id, data, version, at)
            for record_id, data, version, at in zip(ids, datas, versions, updated, strict=True)
            if data is not None
        ]

    async def by_event_id(self, event_id: str) -> list[ExecutionRecord]:
        ids = sorted(_text(member) for member in await self.client.smembers(self._key(f"event:{event_id}")))
        return await self._many(ids)

    async def records(self) -> list[ExecutionRecord]:
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self._key("records"))
        pipe.hgetall(self._key("versions"))
        pipe.hgetall(self._key("updated"))
        datas, versions, updated = await pipe.execute()
        return [
            self._record(_text(key), data, versions.get(key), updated.get(key)) for key, data in datas.items()
        ]

    async def due(self, now: int, limit: int) -> list[ExecutionRecord]:
        ids = await self.client.zrangebyscore(self._key("due"), "-inf", now, start=0, num=limit)
        return await self._many([_text(member) for member in ids])

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        if self._renew is None:
            self._renew = self.client.register_script(_RENEW)
        held = await self._renew(keys=[self._key(f"lease:{name}")], args=[holder, max(1, int(ttl * 1000))])
        return bool(held)

    async def release_lease(self, name: str, holder: str) -> None:
        if self._release is None:
            self._release = self.client.register_script(_RELEASE)
        await self._release(keys=[self._key(f"lease:{name}")], args=[holder])

    async def close(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
