"""The message kinds that travel on the buses.

Messages are immutable values apart from their :class:`Header`: ``copy()`` gives a
message with an independent header, ``with_read_only()`` marks the header read-only
before the message is emitted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from enum import StrEnum
from random import getrandbits
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from wow_core.model.aggregate import AggregateId, NamedAggregate
from wow_core.model.header import Header

B = TypeVar("B")
S = TypeVar("S")


class TopicKind(StrEnum):
    """Which bus a message travels on; part of every topic name."""

    COMMAND = "command"
    EVENT = "event"
    STATE = "state"


_V4_CLEAR = 0xFFFFFFFFFFFF0FFF3FFFFFFFFFFFFFFF
_V4_SET = 0x00000000000040008000000000000000


def new_id() -> str:
    """A new globally unique message id: a random (version 4) UUID in hex.

    Drawn from :mod:`random` (seeded from the OS, reseeded in a forked child), which is
    ~10x cheaper than :func:`uuid.uuid4` on the hot path of every message. Ids are
    unique, not secret: never use one as a credential.
    """
    return "%032x" % (getrandbits(128) & _V4_CLEAR | _V4_SET)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Message(Protocol):
    """What every bus message offers the messaging layer."""

    topic_kind: ClassVar[TopicKind]

    @property
    def id(self) -> str: ...
    @property
    def aggregate_id(self) -> AggregateId: ...
    @property
    def header(self) -> Header: ...
    @property
    def create_time(self) -> int: ...
    @property
    def name(self) -> str: ...

    def copy(self) -> Self: ...
    def with_read_only(self) -> Self: ...


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


class _MessageOps:
    """``copy`` and ``with_read_only`` shared by the message dataclasses."""

    __slots__ = ()

    header: Header

    def copy(self) -> Self:
        """The same message with an independent, writable header."""
        # Field by field rather than dataclasses.replace, which re-runs __init__ and
        # __post_init__ (the values were checked when this message was made).
        cls = type(self)
        copied = object.__new__(cls)
        for name in _field_names(cls):
            object.__setattr__(copied, name, getattr(self, name))
        object.__setattr__(copied, "header", self.header.copy())
        return copied

    def with_read_only(self) -> Self:
        """Mark the header read-only (done before emission) and return ``self``."""
        self.header.with_read_only()
        return self

    @property
    def named_aggregate(self) -> NamedAggregate:
        return self.aggregate_id.named_aggregate  # type: ignore[attr-defined,no-any-return]


@dataclass(frozen=True, slots=True)
class CommandMessage(_MessageOps, Generic[B]):
    """A command addressed to one aggregate.

    ``aggregate_version`` is the version the sender expects the aggregate to be at
    (``None``: whatever it is). ``is_void`` commands are fire-and-forget: they can
    only be waited for until ``SENT``.
    """

    topic_kind: ClassVar[TopicKind] = TopicKind.COMMAND

    aggregate_id: AggregateId
    body: B
    name: str
    id: str = field(default_factory=new_id)
    request_id: str = ""
    header: Header = field(default_factory=Header)
    is_create: bool = False
    allow_create: bool = False
    is_void: bool = False
    aggregate_version: int | None = None
    create_time: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        if not self.request_id:
            object.__setattr__(self, "request_id", self.id)
        if self.aggregate_version is not None and self.aggregate_version < 0:
            raise ValueError("aggregate_version must be >= 0")


@dataclass(frozen=True, slots=True)
class DomainEvent(Generic[B]):
    """One fact an aggregate recorded; ``version`` is the aggregate version it created."""

    aggregate_id: AggregateId
    body: B
    name: str
    version: int
    sequence: int = 1
    is_last: bool = True
    id: str = field(default_factory=new_id)
    command_id: str = ""
    revision: str = "0.0.1"
    header: Header = field(default_factory=Header)
    create_time: int = field(default_factory=now_ms)


@dataclass(frozen=True, slots=True)
class DomainEventStream(_MessageOps):
    """The ordered events one command appended, at one aggregate ``version``."""

    topic_kind: ClassVar[TopicKind] = TopicKind.EVENT

    aggregate_id: AggregateId
    version: int
    events: tuple[DomainEvent[Any], ...]
    command_id: str
    request_id: str
    id: str = field(default_factory=new_id)
    header: Header = field(default_factory=Header)
    create_time: int = field(default_factory=now_ms)

    @property
    def name(self) -> str:
        events = self.events
        if len(events) == 1:
            return events[0].name
        return "+".join(event.name for event in events) or "empty"

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ValueError("an event stream's version starts at 1")
        if not self.events:
            raise ValueError("an event stream holds at least one event")


@dataclass(frozen=True, slots=True)
class StateEvent(_MessageOps, Generic[S]):
    """An event stream plus the aggregate state sourced at its version."""

    topic_kind: ClassVar[TopicKind] = TopicKind.STATE

    stream: DomainEventStream
    state: S
    deleted: bool = False
    id: str = field(default_factory=new_id)
    header: Header = field(default_factory=Header)
    create_time: int = field(default_factory=now_ms)

    @property
    def aggregate_id(self) -> AggregateId:
        return self.stream.aggregate_id

    @property
    def version(self) -> int:
        return self.stream.version

    @property
    def name(self) -> str:
        return self.stream.name

    @property
    def command_id(self) -> str:
        return self.stream.command_id

    @property
    def request_id(self) -> str:
        return self.stream.request_id
