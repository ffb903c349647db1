"""``WowSettings``: every setting, from environment variables (prefix ``WOW_``).

The specification's keys map mechanically: ``wow.command.bus.local-first.enabled`` is
``WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED`` (``.`` -> ``__``, ``-`` -> ``_``). A ``.env``
file in the working directory is read too. Plugins contribute sections
(``WOW_KAFKA__BOOTSTRAP_SERVERS``) through the ``register_settings`` hook; they are read
by :meth:`WowSettings.section`. A wrong value fails with :class:`SettingsError`, which
names the variable, the value and what is accepted.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError
from pydantic import create_model as _create_model
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "WOW_"
NESTED = "__"

T = TypeVar("T", bound=BaseModel)


class SettingsError(ValueError):
    """A setting with a value that is not accepted."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LocalFirstSettings(_Section):
    """``wow.<bus>.local-first.*``: local-first dual-copy admission of one bus."""

    enabled: bool = Field(True, description="Hand messages of local aggregates to local receivers first.")
    backlog_high_water_mark: PositiveInt = Field(
        10000,
        description="Copies waiting per aggregate type past which a warning is logged (once per crossing).",
    )
    hand_off_timeout: PositiveFloat = Field(
        30.0, description="Seconds to wait for local admission before a copy goes out unmarked."
    )


class BusSettings(_Section):
    local_first: LocalFirstSettings = Field(default_factory=LocalFirstSettings)


class CommandSettings(_Section):
    bus: BusSettings = Field(default_factory=BusSettings)
    wait_timeout: PositiveFloat = Field(30.0, description="Default deadline of send_and_wait, in seconds.")


class RetrySettings(_Section):
    max_retries: int = Field(3, ge=0, description="Immediate retries of a RECOVERABLE event-function error.")
    min_backoff: float = Field(2.0, ge=0, description="Minimum backoff between retries, in seconds.")


class EventSettings(_Section):
    bus: BusSettings = Field(default_factory=BusSettings)
    ack_on_unrecorded_failure: bool = Field(
        True, description="Acknowledge a failure no recorder recorded (FAILURE_UNRECORDED)."
    )
    retry: RetrySettings = Field(default_factory=RetrySettings)


class StateSettings(_Section):
    bus: BusSettings = Field(default_factory=BusSettings)


class EventSourcingSettings(_Section):
    state: StateSettings = Field(default_factory=StateSettings)
    store: str = Field("in_memory", description="Event store, by plugin name.")
    snapshot: str = Field("in_memory", description="Snapshot repository, by plugin name.")


class MessagingSettings(_Section):
    topic_prefix: str = Field("wow.", description="Prefix of every topic name (default naming).")
    context_aliases: dict[str, str] = Field(
        default_factory=dict, description="Context name replacements in topic names (JSON object)."
    )
    decode_failure: str = Field("default", description="Decode-failure policy, by plugin name.")


class RuntimeSettings(_Section):
    shutdown_timeout: PositiveFloat = Field(30.0, description="Seconds the runtime gives an orderly stop.")
    max_in_flight: PositiveInt = Field(1024, description="Bound on commands and events processed at once.")


class WowSettings(BaseSettings):
    """The settings of one wow-py process."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
    )

    transport: str = Field("in_memory", description="Transport of the distributed buses, by plugin name.")
    failure_recorder: str = Field("none", description="FailureRecorder, by plugin name.")
    metrics: str = Field("noop", description="Metrics backend, by plugin name (`noop`, `in_memory`, ...).")
    service_name: str = Field("wow-service", description="Name of this service in logs and metrics.")
    command: CommandSettings = Field(default_factory=CommandSettings)
    event: EventSettings = Field(default_factory=EventSettings)
    eventsourcing: EventSourcingSettings = Field(default_factory=EventSourcingSettings)
    messaging: MessagingSettings = Field(default_factory=MessagingSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)

    def section(self, name: str, model: type[T]) -> T:
        """Read the plugin section ``name`` (``WOW_<NAME>__*``) into ``model``."""
        cache: dict[str, BaseModel] = self.__dict__.setdefault("_sections", {})
        found = cache.get(name)
        if found is None:
            found = cache[name] = load_section(name, model)
        if not isinstance(found, model):
            raise TypeError(f"section {name!r} was read as {type(found).__name__}")
        return found

    @classmethod
    def load(cls, **overrides: Any) -> WowSettings:
        """Read the environment; raise :class:`SettingsError` on a wrong value."""
        try:
            return cls(**overrides)
        except ValidationError as error:
            raise SettingsError(describe(error, ())) from None


def load_section(name: str, model: type[T]) -> T:
    """Read ``WOW_<NAME>__*`` into ``model``."""
    holder = _create_model(
        f"WowSection_{name}",
        __base__=BaseSettings,
        __config__=None,
        **{name: (model, Field(default_factory=model))},  # type: ignore[call-overload]
    )
    holder.model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED,
        env_file=".env",
        extra="ignore",
    )
    try:
        value = getattr(holder(), name)
    except ValidationError as error:
        raise SettingsError(describe(error, ())) from None
    if not isinstance(value, model):
        raise TypeError(f"section {name!r} did not load as {model.__name__}")
    return value


def env_name(location: tuple[int | str, ...]) -> str:
    """The environment variable of a settings location: ``("command","bus")`` -> ``WOW_COMMAND__BUS``."""
    parts = [str(part) for part in location if not isinstance(part, int)]
    return ENV_PREFIX + NESTED.join(part.upper() for part in parts)


def describe(error: ValidationError, prefix: tuple[str, ...]) -> str:
    lines = []
    for item in error.errors():
        location = prefix + tuple(str(part) for part in item["loc"])
        value = item.get("input")
        lines.append(
            f"{env_name(location)}={value!r} is not accepted: {item['msg']}"
            if not isinstance(value, dict)
            else f"{env_name(location)} is not accepted: {item['msg']}"
        )
    return "invalid settings:\n  " + "\n  ".join(lines)
