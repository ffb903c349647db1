"""Where a setting came from and what it resembles (issue 11, item 11).

Variable names are case-insensitive (pydantic-settings' default): ``wow_transport`` and
``WOW_transport`` set ``WOW_TRANSPORT``, so they are neither warned about nor ignored. The
``.env`` file is a source like the environment: its typos get the same hints, and a
wrong value read from it says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wow_core.runtime.probe_plugin import ProbeSettings
from wow_core.runtime.settings import SettingsError, WowSettings, unknown_variables


def _refused(**variables: str) -> str:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        with pytest.raises(SettingsError) as raised:
            WowSettings.load()
    return str(raised.value)


def test_a_misspelt_variable_in_dot_env_gets_the_same_hint_naming_the_file(isolated_settings: Path) -> None:
    (isolated_settings / ".env").write_text("WOW_TRANSPROT=redis\n", encoding="utf-8")
    assert unknown_variables([]) == [
        "WOW_TRANSPROT (in .env) is not a wow-py setting and is ignored (did you mean WOW_TRANSPORT?)"
    ]


def test_a_wrong_value_from_dot_env_says_it_came_from_dot_env(isolated_settings: Path) -> None:
    (isolated_settings / ".env").write_text("WOW_RUNTIME__SHUTDOWN_TIMEOUT=soon\n", encoding="utf-8")
    with pytest.raises(SettingsError) as raised:
        WowSettings.load()
    assert "WOW_RUNTIME__SHUTDOWN_TIMEOUT='soon' (from .env) is not accepted" in str(raised.value)


def test_a_wrong_value_from_the_environment_does_not_blame_dot_env(
    isolated_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_settings / ".env").write_text("WOW_RUNTIME__SHUTDOWN_TIMEOUT=5\n", encoding="utf-8")
    monkeypatch.setenv("WOW_RUNTIME__SHUTDOWN_TIMEOUT", "soon")
    with pytest.raises(SettingsError) as raised:
        WowSettings.load()
    assert "WOW_RUNTIME__SHUTDOWN_TIMEOUT='soon' is not accepted" in str(raised.value)
    assert ".env" not in str(raised.value)


@pytest.mark.parametrize("variable", ["WOW_transport", "wow_transport", "Wow_Transport"])
def test_names_are_case_insensitive_and_the_warning_agrees(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "redis")
    assert WowSettings.load().transport == "redis"
    assert unknown_variables([]) == []


def test_a_misspelt_lower_case_variable_is_warned_about_too() -> None:
    assert unknown_variables([], {"wow_transprot": "redis"}) == [
        "wow_transprot is not a wow-py setting and is ignored (did you mean WOW_TRANSPORT?)"
    ]


@pytest.mark.parametrize("variable", ["WOW_LOG_LEVEL", "WOW_DEBUG", "WOW_ZONE"])
def test_no_hint_when_no_setting_is_genuinely_close(variable: str) -> None:
    assert unknown_variables([], {variable: "1"}) == [f"{variable} is not a wow-py setting and is ignored"]


@pytest.mark.parametrize(
    ("variable", "hint"),
    [
        ("WOW_SERVICE_NAMEE", "WOW_SERVICE_NAME"),
        ("WOW_MAX_IN_FLIGHT", "WOW_RUNTIME__MAX_IN_FLIGHT"),
        ("WOW_SHUTDOWN_TIMEOUT", "WOW_RUNTIME__SHUTDOWN_TIMEOUT"),
        ("WOW_PROBE_PORT", "WOW_PROBE__PORT"),
    ],
)
def test_the_hint_is_the_close_setting_wherever_it_is(variable: str, hint: str) -> None:
    found = unknown_variables({"probe": ProbeSettings}, {variable: "1"})
    assert found == [f"{variable} is not a wow-py setting and is ignored (did you mean {hint}?)"]


def test_a_bad_url_is_one_clean_reason() -> None:
    from wow_core.plugins import load_plugins

    registration = load_plugins().get("settings", "redis")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WOW_REDIS__URL", "http://127.0.0.1:6379")
        with pytest.raises(SettingsError) as raised:
            WowSettings.load().section("redis", registration.value)
    message = str(raised.value)
    assert (
        "WOW_REDIS__URL='http://127.0.0.1:6379' is not accepted: use a redis://, rediss:// or unix:// URL"
        in (message)
    )
    assert "Value error" not in message


def test_a_typo_inside_a_nested_variable_names_the_whole_variable_and_the_close_one() -> None:
    message = _refused(WOW_COMMAND__BUS__LOCL_FIRST__ENABLED="false")
    assert (
        "WOW_COMMAND__BUS__LOCL_FIRST__ENABLED is not a setting (did you mean "
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED?); accepted: only the variables `wow settings` lists"
    ) in message


def test_a_setting_under_the_wrong_section_names_where_it_is() -> None:
    message = _refused(WOW_COMMAND__MAX_IN_FLIGHT="10")
    assert "WOW_COMMAND__MAX_IN_FLIGHT is not a setting (did you mean WOW_RUNTIME__MAX_IN_FLIGHT?)" in message


def _redis_section_refused(variable: str, value: str) -> str:
    from wow_core.plugins import load_plugins

    model = load_plugins().get("settings", "redis").value
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(variable, value)
        with pytest.raises(SettingsError) as raised:
            WowSettings.load().section("redis", model)
    return str(raised.value)


def test_a_typo_in_a_plugin_section_names_the_whole_variable() -> None:
    message = _redis_section_refused("WOW_REDIS__KEY_PREFX", "app")
    assert "WOW_REDIS__KEY_PREFX is not a setting (did you mean WOW_REDIS__KEY_PREFIX?)" in message


def test_an_unknown_variable_does_not_show_its_value_it_may_be_a_misspelt_secret() -> None:
    message = _redis_section_refused("WOW_REDIS__PASWORD", "hunter2-secret")
    assert "WOW_REDIS__PASWORD is not a setting (did you mean WOW_REDIS__PASSWORD?)" in message
    assert "hunter2" not in message


def test_a_one_letter_slip_in_a_short_name_gets_its_hint() -> None:
    """``URI`` for ``URL``: too short for the similarity ratio (0.67), one letter all the same
    (the configuration page's own example)."""
    message = _redis_section_refused("WOW_REDIS__URI", "redis://127.0.0.1:6379/0")
    assert "WOW_REDIS__URI is not a setting (did you mean WOW_REDIS__URL?)" in message
    assert "127.0.0.1" not in message
