"""``RedisEventStore`` and ``RedisSnapshotRepository``: event sourcing on Redis.

Layout (``<p>`` is ``key_prefix``, ``{<context>.<aggregate>}`` a hash tag, so every key of
one aggregate type lives in one Redis Cluster slot):

- ``<p>es:{ctx.agg}:<len(tenant)>:<tenant>:<id>``: a list; element ``v - 1`` is the
  JSON of the stream of version ``v`` (the bus's wire form), so the length is the
  aggregate's version and a load range is one ``LRANGE``;
- ``<p>es:{ctx.agg}:requests``: a hash, request id -> where it was appended;
- ``<p>snap:{ctx.agg}:<len(tenant)>:<tenant>:<id>``: a hash with the snapshot's version
  and JSON.

``append`` is one Lua script: it refuses a request id already appended for the
aggregate type (:class:`~wow_core.eventsourcing.DuplicateRequestIdError`, naming the
original), refuses a version that is not the next one
(:class:`~wow_core.eventsourcing.EventVersionConflictError`), and otherwise pushes the
stream and records its request id, all in one server-side step. Concurrent appends,
from any number of processes, therefore have exactly one winner per version and per
request id; nothing is lost or written twice. What it does not give: durability beyond
the server's persistence settings (AOF ``appendfsync``, replication), which decide
whether an acknowledged append survives a crash of Redis itself.

Bodies are rebuilt only from the classes registered in the
:class:`~wow_core.model.MessageCodec` the runtime hands over (``use_codec``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from wow_core.eventsourcing import (
    AppendedRequest,
    DuplicateRequestIdError,
    EventVersionConflictError,
    Snapshot,
    check_range,
)
from wow_core.model import (
    AggregateId,
    BodyTypeRegistry,
    DomainEventStream,
    MessageCodec,
    NamedAggregate,
    TopicKind,
)
from wow_redis.connection import command, create_client, deadline, ping
from wow_redis.scripts import APPEND_SCRIPT, SAVE_SNAPSHOT_SCRIPT
from wow_redis.settings import SECTION, RedisSettings

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from wow_core.transport.settings import ProcessSettings


class EventStoreDataError(RuntimeError):
    """What Redis holds under an event-store key is not what this store wrote."""


def _type_tag(named: NamedAggregate) -> str:
    return "{" + f"{named.context_name}.{named.aggregate_name}" + "}"


def aggregate_key(prefix: str, kind: str, aggregate_id: AggregateId) -> str:
    """``<prefix><kind>:{ctx.agg}:<len(tenant)>:<tenant>:<id>``.

    The tenant is length-prefixed: unambiguous whatever characters tenant and id hold.
    """
    tenant = aggregate_id.tenant_id
    return (
        f"{prefix}{kind}:{_type_tag(aggregate_id.named_aggregate)}:{len(tenant)}:{tenant}:{aggregate_id.id}"
    )


class _RedisStore:
    """The client, settings and codec the two classes share."""

    def __init__(
        self,
        settings: RedisSettings | None = None,
        *,
        codec: MessageCodec | None = None,
        client: Redis | None = None,
    ) -> None:
        self.settings = settings or RedisSettings()
        self._codec = codec
        self._client = client
        self._owns_client = client is None
        self._timeout = self.settings.socket_timeout

    def use_codec(self, codec: MessageCodec) -> None:
        """Use the process's codec (the runtime calls this; see ``CodecAware``)."""
        self._codec = codec

    @property
    def codec(self) -> MessageCodec:
        if self._codec is None:
            self._codec = MessageCodec(BodyTypeRegistry())
        return self._codec

    @property
    def client(self) -> Redis:
        if self._client is None:
            self._client = create_client(self.settings)
        return self._client

    async def start(self) -> None:
        """Check the server answers (PING). The runtime calls it at start, so a Redis that
        is down stops the process at once rather than failing its first command. It
        proves the server answered then, not that it will answer later."""
        await ping(self.client, self._timeout)

    async def close(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None


class RedisEventStore(_RedisStore):
    """An :class:`~wow_core.eventsourcing.EventStore` on Redis; see the module docstring."""

    _append: AsyncScript | None = None

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> RedisEventStore:
        return cls(settings.section(SECTION, RedisSettings))

    def stream_key(self, aggregate_id: AggregateId) -> str:
        return aggregate_key(self.settings.key_prefix, "es", aggregate_id)

    def requests_key(self, named: NamedAggregate) -> str:
        return f"{self.settings.key_prefix}es:{_type_tag(named)}:requests"

    async def append(self, stream: DomainEventStream) -> None:
        aggregate_id = stream.aggregate_id
        stream.header.with_read_only()
        payload = self.codec.encode(stream)
        origin = json.dumps(
            {"tenant": aggregate_id.tenant_id, "id": aggregate_id.id, "version": stream.version},
            ensure_ascii=False,
        )
        if self._append is None:
            self._append = self.client.register_script(APPEND_SCRIPT)
        async with deadline(self._timeout, "event store append"):
            result = await self._append(
                keys=[self.stream_key(aggregate_id), self.requests_key(aggregate_id.named_aggregate)],
                args=[stream.request_id, stream.version, payload, origin],
            )
        status = _text(result[0])
        if status == "ok":
            return
        if status == "duplicate":
            original = self._origin(aggregate_id.named_aggregate, stream.request_id, _text(result[1]))
            raise DuplicateRequestIdError(stream.request_id, original.aggregate_id, original.version)
        if status == "conflict":
            raise EventVersionConflictError(aggregate_id, stream.version - 1, int(result[1]))
        raise EventStoreDataError(f"unexpected append result {result!r}")

    async def load(
        self, aggregate_id: AggregateId, head_version: int = 1, tail_version: int | None = None
    ) -> list[DomainEventStream]:
        check_range(head_version, tail_version)
        end = -1 if tail_version is None else tail_version - 1
        raw = await command(
            self.client, "LRANGE", self.stream_key(aggregate_id), head_version - 1, end, timeout=self._timeout
        )
        streams: list[DomainEventStream] = []
        for offset, payload in enumerate(raw):
            stream = self.codec.decode(payload, TopicKind.EVENT)
            if not isinstance(stream, DomainEventStream) or stream.version != head_version + offset:
                raise EventStoreDataError(
                    f"{self.stream_key(aggregate_id)}[{head_version - 1 + offset}] is not the stream "
                    f"of version {head_version + offset}"
                )
            stream.header.with_read_only()
            streams.append(stream)
        return streams

    async def last_version(self, aggregate_id: AggregateId) -> int:
        return int(await command(self.client, "LLEN", self.stream_key(aggregate_id), timeout=self._timeout))

    async def find_request(self, named_aggregate: NamedAggregate, request_id: str) -> AppendedRequest | None:
        raw = await command(
            self.client, "HGET", self.requests_key(named_aggregate), request_id, timeout=self._timeout
        )
        if raw is None:
            return None
        return self._origin(named_aggregate, request_id, _text(raw))

    @staticmethod
    def _origin(named: NamedAggregate, request_id: str, raw: str) -> AppendedRequest:
        try:
            data = json.loads(raw)
            aggregate_id = AggregateId(named, str(data["id"]), str(data["tenant"]))
            return AppendedRequest(request_id, aggregate_id, int(data["version"]))
        except (ValueError, KeyError, TypeError) as error:
            raise EventStoreDataError(f"request {request_id!r} of {named} is recorded as {raw!r}") from error


class RedisSnapshotRepository(_RedisStore):
    """A :class:`~wow_core.eventsourcing.SnapshotRepository` on Redis.

    ``save`` compares versions inside one Lua script, so a late, older snapshot never
    replaces a newer one, whichever process writes it.
    """

    _save: AsyncScript | None = None

    @classmethod
    def from_settings(cls, settings: ProcessSettings) -> RedisSnapshotRepository:
        return cls(settings.section(SECTION, RedisSettings))

    def snapshot_key(self, aggregate_id: AggregateId) -> str:
        return aggregate_key(self.settings.key_prefix, "snap", aggregate_id)

    async def load(self, aggregate_id: AggregateId) -> Snapshot | None:
        raw = await command(
            self.client, "HGET", self.snapshot_key(aggregate_id), "data", timeout=self._timeout
        )
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            state = self.codec.registry.load(str(data["state_type"]), data["state"])
            return Snapshot(
                aggregate_id=aggregate_id,
                version=int(data["version"]),
                state=state,
                deleted=bool(data["deleted"]),
                snapshot_time=int(data["snapshot_time"]),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise EventStoreDataError(
                f"{self.snapshot_key(aggregate_id)} holds no snapshot: {error}"
            ) from error

    async def save(self, snapshot: Snapshot) -> bool:
        state_type, state = self.codec.registry.dump(snapshot.state)
        data = json.dumps(
            {
                "version": snapshot.version,
                "state_type": state_type,
                "state": state,
                "deleted": snapshot.deleted,
                "snapshot_time": snapshot.snapshot_time,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
        if self._save is None:
            self._save = self.client.register_script(SAVE_SNAPSHOT_SCRIPT)
        async with deadline(self._timeout, "snapshot save"):
            kept = await self._save(
                keys=[self.snapshot_key(snapshot.aggregate_id)], args=[snapshot.version, data]
            )
        return bool(kept)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
