"""Each concept owns its settings section; the runtime composes them into ``WowSettings``.

The old imports keep working: ``wow_core.runtime.settings`` re-exports every name that
moved (plugins written against it still import), and ``wow_core.runtime.cli.Command``
is the plugins' ``Command``.
"""

from __future__ import annotations

import pydantic
import pytest

import wow_core.runtime.settings as composed
from wow_core.command.settings import CommandSettings
from wow_core.event.settings import EventSettings, RetrySettings
from wow_core.eventsourcing.settings import EventSourcingSettings, StateSettings
from wow_core.messaging.local_first.settings import BusSettings, LocalFirstSettings
from wow_core.plugins import Command
from wow_core.settings import SettingsSection
from wow_core.transport.settings import MessagingSettings, ProcessSettings

SECTIONS = {
    "command": CommandSettings,
    "event": EventSettings,
    "eventsourcing": EventSourcingSettings,
    "messaging": MessagingSettings,
}


@pytest.mark.parametrize("field", sorted(SECTIONS))
def test_wow_settings_composes_the_section_its_concept_owns(field: str) -> None:
    assert composed.WowSettings.model_fields[field].annotation is SECTIONS[field]


def test_every_section_shares_the_bounded_frozen_base() -> None:
    sections = [*SECTIONS.values(), RetrySettings, StateSettings, BusSettings, LocalFirstSettings]
    sections.append(composed.RuntimeSettings)
    for section in sections:
        assert issubclass(section, SettingsSection)
    with pytest.raises(pydantic.ValidationError, match="finite"):
        LocalFirstSettings(hand_off_timeout=float("inf"))
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        CommandSettings(wait_timeuot=1.0)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "name",
    [
        "LocalFirstSettings",
        "BusSettings",
        "CommandSettings",
        "EventSettings",
        "RetrySettings",
        "EventSourcingSettings",
        "StateSettings",
        "MessagingSettings",
        "SettingsError",
        "BOUNDED",
        "MAX_COUNT",
        "MAX_NAME",
        "MAX_SECONDS",
        "MAX_TEXT",
        "Count",
        "NonNegativeCount",
        "Seconds",
        "NonNegativeSeconds",
        "Name",
        "TopicPrefix",
        "ENV_PREFIX",
        "NESTED",
        "env_name",
        "env_var_for",
    ],
)
def test_the_old_import_place_still_exports_every_moved_name(name: str) -> None:
    import wow_core.settings as base
    from wow_core import command, event, eventsourcing, transport
    from wow_core.messaging import local_first

    homes = [
        base,
        command.settings,
        event.settings,
        eventsourcing.settings,
        local_first.settings,
        transport.settings,
    ]
    home = next(module for module in homes if name in vars(module))
    assert getattr(composed, name) is getattr(home, name)
    assert name in composed.__all__


def test_wow_settings_is_what_a_plugin_factory_reads() -> None:
    settings: ProcessSettings = composed.WowSettings()
    assert settings.messaging.topic_prefix == "wow."
    assert settings.section("probe", LocalFirstSettings) == LocalFirstSettings()


def test_the_cli_command_type_is_the_plugins_one() -> None:
    from wow_core.runtime.cli import Command as CliCommand

    assert CliCommand is Command
