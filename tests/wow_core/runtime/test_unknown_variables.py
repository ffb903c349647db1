"""A misspelt ``WOW_*`` variable is named at start-up instead of being silently ignored."""

from __future__ import annotations

import logging

import pytest

from wow_core.runtime.container import create_container
from wow_core.runtime.settings import unknown_variables


def test_a_misspelt_variable_is_named_with_the_setting_it_resembles() -> None:
    found = unknown_variables([], {"WOW_TRANSPROT": "redis", "WOW_TRANSPORT": "in_memory"})
    assert found == ["WOW_TRANSPROT is not a wow-py setting and is ignored (did you mean WOW_TRANSPORT?)"]


def test_settings_plugin_sections_and_foreign_variables_are_not_reported() -> None:
    environ = {
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": "false",
        "WOW_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9092",
        "WOW_TEST_KAFKA_BOOTSTRAP": "127.0.0.1:9092",
        "WOW_BENCH_RECORDS": "10",
        "WOW_CONFORMANCE_TIMEOUT": "30",
        "PATH": "/usr/bin",
    }
    assert unknown_variables(["kafka"], environ) == []


def test_an_unknown_section_is_reported_without_a_hint_when_nothing_is_close() -> None:
    assert unknown_variables([], {"WOW_ZZZ__X": "1"}) == ["WOW_ZZZ__X is not a wow-py setting and is ignored"]


def test_the_container_logs_unknown_variables_at_start_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("WOW_SERVICE_NAMEE", "bank")
    with caplog.at_level(logging.WARNING, logger="wow.settings"):
        create_container()
    assert any("WOW_SERVICE_NAMEE is not a wow-py setting" in record.message for record in caplog.records)
