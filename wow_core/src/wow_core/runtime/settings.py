"""``WowSettings``: every setting, from environment variables (prefix ``WOW_``).

The specification's keys map mechanically: ``wow.command.bus.local-first.enabled`` is
``WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED`` (``.`` -> ``__``, ``-`` -> ``_``). A ``.env``
file in the working directory is read too. Plugins contribute sections
(``WOW_KAFKA__BOOTSTRAP_SERVERS``) through the ``register_settings`` hook; they are read
by :meth:`WowSettings.section`. A wrong value fails with :class:`SettingsError`, which
names the variable, the value and what is accepted.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from dotenv import dotenv_values
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    SecretBytes,
    SecretStr,
    ValidationError,
)
from pydantic import create_model as _create_model
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as _SourceError

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
    strict_bodies: bool = Field(
        True,
        description="Validate command bodies from a transport strictly, and send only those that pass: "
        'unknown fields and lax coercions (true or "5" for an int) are refused, naming the field. '
        "false: pydantic's lax mode, unknown fields ignored.",
    )


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
    decode_failure: str = Field(
        "default",
        description=(
            "Decode-failure policy, by plugin name: default (the transport's default), "
            "dead_letter (to <topic>.dlq, then ack) or leave_pending (unacknowledged)."
        ),
    )


class RuntimeSettings(_Section):
    shutdown_timeout: PositiveFloat = Field(30.0, description="Seconds the runtime gives an orderly stop.")
    max_in_flight: PositiveInt = Field(1024, description="Bound on commands and events processed at once.")


_SOURCES = SettingsConfigDict(
    env_prefix=ENV_PREFIX,
    env_nested_delimiter=NESTED,
    env_file=".env",
    env_file_encoding="utf-8",
    env_parse_none_str="null",
    extra="ignore",
)
"""Where settings come from: ``WOW_``-prefixed variables (``__`` nesting) and ``.env``.
:class:`WowSettings` and every plugin section read the same sources alike. ``null`` is
an unset optional value, as ``wow settings`` prints it, so its output reads back."""


class WowSettings(BaseSettings):
    """The settings of one wow-py process."""

    model_config = SettingsConfigDict(**_SOURCES, frozen=True)

    transport: str = Field("in_memory", description="Transport of the distributed buses, by plugin name.")
    failure_recorder: str = Field("none", description="FailureRecorder, by plugin name.")
    metrics: str = Field("noop", description="Metrics backend, by plugin name (`noop`, `in_memory`, ...).")
    service_name: str = Field(
        "wow-service",
        description="Name of the service when its WowApp has none (an app's own name wins): it names the "
        "dispatchers and the consumer groups, <name>.command for commands.",
    )
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
            raise SettingsError(describe(error, (), cls)) from None
        except _SourceError as error:
            raise SettingsError(describe_undecodable(error, cls, ())) from None


class _SectionHolder(BaseSettings):
    """Reads one plugin section; every other ``WOW_*`` variable is someone else's."""

    model_config = SettingsConfigDict(**_SOURCES)


def load_section(name: str, model: type[T]) -> T:
    """Read ``WOW_<NAME>__*`` into ``model``."""
    holder = _create_model(
        f"WowSection_{name}",
        __base__=_SectionHolder,
        **{name: (model, Field(default_factory=model))},  # type: ignore[call-overload]
    )
    try:
        value = getattr(holder(), name)
    except ValidationError as error:
        raise SettingsError(describe(error, (), holder)) from None
    except _SourceError as error:
        raise SettingsError(describe_undecodable(error, holder, ())) from None
    if not isinstance(value, model):
        raise TypeError(f"section {name!r} did not load as {model.__name__}")
    return value


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


_BOOLEAN = "true or false (also 1/0, yes/no, on/off)"
_ACCEPTED_BY_TYPE = {
    "bool_parsing": _BOOLEAN,
    "bool_type": _BOOLEAN,
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "dict_type": "a JSON object",
    "model_type": "a JSON object, or one variable per field (WOW_<SECTION>__<FIELD>)",
    "extra_forbidden": "only the variables `wow settings` lists",
}


def _accepted(item: Any) -> str:
    kind = item["type"]
    if kind in _ACCEPTED_BY_TYPE:
        return str(_ACCEPTED_BY_TYPE[kind])
    message = str(item["msg"])
    if not message.startswith("Input should be "):
        return message
    rest = message.removeprefix("Input should be ")
    return "a value " + rest if rest.startswith(("greater", "less")) else rest


def describe(error: ValidationError, prefix: tuple[str, ...], model: type[BaseModel] | None = None) -> str:
    """One line per wrong value: the variable, the value and what is accepted.

    The value of a secret field (``SecretStr``, ``SecretBytes`` of ``model``) is masked.
    """
    lines = []
    for item in error.errors():
        location = prefix + tuple(str(part) for part in item["loc"])
        value = item.get("input")
        path = [str(part) for part in item["loc"] if not isinstance(part, int)]
        secret = model is not None and _is_secret(_field_at(model, path))
        shown = "" if isinstance(value, dict) else "=**********" if secret else f"={value!r}"
        lines.append(
            f"{env_name(location)}{shown} is not accepted ({item['msg']}); accepted: {_accepted(item)}"
        )
    return "invalid settings:\n  " + "\n  ".join(lines)


def _is_secret(annotation: Any) -> bool:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_is_secret(arg) for arg in typing.get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, SecretStr | SecretBytes)


def _is_complex(annotation: Any) -> bool:
    origin = typing.get_origin(annotation) or annotation
    if origin in (typing.Union, types.UnionType):
        return any(_is_complex(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return (isinstance(origin, type) and issubclass(origin, BaseModel)) or origin in (dict, list, set, tuple)


def _field_at(model: type[BaseModel], path: list[str]) -> Any:
    """The annotation at ``path`` (lower-case field names) below ``model``, or None."""
    annotation: Any = model
    for part in path:
        fields = getattr(annotation, "model_fields", None)
        if fields is None:
            return None
        field = fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
    return annotation


def _environment() -> dict[str, str]:
    found = (
        {k: v for k, v in dotenv_values(Path(".env")).items() if v is not None}
        if Path(".env").exists()
        else {}
    )
    found.update(os.environ)
    return found


def describe_undecodable(error: _SourceError, model: type[BaseModel], prefix: tuple[str, ...]) -> str:
    """A value of a JSON-valued setting (a dict, a list, a whole section) that is not JSON.

    pydantic-settings reports only the top-level field; find the variables under it whose
    value is not JSON although their setting needs JSON.
    """
    match = re.search(r'field "([^"]+)"', str(error))
    field = match.group(1) if match else ""
    head = env_name((*prefix, field)) if field else ENV_PREFIX
    lines = []
    for variable, value in sorted(_environment().items()):
        upper = variable.upper()
        if upper != head and not upper.startswith(head + NESTED):
            continue
        path = [part.lower() for part in upper.removeprefix(ENV_PREFIX).split(NESTED)][len(prefix) :]
        annotation = _field_at(model, path)
        if not _is_complex(annotation):
            continue
        origin = typing.get_origin(annotation) or annotation
        wanted = "a JSON array" if origin in (list, set, tuple) else "a JSON object"
        try:
            json.loads(value)
        except ValueError as problem:
            lines.append(f"{variable}={value!r} is not accepted ({problem}); accepted: {wanted}")
    if not lines:
        lines.append(f"{head}: {error}")
    return "invalid settings:\n  " + "\n  ".join(lines)


NOT_SETTINGS = ("WOW_TEST_", "WOW_BENCH_", "WOW_CONFORMANCE_")
"""Prefixes of ``WOW_*`` variables that belong to the test suite and benchmarks, not to a process."""


def unknown_variables(sections: Iterable[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """``WOW_*`` variables that name neither a setting nor a plugin section, each with a hint.

    A misspelt variable (``WOW_TRANSPROT=redis``) would otherwise be ignored and the process
    would quietly run on the default; the runtime logs these at start-up.
    """
    env = os.environ if environ is None else environ
    known = {name.upper() for name in WowSettings.model_fields} | {name.upper() for name in sections}
    candidates = sorted(ENV_PREFIX + name for name in known)
    found: list[str] = []
    for variable in sorted(env):
        if not variable.startswith(ENV_PREFIX) or variable.startswith(NOT_SETTINGS):
            continue
        head = variable[len(ENV_PREFIX) :].split(NESTED, 1)[0]
        if head in known:
            continue
        close = difflib.get_close_matches(ENV_PREFIX + head, candidates, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        found.append(f"{variable} is not a wow-py setting and is ignored{hint}")
    return found
