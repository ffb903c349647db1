"""``WowSettings``: every setting, from environment variables (prefix ``WOW_``).

Each concept owns its section beside its code (``wow_core.command.settings``,
``wow_core.event.settings``, ``wow_core.eventsourcing.settings``,
``wow_core.messaging.local_first.settings``, ``wow_core.transport.settings``) on the
shared base of :mod:`wow_core.settings`; this module only composes them and reads them
from the environment. The names of those modules are re-exported here, so
``from wow_core.runtime.settings import LocalFirstSettings, Seconds`` keeps working;
new code, plugins above all, imports them from their own modules.

The specification's keys map mechanically: ``wow.command.bus.local-first.enabled`` is
``WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED`` (``.`` -> ``__``, ``-`` -> ``_``). A ``.env``
file in the working directory is read too. Plugins contribute sections
(``WOW_KAFKA__BOOTSTRAP_SERVERS``) through the ``register_settings`` hook; they are read
by :meth:`WowSettings.section`. A wrong value fails with :class:`SettingsError`, which
names the variable, the value (secrets and URL credentials masked), where it came from
when that is ``.env``, and what is accepted.

Variable names are case-insensitive, as in pydantic-settings: ``wow_transport`` sets
``WOW_TRANSPORT``. Every value is bounded: numbers are finite and have an upper bound,
durations are at most :data:`~wow_core.settings.MAX_SECONDS`, text is at most
:data:`~wow_core.settings.MAX_TEXT` characters, and the names that become group, topic
and key names accept only a safe character set (:data:`~wow_core.settings.Name`,
:data:`~wow_core.settings.TopicPrefix`). Plugin sections use the same types.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dotenv import dotenv_values
from pydantic import BaseModel, Field, SecretBytes, SecretStr, ValidationError
from pydantic import create_model as _create_model
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as _SourceError

from wow_core.cluster.settings import ClusterSettings
from wow_core.command.settings import CommandSettings
from wow_core.event.settings import EventSettings, RetrySettings
from wow_core.eventsourcing.settings import EventSourcingSettings, StateSettings
from wow_core.messaging.local_first.settings import BusSettings, LocalFirstSettings
from wow_core.settings import (
    BOUNDED,
    ENV_PREFIX,
    MAX_COUNT,
    MAX_NAME,
    MAX_SECONDS,
    MAX_TEXT,
    NESTED,
    Count,
    Name,
    NonNegativeCount,
    NonNegativeSeconds,
    Seconds,
    SettingsError,
    SettingsSection,
    TopicPrefix,
    env_name,
    env_var_for,
)
from wow_core.transport.settings import MessagingSettings

__all__ = [
    "BOUNDED",
    "DOTENV",
    "ENV_PREFIX",
    "MAX_COUNT",
    "MAX_NAME",
    "MAX_SECONDS",
    "MAX_TEXT",
    "NESTED",
    "NOT_SETTINGS",
    "BusSettings",
    "CommandSettings",
    "Count",
    "EventSettings",
    "EventSourcingSettings",
    "LocalFirstSettings",
    "MessagingSettings",
    "Name",
    "NonNegativeCount",
    "NonNegativeSeconds",
    "RetrySettings",
    "RuntimeSettings",
    "Seconds",
    "SettingsError",
    "SettingsSection",
    "Source",
    "StateSettings",
    "TopicPrefix",
    "WowSettings",
    "closest_variable",
    "describe",
    "describe_undecodable",
    "env_name",
    "env_var_for",
    "load_section",
    "mask_userinfo",
    "setting_sources",
    "setting_variables",
    "unknown_variables",
]

T = TypeVar("T", bound=BaseModel)


class RuntimeSettings(SettingsSection):
    """``WOW_RUNTIME__*``: the lifecycle and the bound on work in flight."""

    shutdown_timeout: Seconds = Field(30.0, description="Seconds the runtime gives an orderly stop.")
    max_in_flight: int = Field(
        1024, gt=0, le=1_000_000, description="Bound on commands and events processed at once."
    )
    gc_freeze: bool = Field(
        True,
        description="`wow run` freezes the objects of start-up out of the garbage collector's reach "
        "(`gc.freeze()`) once the runtime started.",
    )
    gc_threshold: int = Field(
        10_000,
        ge=0,
        le=1_000_000,
        description="Under `wow run` with `GC_FREEZE`: allocations between collections of the "
        "youngest generation, when Python's is lower (700); 0 keeps Python's.",
    )


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

    model_config = SettingsConfigDict(**_SOURCES, frozen=True, **BOUNDED)

    transport: str = Field("in_memory", description="Transport of the distributed buses, by plugin name.")
    failure_recorder: str = Field("none", description="FailureRecorder, by plugin name.")
    metrics: str = Field("noop", description="Metrics backend, by plugin name (`noop`, `in_memory`, ...).")
    service_name: Name = Field(
        "wow-service",
        description="Name of the service when its WowApp has none (an app's own name wins): it names the "
        "dispatchers and the consumer groups, <name>.command for commands. Letters, digits, '.', '_' and "
        "'-', starting with a letter or a digit.",
    )
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
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

    model_config = SettingsConfigDict(**_SOURCES, **BOUNDED)


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
_UNKNOWN = "; accepted: only the variables `wow settings` lists"
_REASON_ONLY = ("value_error", "assertion_error")
"""Errors raised by a validator: their message is the whole reason (no "accepted" part)."""
DOTENV = ".env"
"""The file read besides the environment, in the working directory."""
_SHOWN_CHARACTERS = 60


def _accepted(item: Any) -> str:
    kind = item["type"]
    if kind in _ACCEPTED_BY_TYPE:
        return str(_ACCEPTED_BY_TYPE[kind])
    message = str(item["msg"])
    if message.startswith("String should have "):
        return message.removeprefix("String should have ")
    if not message.startswith("Input should be "):
        return message
    rest = message.removeprefix("Input should be ")
    return "a value " + rest if rest.startswith(("greater", "less")) else rest


def _reason(item: Any) -> str:
    """The message of a validator's own error, without pydantic's "Value error, " prefix."""
    error = (item.get("ctx") or {}).get("error")
    if error is not None:
        return str(error)
    return str(item["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")


_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+._-]*://)(?P<userinfo>[^\s,]*)@(?=[^\s,@])"
    r"|(?<![^\s,\[\"'=(])(?P<plain>[^\s,/@\"'\[\]=(]*:[^\s,]*)@(?=[^\s,@])"
)
"""``scheme://userinfo@`` anywhere, or ``user:password@`` at the start of an entry."""
_USER_ONLY_SCHEMES = frozenset({"postgresql://", "postgres://"})
"""Schemes whose ``scheme://name@host`` is a user name, not a token."""


def _mask_token(match: re.Match[str]) -> str:
    scheme = match.group("scheme")
    if scheme is None:
        # Without a scheme only ``user:password@host`` is taken for credentials (not an e-mail address).
        return match.group("plain").partition(":")[0] + ":***@"
    user, colon, _ = match.group("userinfo").partition(":")
    if colon:
        return f"{scheme}{user}:***@"
    # ``postgresql://user@host`` names a user (libpq has no token form): it stays.
    return match.group(0) if scheme.lower() in _USER_ONLY_SCHEMES else f"{scheme}***@"


def mask_userinfo(value: Any) -> Any:
    """``value`` with the credentials of every URL in it masked: safe to print or log.

    Applies to a string and, recursively, to the strings of a list, tuple or dict. In
    ``scheme://user:password@host`` the password becomes ``***`` (the user name stays);
    in ``scheme://token@host`` the token does, except in ``postgresql://user@host`` (and
    ``postgres://``), where it is a user name and stays; a ``user:password@host`` without a scheme
    (a Kafka bootstrap entry) is masked the same way. Entries are separated by commas or
    whitespace. Guaranteed: no text between ``://`` (or a separator) and the last ``@``
    of an entry survives, except a user name. Not guaranteed: that a password holding a
    comma or whitespace is recognised whole, nor that credentials outside the URL's
    userinfo (a query parameter) are found. Masking a masked text changes nothing.
    """
    if isinstance(value, str):
        return _USERINFO.sub(_mask_token, value) if "@" in value else value
    if isinstance(value, list | tuple):
        return type(value)(mask_userinfo(item) for item in value)
    if isinstance(value, dict):
        return {key: mask_userinfo(item) for key, item in value.items()}
    return value


# -- where a variable came from --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Source:
    """One ``WOW_*`` variable as it was found: its name as written, its value, its origin."""

    name: str
    value: str
    origin: str
    """``"environment"`` or :data:`DOTENV`."""

    @property
    def where(self) -> str:
        """`` (from .env)`` for a variable read from ``.env``, else nothing."""
        return f" (from {DOTENV})" if self.origin == DOTENV else ""


def setting_sources(environ: Mapping[str, str] | None = None) -> dict[str, Source]:
    """Every ``WOW_*`` variable (any case) by its upper-case name; the environment wins
    over ``.env``, as for the settings themselves. ``environ`` replaces both."""
    found: dict[str, Source] = {}
    if environ is None:
        if Path(DOTENV).is_file():
            for name, value in dotenv_values(Path(DOTENV)).items():
                if value is not None and name.upper().startswith(ENV_PREFIX):
                    found[name.upper()] = Source(name, value, DOTENV)
        environ = os.environ
    for name, value in environ.items():
        if name.upper().startswith(ENV_PREFIX):
            found[name.upper()] = Source(name, value, "environment")
    return found


def _shown(value: Any) -> str:
    """``=<value>`` for a message: URL credentials masked, a long value cut."""
    text = repr(mask_userinfo(value))
    if isinstance(value, str) and len(text) > _SHOWN_CHARACTERS + 2:
        return f"={text[:_SHOWN_CHARACTERS]}...' ({len(value)} characters)"
    return "=" + text


# -- names, and the close ones ----------------------------------------------------------------


def setting_variables(model: type[BaseModel], prefix: str = ENV_PREFIX) -> list[str]:
    """The variable of every leaf setting of ``model``: ``WOW_COMMAND__WAIT_TIMEOUT``, ..."""
    found: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        variable = prefix + name.upper()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.extend(setting_variables(annotation, variable + NESTED))
        else:
            found.append(variable)
    return found


def closest_variable(variable: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``variable`` is most probably a misspelling of, or None.

    A candidate ending in the same setting name (``WOW_MAX_IN_FLIGHT`` ->
    ``WOW_RUNTIME__MAX_IN_FLIGHT``) is preferred. Otherwise a candidate must be genuinely
    close where the two differ: the parts after their common sections (and ``WOW_``)
    have a similarity ratio of at least 0.8, so ``WOW_LOG_LEVEL`` gets no hint rather
    than ``WOW_EVENT``, and ``..._LOCAL_FIRST__TYPO`` is not "close" to
    ``..._LOCAL_FIRST__ENABLED`` for the sections they share; or, when none is, they are
    the same length and one letter apart, and only one candidate is (``WOW_REDIS__URI``).
    """
    bare = variable.upper().removeprefix(ENV_PREFIX)
    names = {candidate.upper().removeprefix(ENV_PREFIX): candidate for candidate in candidates}
    leaf = bare.rsplit(NESTED, 1)[-1]
    same_leaf = [name for name in names if name.rsplit(NESTED, 1)[-1] == leaf and name != bare]
    if same_leaf:
        return names[difflib.get_close_matches(bare, same_leaf, n=1, cutoff=0.0)[0]]
    best: tuple[float, str] | None = None
    for name in names:
        left, right = _differing(bare, name)
        ratio = difflib.SequenceMatcher(None, left, right).ratio()
        if ratio >= 0.8 and (best is None or ratio > best[0]):
            best = (ratio, name)
    if best is None:  # a short name one letter off (``URI`` for ``URL``) is below that ratio
        slips = [name for name in names if _one_letter_off(*_differing(bare, name))]
        return names[slips[0]] if len(slips) == 1 else None
    return names[best[1]]


def _one_letter_off(left: str, right: str) -> bool:
    """The same length (3 or more) and one letter different."""
    return len(left) == len(right) >= 3 and sum(a != b for a, b in zip(left, right, strict=True)) == 1


def _differing(left: str, right: str) -> tuple[str, str]:
    """``left`` and ``right`` without the sections they both start with."""
    a, b = left.split(NESTED), right.split(NESTED)
    common = 0
    while common < min(len(a), len(b)) - 1 and a[common] == b[common]:
        common += 1
    return NESTED.join(a[common:]), NESTED.join(b[common:])


def _hint(variable: str, candidates: Iterable[str]) -> str:
    close = closest_variable(variable, candidates)
    return f" (did you mean {close}?)" if close else ""


# -- describing a ValidationError ---------------------------------------------------------------


def _split_location(
    model: type[BaseModel] | None, location: tuple[str | int, ...]
) -> tuple[tuple[str, ...], tuple[str | int, ...]]:
    """(the fields naming a variable, the rest: keys and indexes inside its value).

    A name that is no field of its model (an unknown variable) still names the variable.
    """
    if model is None:
        return tuple(str(part) for part in location if not isinstance(part, int)), ()
    fields: list[str] = []
    annotation: Any = model
    for index, part in enumerate(location):
        known = getattr(annotation, "model_fields", None)
        if known is None or isinstance(part, int):
            return tuple(fields), location[index:]
        if part not in known:
            return (*fields, part), location[index + 1 :]
        fields.append(part)
        annotation = known[part].annotation
    return tuple(fields), ()


def _unknown_lines(variable: str, sources: Mapping[str, Source], candidates: list[str]) -> list[str]:
    """One line per variable at or below ``variable`` that names no setting; no value shown
    (an unknown name may be a misspelt secret)."""
    below = [
        source
        for name, source in sorted(sources.items())
        if name == variable or name.startswith(variable + NESTED)
    ]
    if not below:
        return [f"{variable} is not a setting{_hint(variable, candidates)}{_UNKNOWN}"]
    return [
        f"{source.name.upper()}{source.where} is not a setting{_hint(source.name, candidates)}{_UNKNOWN}"
        for source in below
    ]


def describe(error: ValidationError, prefix: tuple[str, ...], model: type[BaseModel] | None = None) -> str:
    """One line per wrong value: the variable, the value and what is accepted.

    The value of a secret field (``SecretStr``, ``SecretBytes`` of ``model``) is masked,
    the credentials of a URL too (:func:`mask_userinfo`), a long value is cut. A value
    read from ``.env`` says so. A variable that names no setting is reported under its
    whole name, with the close setting if there is one, and without its value.
    """
    sources = setting_sources()
    candidates = setting_variables(model) if model is not None else []
    lines: list[str] = []
    for item in error.errors():
        fields, rest = _split_location(model, tuple(item["loc"]))
        variable = env_name(prefix + fields)
        if item["type"] == "extra_forbidden" and not rest:
            lines.extend(_unknown_lines(variable, sources, candidates))
            continue
        value = item.get("input")
        secret = model is not None and _is_secret(_field_at(model, list(fields)))
        inside = "".join(f"[{_shown(part)[1:]}]" for part in rest)
        shown = "" if isinstance(value, dict) else "=**********" if secret else _shown(value)
        source = sources.get(variable)
        where = source.where if source is not None else ""
        if item["type"] in _REASON_ONLY and not rest and _is_section(model, fields):
            # a section's own validator, over a combination: its message names the variables
            lines.append(_reason(item))
        elif item["type"] in _REASON_ONLY:
            lines.append(f"{variable}{inside}{shown}{where} is not accepted: {_reason(item)}")
        else:
            accepted = _accepted(item)
            lines.append(
                f"{variable}{inside}{shown}{where} is not accepted ({item['msg']}); accepted: {accepted}"
            )
    return "invalid settings:\n  " + "\n  ".join(lines)


def _is_section(model: type[BaseModel] | None, fields: tuple[str, ...]) -> bool:
    """Whether ``fields`` name a whole section (a model), not one setting."""
    if model is None:
        return False
    if not fields:
        return True
    annotation = _field_at(model, list(fields))
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


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


def describe_undecodable(error: _SourceError, model: type[BaseModel], prefix: tuple[str, ...]) -> str:
    """A value of a JSON-valued setting (a dict, a list, a whole section) that is not JSON.

    pydantic-settings reports only the top-level field; find the variables under it whose
    value is not JSON although their setting needs JSON.
    """
    match = re.search(r'field "([^"]+)"', str(error))
    field = match.group(1) if match else ""
    head = env_name((*prefix, field)) if field else ENV_PREFIX
    lines = []
    for upper, source in sorted(setting_sources().items()):
        if upper != head and not upper.startswith(head + NESTED):
            continue
        path = [part.lower() for part in upper.removeprefix(ENV_PREFIX).split(NESTED)][len(prefix) :]
        annotation = _field_at(model, path)
        if not _is_complex(annotation):
            continue
        origin = typing.get_origin(annotation) or annotation
        wanted = "a JSON array" if origin in (list, set, tuple) else "a JSON object"
        try:
            json.loads(source.value)
        except ValueError as problem:
            lines.append(
                f"{upper}{_shown(source.value)}{source.where} is not accepted ({problem}); accepted: {wanted}"
            )
    if not lines:
        lines.append(f"{head}: {mask_userinfo(str(error))}")
    return "invalid settings:\n  " + "\n  ".join(lines)


NOT_SETTINGS = ("WOW_TEST_", "WOW_BENCH_", "WOW_CONFORMANCE_")
"""Prefixes of ``WOW_*`` variables that belong to the test suite and benchmarks, not to a process."""


def unknown_variables(
    sections: Iterable[str] | Mapping[str, type[BaseModel]], environ: Mapping[str, str] | None = None
) -> list[str]:
    """``WOW_*`` variables that name neither a setting nor a plugin section, each with a hint.

    A misspelt variable (``WOW_TRANSPROT=redis``) would otherwise be ignored and the process
    would quietly run on the default; the runtime logs these at start-up. Names are compared
    case-insensitively, as the settings read them (``wow_transport`` is ``WOW_TRANSPORT``
    and is not reported). ``environ`` defaults to the environment and ``.env``; a variable
    from ``.env`` is named with ``(in .env)``. ``sections`` are the plugin section names,
    or the section models by name (their settings are then hinted too).
    """
    models = sections if isinstance(sections, Mapping) else dict.fromkeys(sections)
    known = {name.upper() for name in WowSettings.model_fields} | {name.upper() for name in models}
    candidates = setting_variables(WowSettings)
    for name, model in models.items():
        section = ENV_PREFIX + name.upper()
        candidates += setting_variables(model, section + NESTED) if model is not None else [section]
    found: list[str] = []
    for upper, source in sorted(setting_sources(environ).items()):
        if upper.startswith(NOT_SETTINGS):
            continue
        head = upper[len(ENV_PREFIX) :].split(NESTED, 1)[0]
        if head in known:
            continue
        where = f" (in {DOTENV})" if source.origin == DOTENV else ""
        found.append(
            f"{source.name}{where} is not a wow-py setting and is ignored{_hint(source.name, candidates)}"
        )
    return found
