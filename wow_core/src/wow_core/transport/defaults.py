"""What :class:`~wow_core.transport.bus.TransportMessageBus` decides for a transport, and
what a transport may ask of it.

Topic names and the decode-failure policy are the bus's, not the SPI's: the bus names
every topic through a :class:`TopicNaming` and sends every undecodable record to its
decode-failure handler. A transport whose backend asks for something else than the
bus's defaults (Redis names streams ``<context>.<aggregate>:<kind>`` and keeps an
undecodable entry pending where it stays visible) says so through the optional
:class:`TransportDefaults`: a ``naming`` and a ``decode_failure_default`` attribute.
:class:`~wow_core.transport.base.TransportBase` provides both. A transport that says
nothing gets :func:`naming_of`'s default naming and ``DEAD_LETTER``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol, runtime_checkable

from wow_core.model import NamedAggregate, TopicKind


class TopicNaming(Protocol):
    """How the bus names the topic of a named aggregate and message kind."""

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
class TransportDefaults(Protocol):
    """Optional: what a transport asks of the bus over it.

    Not part of the :class:`~wow_core.transport.spi.Transport` SPI; read through
    :func:`naming_of` and :func:`decode_failure_default_of`, which fall back to the bus's
    own defaults when a transport does not have these attributes.
    """

    @property
    def naming(self) -> TopicNaming: ...

    @property
    def decode_failure_default(self) -> DecodeFailureDefault: ...


def naming_of(transport: object, default: TopicNaming | None = None) -> TopicNaming:
    """The topic naming ``transport`` asks for, else ``default``, else ``DefaultTopicNaming()``.

    The runtime passes a ``default`` built from ``WOW_MESSAGING__TOPIC_PREFIX`` and
    ``WOW_MESSAGING__CONTEXT_ALIASES``.
    """
    naming = getattr(transport, "naming", None)
    if naming is not None:
        named: TopicNaming = naming
        return named
    return default if default is not None else DefaultTopicNaming()


def decode_failure_default_of(transport: object) -> DecodeFailureDefault:
    """The decode-failure default ``transport`` asks for; ``DEAD_LETTER`` when it says none."""
    policy = getattr(transport, "decode_failure_default", None)
    return policy if isinstance(policy, DecodeFailureDefault) else DecodeFailureDefault.DEAD_LETTER
