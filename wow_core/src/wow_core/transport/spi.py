"""The Transport SPI (spec 000, "Transport SPI").

A transport moves strings and nothing else: ``send`` publishes a topic, a key, a
payload and a timestamp; ``open(group, topics)`` returns a :class:`TransportReceiver`
with the records, readiness, processing admission and close. Everything else (topic
names, JSON, key and topic checks, the decode-failure policy, exchanges) lives once in
:class:`~wow_core.transport.bus.TransportMessageBus`. The line is drawn here so that a
new broker is one class and its semantics can be proven by one conformance suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from wow_core.model import NamedAggregate, TopicKind


@dataclass(frozen=True, slots=True)
class TransportMessage:
    """What a transport publishes: ``key`` is the aggregate id, ``payload`` the JSON."""

    topic: str
    key: str
    payload: str
    timestamp: int


@runtime_checkable
class TransportRecord(Protocol):
    """One received record; it acknowledges itself.

    ``position`` identifies the record in its backend for logs and dead letters (a
    Kafka ``partition:offset``, a stream entry id, a JetStream sequence).
    ``delivery_count`` is 1 on first delivery when the backend knows it.
    """

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def payload(self) -> str: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def position(self) -> str: ...
    @property
    def delivery_count(self) -> int: ...

    async def ack(self) -> None:
        """Acknowledge: the record is done for this group and is not delivered again."""
        ...


@runtime_checkable
class TransportReceiver(Protocol):
    """A group member's view of some topics.

    ``ready()`` completes when a record sent after it returns cannot be missed. No
    record is yielded before ``open_processing()``. ``close()`` releases every task and
    connection; records not acknowledged by then are delivered again (to this group)
    later.
    """

    def __aiter__(self) -> AsyncIterator[TransportRecord]: ...

    async def ready(self) -> None: ...

    def open_processing(self) -> None: ...

    async def close(self) -> None: ...


class TopicNaming(Protocol):
    """How a transport names the topic of a named aggregate and message kind."""

    def topic(self, named_aggregate: NamedAggregate, kind: TopicKind) -> str: ...


class DefaultTopicNaming:
    """``<prefix><context>.<aggregate><kind_separator><kind>``, the prefix defaulting to
    ``wow.`` and the separator to ``.``.

    ``context_aliases`` replaces a context name (a renamed or shared context). A
    transport with its own layout passes its prefix and separator (the Redis transport
    names streams ``<key_prefix><context>.<aggregate>:<kind>``). Names are memoised per
    named aggregate and kind.
    """

    __slots__ = ("_memo", "context_aliases", "kind_separator", "prefix")

    def __init__(
        self,
        prefix: str = "wow.",
        context_aliases: Mapping[str, str] | None = None,
        *,
        kind_separator: str = ".",
    ) -> None:
        self.prefix = prefix
        self.context_aliases = dict(context_aliases or {})
        self.kind_separator = kind_separator
        self._memo: dict[tuple[NamedAggregate, TopicKind], str] = {}

    def topic(self, named_aggregate: NamedAggregate, kind: TopicKind) -> str:
        key = (named_aggregate, kind)
        name = self._memo.get(key)
        if name is None:
            context = self.context_aliases.get(named_aggregate.context_name, named_aggregate.context_name)
            name = self._memo[key] = (
                f"{self.prefix}{context}.{named_aggregate.aggregate_name}{self.kind_separator}{kind.value}"
            )
        return name


class DecodeFailureDefault(StrEnum):
    """What the default decode-failure policy does with a record it cannot decode."""

    DEAD_LETTER = "dead_letter"
    """Publish the raw record to ``<topic>.dlq``, then acknowledge it."""
    LEAVE_PENDING = "leave_pending"
    """Leave it unacknowledged where the backend keeps it visible (Redis pending list)."""


@runtime_checkable
class Transport(Protocol):
    """A message broker, reduced to strings.

    ``send`` returns when the backend accepted the record (what that means is the
    transport's SENT evidence: a producer ack, a stream add, a JetStream publish ack)
    and raises the backend's error otherwise; after ``close`` it raises
    :class:`~wow_core.messaging.BusClosedError`.
    """

    @property
    def name(self) -> str: ...

    @property
    def naming(self) -> TopicNaming: ...

    @property
    def decode_failure_default(self) -> DecodeFailureDefault: ...

    async def start(self) -> None:
        """Connect; idempotent. ``send`` and ``open`` may start lazily too."""
        ...

    async def send(self, message: TransportMessage) -> None: ...

    async def send_many(self, messages: Sequence[TransportMessage]) -> None:
        """Send several records; completes when every one was accepted."""
        ...

    def open(self, group: str, topics: Sequence[str]) -> TransportReceiver: ...

    async def close(self) -> None: ...
