"""The shared base of every settings section: bounded types, the model configuration,
the environment naming and :class:`SettingsError`.

Each concept owns its section beside its code (``wow_core.command.settings``,
``wow_core.event.settings``, ``wow_core.messaging.local_first.settings``, ...) and a
plugin owns its own (``WOW_KAFKA__*``); all of them build on this module, which imports
nothing of wow-py, so a section never depends on the runtime that composes the sections
into :class:`~wow_core.runtime.settings.WowSettings`.

A plugin section subclasses :class:`SettingsSection` (or applies :data:`BOUNDED` to its
own model configuration) and uses the bounded types below; the runtime reads it from
``WOW_<NAME>__*`` with the same sources and error messages as the core's own settings.

Guaranteed by the types: numbers are finite and have an upper bound, durations are at
most :data:`MAX_SECONDS`, text is at most :data:`MAX_TEXT` characters, and the names that
become group, topic and key names accept only a safe character set (:data:`Name`,
:data:`TopicPrefix`). Not guaranteed: that a value makes sense together with another
one; a section checks that itself (a model validator).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

ENV_PREFIX = "WOW_"
"""The prefix of every variable: ``WOW_TRANSPORT``, ``WOW_KAFKA__BOOTSTRAP_SERVERS``."""
NESTED = "__"
"""The separator of nested settings: ``WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED``."""


class SettingsError(ValueError):
    """A setting with a value that is not accepted."""


# -- bounds ----------------------------------------------------------------------------------

MAX_SECONDS = 86_400.0
"""The longest duration a setting accepts, in seconds (one day)."""
MAX_COUNT = 2**31 - 1
"""The largest count a setting accepts unless it says otherwise (the brokers' int32)."""
MAX_TEXT = 4096
"""The longest text a setting accepts unless it says otherwise (URLs, paths, plugin names)."""
MAX_NAME = 100
"""The longest name that becomes part of group, topic, stream or key names."""

BOUNDED = ConfigDict(allow_inf_nan=False, str_max_length=MAX_TEXT)
"""The model configuration every settings model shares: finite numbers, bounded text."""

Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
"""A duration in seconds: finite, > 0 and at most :data:`MAX_SECONDS`."""
NonNegativeSeconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
"""A duration in seconds that may be 0: finite, at most :data:`MAX_SECONDS`."""
Count = Annotated[int, Field(gt=0, le=MAX_COUNT)]
"""A count: 1 to :data:`MAX_COUNT`."""
NonNegativeCount = Annotated[int, Field(ge=0, le=MAX_COUNT)]
"""A count that may be 0: 0 to :data:`MAX_COUNT`."""

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _check_name(value: str) -> str:
    if not value:
        raise ValueError("a name cannot be empty")
    bad = sorted(set(value) - _NAME_CHARS)
    if bad:
        raise ValueError(f"a name holds only letters, digits, '.', '_' and '-' (found {bad[0]!r})")
    if not value[0].isalnum():
        raise ValueError("a name starts with a letter or a digit")
    return value


def _check_prefix(value: str) -> str:
    bad = sorted(set(value) - _NAME_CHARS)
    if bad:
        raise ValueError(f"a prefix holds only letters, digits, '.', '_' and '-' (found {bad[0]!r})")
    return value


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME), AfterValidator(_check_name)]
"""A name that becomes part of group, topic and key names: 1 to :data:`MAX_NAME` ASCII
letters, digits, ``.``, ``_`` and ``-``, starting with a letter or a digit (no spaces,
no control characters)."""
TopicPrefix = Annotated[str, Field(max_length=MAX_NAME), AfterValidator(_check_prefix)]
"""A prefix of topic names: at most :data:`MAX_NAME` ASCII letters, digits, ``.``, ``_``
and ``-`` (may be empty)."""


class SettingsSection(BaseModel):
    """The base of a settings section: unknown variables are refused, values are frozen
    and bounded (:data:`BOUNDED`).

    ``class KafkaSettings(SettingsSection): ...`` registered as ``kafka`` reads
    ``WOW_KAFKA__*``. The section does not read the environment itself: the runtime
    does, for every section alike.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, **BOUNDED)


# -- names of variables -------------------------------------------------------------------------


def env_var_for(spec_key: str) -> str:
    """The variable of a specification key: ``wow.event.ack-on-unrecorded-failure`` ->
    ``WOW_EVENT__ACK_ON_UNRECORDED_FAILURE`` (``.`` -> ``__``, ``-`` -> ``_``, upper case)."""
    if not spec_key.startswith("wow."):
        raise ValueError(f"a specification key starts with 'wow.': {spec_key!r}")
    return ENV_PREFIX + NESTED.join(part.replace("-", "_").upper() for part in spec_key.split(".")[1:])


def env_name(location: tuple[int | str, ...]) -> str:
    """The environment variable of a settings location: ``("command","bus")`` -> ``WOW_COMMAND__BUS``."""
    parts = [str(part) for part in location if not isinstance(part, int)]
    return ENV_PREFIX + NESTED.join(part.upper() for part in parts)
