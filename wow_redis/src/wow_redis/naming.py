"""Stream names of the Redis transport: ``<context>.<aggregate>:<kind>``.

This keeps the reference implementation's Redis naming (``bank.account:command``), so
streams written by 9.2-style producers are read as they are. A context alias replaces
the context name; ``key_prefix`` (empty by default) isolates deployments that share one
server. Names are memoised per named aggregate and kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from wow_core.model import NamedAggregate, TopicKind

DEAD_LETTER_SUFFIX = ".dlq"


class RedisTopicNaming:
    """``<key_prefix><context-or-alias>.<aggregate>:<command|event|state>``."""

    __slots__ = ("_memo", "context_aliases", "key_prefix")

    def __init__(self, key_prefix: str = "", context_aliases: Mapping[str, str] | None = None) -> None:
        self.key_prefix = key_prefix
        self.context_aliases = dict(context_aliases or {})
        self._memo: dict[tuple[NamedAggregate, TopicKind], str] = {}

    def topic(self, named_aggregate: NamedAggregate, kind: TopicKind) -> str:
        key = (named_aggregate, kind)
        name = self._memo.get(key)
        if name is None:
            context = self.context_aliases.get(named_aggregate.context_name, named_aggregate.context_name)
            name = f"{self.key_prefix}{context}.{named_aggregate.aggregate_name}:{kind.value}"
            self._memo[key] = name
        return name


def dead_letter_stream(topic: str) -> str:
    """Where poison and dead-lettered entries of ``topic`` go."""
    return topic + DEAD_LETTER_SUFFIX
