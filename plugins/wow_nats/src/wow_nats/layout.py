"""Where a topic lives in JetStream: its subject, its stream and its consumers' names.

- **Subject**: the topic name itself (``wow.orders.order.command``); topic names are
  dot-separated like subjects, so a subject per topic needs no translation. A topic
  must be a valid literal subject: printable ASCII without spaces, ``*`` or ``>``, no
  empty token.
- **Stream**: one per bounded context. The *base* of a topic is the topic prefix plus
  its first token after it (``wow.orders``); a topic outside the prefix has its first
  token as base. The stream ``<stream_prefix><base with '.' -> '_'>`` (``wow_orders``)
  captures ``<base>`` and ``<base>.>``: every topic of the context and its dead-letter
  subject ``<topic>.dlq``. The subjects are a function of the base alone, so every
  process computes the same stream configuration and concurrent creators never fight.
  The stream prefix is not part of the subjects: two applications on one server are
  kept apart by their topic prefixes (a subject belongs to one stream only).
- **Consumer**: one durable pull consumer per group and topic, filtered on the topic's
  subject, named ``<group>__<topic>__<hash>`` (unsafe characters replaced, the hash of
  the exact group and topic keeps two names that sanitise alike apart).
"""

from __future__ import annotations

import hashlib
import re

DEAD_LETTER_SUFFIX = ".dlq"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_READABLE_MAX = 48


class InvalidTopicError(ValueError):
    """A topic name that cannot be a JetStream subject."""


def check_topic(topic: str) -> str:
    """Return ``topic`` if it is a valid literal subject, raise :class:`InvalidTopicError`."""
    if not topic:
        raise InvalidTopicError("a topic name must not be empty")
    for ch in topic:
        if not (ch.isascii() and ch.isprintable()) or ch in " *>":
            raise InvalidTopicError(
                f"topic {topic!r} is not a NATS subject: {ch!r} is not allowed "
                "(printable ASCII without spaces, '*' or '>')"
            )
    if "" in topic.split("."):
        raise InvalidTopicError(f"topic {topic!r} is not a NATS subject: it has an empty token")
    return topic


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:10]


class StreamLayout:
    """Maps topics to subjects, streams and consumer names (see the module docstring)."""

    __slots__ = ("_bases", "stream_prefix", "topic_prefix")

    def __init__(self, topic_prefix: str = "wow.", stream_prefix: str = "") -> None:
        self.topic_prefix = topic_prefix
        self.stream_prefix = stream_prefix
        self._bases: dict[str, str] = {}

    def subject(self, topic: str) -> str:
        return check_topic(topic)

    def dead_letter_subject(self, topic: str) -> str:
        return check_topic(topic) + DEAD_LETTER_SUFFIX

    def base(self, topic: str) -> str:
        """The context part of ``topic`` that names its stream."""
        base = self._bases.get(topic)
        if base is None:
            check_topic(topic)
            prefix = self.topic_prefix
            if prefix and topic.startswith(prefix) and len(topic) > len(prefix):
                rest = topic[len(prefix) :]
                candidate = prefix + rest.split(".", 1)[0]
                # the prefix must end on a token boundary of the subject
                if not candidate.endswith(".") and (topic == candidate or topic.startswith(candidate + ".")):
                    base = candidate
            if base is None:
                base = topic.split(".", 1)[0]
            self._bases[topic] = base
        return base

    def stream(self, topic: str) -> str:
        return self.stream_for_base(self.base(topic))

    def stream_for_base(self, base: str) -> str:
        name = self.stream_prefix + _safe(base)
        if len(name) > 128:
            name = name[:112] + "-" + _digest(base)
        return name

    @staticmethod
    def stream_subjects(base: str) -> list[str]:
        return [base, base + ".>"]

    @staticmethod
    def consumer(group: str, topic: str) -> str:
        if not group:
            raise ValueError("a consumer group needs a name")
        return f"{_safe(group)[:_READABLE_MAX]}__{_safe(topic)[:_READABLE_MAX]}__{_digest(group, topic)}"
