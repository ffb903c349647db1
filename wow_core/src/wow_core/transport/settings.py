"""``wow.messaging.*``: topic naming and the decode-failure policy of the transport buses,
and :class:`ProcessSettings`, what a plugin factory reads of the process's settings.

The section keeps the specification's name (``WOW_MESSAGING__TOPIC_PREFIX``) although
what it configures, :class:`~wow_core.transport.spi.DefaultTopicNaming` and the
decode-failure policy, lives in ``wow_core.transport``.
"""

from __future__ import annotations

from typing import Annotated, Protocol, TypeVar

from pydantic import BaseModel, Field

from wow_core.settings import MAX_NAME, Name, SettingsSection, TopicPrefix

T = TypeVar("T", bound=BaseModel)


class MessagingSettings(SettingsSection):
    """``WOW_MESSAGING__*``."""

    topic_prefix: TopicPrefix = Field("wow.", description="Prefix of every topic name (default naming).")
    context_aliases: dict[Annotated[str, Field(max_length=MAX_NAME)], Name] = Field(
        default_factory=dict,
        description="Context name replacements in topic names (JSON object; each replacement a name).",
    )
    decode_failure: str = Field(
        "default",
        description=(
            "Decode-failure policy, by plugin name: default (the transport's default), "
            "dead_letter (to <topic>.dlq, then ack) or leave_pending (unacknowledged)."
        ),
    )


class ProcessSettings(Protocol):
    """What a plugin factory (``factory(settings)``) reads of the process's settings.

    The runtime passes its :class:`~wow_core.runtime.settings.WowSettings`; typing a
    factory or a ``from_settings`` with this protocol keeps a plugin independent of the
    runtime. Guaranteed: a plugin's own section (``section("kafka", KafkaSettings)``, read
    from ``WOW_KAFKA__*`` once per process and validated) and the core's topic naming
    (``messaging``). Everything else of the process's settings is the runtime's.
    """

    @property
    def messaging(self) -> MessagingSettings:
        """``WOW_MESSAGING__*``: topic prefix, context aliases, decode-failure policy."""
        ...

    def section(self, name: str, model: type[T]) -> T:
        """The plugin section ``name`` (``WOW_<NAME>__*``) read into ``model``."""
        ...
