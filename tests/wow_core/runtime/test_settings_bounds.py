"""Every setting is bounded (issue 11, item 6d): numbers are finite and have an upper
bound, text has a length limit, and the service name (it becomes group and topic names)
is a name. Checked for every leaf of the core settings and of every installed plugin
section, with the value a user could type."""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from wow_core.plugins import load_plugins
from wow_core.runtime.settings import ENV_PREFIX, NESTED, SettingsError, WowSettings

SECTIONS: dict[str, type[BaseModel]] = {r.name: r.value for r in load_plugins().all("settings")}
HUGE_TEXT = "x" * 100_000


def _leaves(model: type[BaseModel], prefix: str) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _leaves(annotation, prefix + name.upper() + NESTED)
        else:
            found.append((prefix + name.upper(), annotation))
    return found


def _base(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (only,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return _base(only)
    if typing.get_origin(annotation) is typing.Annotated:
        return _base(typing.get_args(annotation)[0])
    return typing.get_origin(annotation) or annotation


def _wrong_values(annotation: Any) -> list[str]:
    base = _base(annotation)
    if base is bool or base is typing.Literal or (isinstance(base, type) and issubclass(base, enum.Enum)):
        return []
    if base is int:
        return ["1" * 40]
    if base is float:
        return ["inf", "nan", "1e400", "-inf"]
    if base in (str, SecretStr):
        return [HUGE_TEXT]
    if base is list:
        return [f'["{HUGE_TEXT}"]']
    if base is dict:
        return [f'{{"a": "{HUGE_TEXT}"}}', f'{{"{HUGE_TEXT}": "a"}}']
    raise AssertionError(f"no wrong value known for {annotation!r}")


def _load(variable: str) -> None:
    settings = WowSettings.load()
    for name, model in SECTIONS.items():
        if variable.startswith(f"{ENV_PREFIX}{name.upper()}{NESTED}"):
            settings.section(name, model)


CASES = [
    (variable, value)
    for model, prefix in [(WowSettings, ENV_PREFIX)]
    + [(model, f"{ENV_PREFIX}{name.upper()}{NESTED}") for name, model in SECTIONS.items()]
    for variable, annotation in _leaves(model, prefix)
    for value in _wrong_values(annotation)
]


def test_the_plugin_sections_of_the_workspace_are_checked() -> None:
    assert {"redis", "nats", "kafka"} <= set(SECTIONS)
    assert len(CASES) > 80


@pytest.mark.parametrize(("variable", "value"), CASES, ids=[f"{v}={x[:12]}" for v, x in CASES])
def test_every_setting_refuses_an_unbounded_value(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        _load(variable)
    message = str(raised.value)
    assert f"  {variable}" in message, message[:300]
    assert len(message) < 1000, "a long value is cut in the message"


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("WOW_RUNTIME__MAX_IN_FLIGHT", "1" * 40, "accepted: a value less than or equal to 1000000"),
        ("WOW_COMMAND__WAIT_TIMEOUT", "inf", "accepted: a finite number"),
        ("WOW_RUNTIME__SHUTDOWN_TIMEOUT", "1e400", "accepted: a finite number"),
        ("WOW_RUNTIME__SHUTDOWN_TIMEOUT", "86401", "accepted: a value less than or equal to 86400"),
        ("WOW_REDIS__KEY_PREFIX", HUGE_TEXT, "(100000 characters)"),
        ("WOW_SERVICE_NAME", "", "accepted: at least 1 character"),
        ("WOW_SERVICE_NAME", "my service", "a name holds only letters, digits, '.', '_' and '-' (found ' ')"),
        ("WOW_SERVICE_NAME", "bank\norders", "(found '\\n')"),
        ("WOW_SERVICE_NAME", "-bank", "a name starts with a letter or a digit"),
        ("WOW_MESSAGING__TOPIC_PREFIX", "wow prod.", "(found ' ')"),
        ("WOW_MESSAGING__CONTEXT_ALIASES", '{"orders": "my orders"}', "(found ' ')"),
    ],
    ids=lambda value: value[:20],
)
def test_the_values_of_the_issue_are_refused_with_the_bound(
    variable: str, value: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        _load(variable)
    assert reason in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WOW_SERVICE_NAME", "bank-2.eu_1"),
        ("WOW_SERVICE_NAME", "b" * 100),
        ("WOW_COMMAND__WAIT_TIMEOUT", "86400"),
        ("WOW_RUNTIME__MAX_IN_FLIGHT", "1000000"),
        ("WOW_MESSAGING__TOPIC_PREFIX", ""),
        ("WOW_REDIS__KEY_PREFIX", "app:eu-1:"),
        ("WOW_NATS__MAX_AGE", "0"),
        ("WOW_KAFKA__REQUEST_TIMEOUT_MS", str(2**31 - 1)),
    ],
)
def test_values_at_the_bounds_are_accepted(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    _load(variable)
