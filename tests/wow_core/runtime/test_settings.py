from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from tests.wow_core.runtime.probe_plugin import ProbeSettings
from wow_core.runtime.settings import SettingsError, WowSettings, env_var_for

# (specification key, its default, a different valid value as text, that value parsed)
SPEC_KEYS: list[tuple[str, Any, str, Any]] = [
    ("wow.command.bus.local-first.enabled", True, "false", False),
    ("wow.event.bus.local-first.enabled", True, "false", False),
    ("wow.eventsourcing.state.bus.local-first.enabled", True, "0", False),
    ("wow.command.bus.local-first.backlog-high-water-mark", 10000, "500", 500),
    ("wow.event.bus.local-first.backlog-high-water-mark", 10000, "501", 501),
    ("wow.eventsourcing.state.bus.local-first.backlog-high-water-mark", 10000, "502", 502),
    ("wow.command.bus.local-first.hand-off-timeout", 30.0, "1.5", 1.5),
    ("wow.event.bus.local-first.hand-off-timeout", 30.0, "2.5", 2.5),
    ("wow.eventsourcing.state.bus.local-first.hand-off-timeout", 30.0, "3", 3.0),
    ("wow.event.ack-on-unrecorded-failure", True, "false", False),
    ("wow.runtime.shutdown-timeout", 30.0, "12.5", 12.5),
    ("wow.transport", "in_memory", "redis", "redis"),
]


def _at(settings: WowSettings, spec_key: str) -> Any:
    value: Any = settings
    for part in spec_key.split(".")[1:]:
        value = getattr(value, part.replace("-", "_"))
    return value


@pytest.mark.parametrize(("key", "default", "text", "parsed"), SPEC_KEYS, ids=[k[0] for k in SPEC_KEYS])
def test_every_spec_key_maps_mechanically(
    monkeypatch: pytest.MonkeyPatch, key: str, default: Any, text: str, parsed: Any
) -> None:
    assert _at(WowSettings.load(), key) == default
    monkeypatch.setenv(env_var_for(key), text)
    assert _at(WowSettings.load(), key) == parsed


def test_the_mapping_rule() -> None:
    assert env_var_for("wow.command.bus.local-first.enabled") == "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED"
    assert env_var_for("wow.event.ack-on-unrecorded-failure") == "WOW_EVENT__ACK_ON_UNRECORDED_FAILURE"
    with pytest.raises(ValueError, match=r"starts with 'wow\.'"):
        env_var_for("command.bus")


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED", "maybe", "true or false"),
        ("WOW_EVENT__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK", "lots", "a whole number"),
        ("WOW_EVENT__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK", "0", "a value greater than 0"),
        ("WOW_RUNTIME__SHUTDOWN_TIMEOUT", "-1", "a value greater than 0"),
        ("WOW_RUNTIME__SHUTDOWN_TIMEOUT", "soon", "a number"),
        ("WOW_EVENT__RETRY__MAX_RETRIES", "1.5", "a whole number"),
        ("WOW_EVENT__ACK_ON_UNRECORDED_FAILURE", "", "true or false"),
        ("WOW_MESSAGING__CONTEXT_ALIASES", "not json", "a JSON object"),
        ("WOW_MESSAGING__CONTEXT_ALIASES", "[1, 2]", "a JSON object"),
        ("WOW_COMMAND", "x", "a JSON object"),
    ],
)
def test_a_wrong_value_names_the_variable_the_value_and_what_is_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, accepted: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        WowSettings.load()
    message = str(raised.value)
    assert variable in message
    assert repr(value) in message or value in message
    assert f"accepted: {accepted}" in message
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__


def test_a_variable_that_names_no_setting_is_named_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_COMMAND__BUS__LOCAL_FIRST__TYPO", "s3cret-value")
    with pytest.raises(SettingsError) as raised:
        WowSettings.load()
    message = str(raised.value)
    assert "WOW_COMMAND__BUS__LOCAL_FIRST__TYPO is not a setting; accepted: only the variables" in message
    assert "s3cret-value" not in message


def test_the_dot_env_file_is_read_and_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch, isolated_settings: Path
) -> None:
    (isolated_settings / ".env").write_text(
        "WOW_TRANSPORT=nats\nWOW_RUNTIME__SHUTDOWN_TIMEOUT=7\nWOW_PROBE__PORT=8081\n", encoding="utf-8"
    )
    settings = WowSettings.load()
    assert settings.transport == "nats"
    assert settings.runtime.shutdown_timeout == 7.0
    assert settings.section("probe", ProbeSettings).port == 8081
    monkeypatch.setenv("WOW_TRANSPORT", "redis")
    assert WowSettings.load().transport == "redis"


def test_a_wrong_value_in_the_dot_env_file_is_named(isolated_settings: Path) -> None:
    (isolated_settings / ".env").write_text("WOW_MESSAGING__CONTEXT_ALIASES={oops\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"WOW_MESSAGING__CONTEXT_ALIASES='\{oops'.*a JSON object"):
        WowSettings.load()


def test_json_settings_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_MESSAGING__CONTEXT_ALIASES", '{"order-service": "orders"}')
    assert WowSettings.load().messaging.context_aliases == {"order-service": "orders"}


def test_plugin_sections_read_their_prefix_and_report_wrong_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_PROBE__HOSTS", '["x", "y"]')
    monkeypatch.setenv("WOW_PROBE__TOKEN", "s3cret")
    section = WowSettings.load().section("probe", ProbeSettings)
    assert section.hosts == ["x", "y"]
    assert section.token.get_secret_value() == "s3cret"
    monkeypatch.setenv("WOW_PROBE__HOSTS", "x,y")
    with pytest.raises(SettingsError, match=r"WOW_PROBE__HOSTS='x,y'.*accepted: a JSON array"):
        WowSettings.load().section("probe", ProbeSettings)
    monkeypatch.setenv("WOW_PROBE__HOSTS", "[]")
    monkeypatch.setenv("WOW_PROBE__PORT", "http")
    with pytest.raises(SettingsError, match=r"WOW_PROBE__PORT='http'.*a whole number"):
        WowSettings.load().section("probe", ProbeSettings)


def test_a_wrong_secret_is_named_but_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_PROBE__TOKEN", "abc")
    with pytest.raises(SettingsError) as raised:
        WowSettings.load().section("probe", ProbeSettings)
    message = str(raised.value)
    assert "WOW_PROBE__TOKEN=********** is not accepted" in message
    assert "abc" not in message


def test_a_section_is_read_once_per_settings_object(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = WowSettings.load()
    first = settings.section("probe", ProbeSettings)
    monkeypatch.setenv("WOW_PROBE__PORT", "9")
    assert settings.section("probe", ProbeSettings) is first

    class Other(BaseModel):
        port: int = 1

    with pytest.raises(TypeError, match="section 'probe' was read as ProbeSettings"):
        settings.section("probe", Other)


def test_settings_are_frozen() -> None:
    settings = WowSettings.load()
    with pytest.raises(ValidationError):
        settings.transport = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        settings.command.bus.local_first.enabled = False  # type: ignore[misc]


def test_explicit_overrides_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_TRANSPORT", "redis")
    assert WowSettings.load(transport="kafka").transport == "kafka"
