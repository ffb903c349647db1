"""Stream names of the Redis transport: ``<context>.<aggregate>:<kind>``.

This keeps the reference implementation's Redis naming (``bank.account:command``), so
streams written by 9.2-style producers are read as they are. A context alias replaces
the context name; ``key_prefix`` (empty by default) isolates deployments that share one
server. Names are memoised per named aggregate and kind.

The stream of a named transport of application commands is
``<key_prefix><topic_prefix>application.<name>`` (:func:`application_stream`): the key
prefix before it, as before every other stream and key; with the default empty key
prefix the name is the core's ``<topic_prefix>application.<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping

from wow_core.transport import DefaultTopicNaming

DEAD_LETTER_SUFFIX = ".dlq"


class RedisTopicNaming(DefaultTopicNaming):
    """``<key_prefix><context-or-alias>.<aggregate>:<command|event|state>``: the core's
    :class:`~wow_core.transport.DefaultTopicNaming` with ``:`` before the kind."""

    __slots__ = ()

    def __init__(self, key_prefix: str = "", context_aliases: Mapping[str, str] | None = None) -> None:
        super().__init__(key_prefix, context_aliases, kind_separator=":")

    @property
    def key_prefix(self) -> str:
        """The prefix of every stream name (``WOW_REDIS__KEY_PREFIX``)."""
        return self.prefix


def application_stream(key_prefix: str, topic_prefix: str, name: str) -> str:
    """The stream of the application transport ``name``: ``<key_prefix><topic_prefix>application.<name>``."""
    return f"{key_prefix}{topic_prefix}application.{name}"


def dead_letter_stream(topic: str) -> str:
    """Where poison and dead-lettered entries of ``topic`` go."""
    return topic + DEAD_LETTER_SUFFIX
