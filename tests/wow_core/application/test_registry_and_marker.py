"""TransportRegistry from settings (any installed transport can be a named one) and the marker."""

from __future__ import annotations

import pytest

from tests.wow_core.application.commands import Audit, ChargeCard
from tests.wow_core.application.support import RecordingTransport
from wow_core import transport_registry
from wow_core.application import (
    ApplicationTopicNaming,
    CommandMetadata,
    ReflectionCommandMetadataProvider,
    TransportConfigurationError,
    TransportRegistry,
    asynchronous,
)
from wow_core.plugins import load_plugins
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import SettingsError, WowSettings
from wow_core.transport import InMemoryTransport


def test_named_transports_are_built_from_settings_one_instance_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"payments": "in_memory", "mail": "in_memory"}')
    monkeypatch.setenv("WOW_MESSAGING__TOPIC_PREFIX", "acme.")
    registry = TransportRegistry.from_settings(WowSettings.load(), load_plugins())
    assert registry.names == ("payments", "mail")
    assert isinstance(registry.get("payments"), InMemoryTransport)
    assert registry.get("payments") is not registry.get("mail")
    assert registry.topic("payments") == "acme.application.payments"


async def test_transport_registry_builds_it_from_the_environment_and_async_with_starts_and_closes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"payments": "in_memory"}')
    monkeypatch.setenv("WOW_MESSAGING__TOPIC_PREFIX", "acme.")
    async with transport_registry() as registry:
        transport = registry.get("payments")
        assert isinstance(transport, InMemoryTransport)
        assert registry.topic("payments") == "acme.application.payments"
        assert not transport.closed
    assert transport.closed


def test_transport_registry_checks_the_settings_like_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"pay ments": "in_memory"}')
    with pytest.raises(SettingsError, match="WOW_APPLICATION__TRANSPORTS"):
        transport_registry()


class OwnNamespace(RecordingTransport):
    """A transport whose topics live under a prefix of its own (as Redis's key prefix)."""

    def __init__(self, topic: object = None) -> None:
        super().__init__()
        self.named = topic

    def application_topic(self, name: str, topic_prefix: str) -> str:
        topic = f"own:{topic_prefix}application.{name}" if self.named is None else self.named
        return topic  # type: ignore[return-value]


def test_a_transport_that_names_its_application_topics_names_them() -> None:
    transport = OwnNamespace()
    assert isinstance(transport, ApplicationTopicNaming)
    registry = TransportRegistry({"payments": transport, "mail": InMemoryTransport()}, topic_prefix="acme.")
    assert registry.topic("payments") == "own:acme.application.payments"
    assert registry.topic("mail") == "acme.application.mail", "a transport that names none gets the default"


@pytest.mark.parametrize("topic", ["", 5], ids=repr)
def test_a_transport_that_names_no_usable_topic_is_a_configuration_error(topic: object) -> None:
    with pytest.raises(TransportConfigurationError, match=r"the transport 'payments' \(OwnNamespace\) named"):
        TransportRegistry({"payments": OwnNamespace(topic)})


def test_a_transport_plugin_nobody_registered_is_a_settings_error_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"payments": "rabbitmq"}')
    with pytest.raises(
        SettingsError, match=r"WOW_APPLICATION__TRANSPORTS=.*'rabbitmq', which no plugin registers"
    ):
        TransportRegistry.from_settings(WowSettings.load(), load_plugins())


def test_a_wrong_transport_name_in_settings_is_refused_by_the_settings_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"pay ments": "in_memory"}')
    with pytest.raises(SettingsError, match="WOW_APPLICATION__TRANSPORTS"):
        create_container(WowSettings.load(), plugins=load_plugins())


def test_asking_for_a_name_that_is_not_configured_is_a_configuration_error() -> None:
    registry = TransportRegistry({"payments": InMemoryTransport()})
    with pytest.raises(TransportConfigurationError, match=r"no transport named 'mail'.*configured: payments"):
        registry.get("mail")
    with pytest.raises(TransportConfigurationError, match="'mail'"):
        registry.require(["payments", "mail"])


def test_only_transports_with_safe_names_are_registered() -> None:
    with pytest.raises(TransportConfigurationError, match="not a wow_core Transport"):
        TransportRegistry({"payments": object()})  # type: ignore[dict-item]
    with pytest.raises(TransportConfigurationError, match="transport name 'a/b'"):
        TransportRegistry({"a/b": InMemoryTransport()})


def test_the_marker_is_read_from_the_class_itself() -> None:
    provider = ReflectionCommandMetadataProvider()
    assert provider.metadata_of(ChargeCard) == CommandMetadata("payments")
    assert provider.metadata_of(Audit) == CommandMetadata(None)
    assert not provider.metadata_of(Audit).is_asynchronous

    class SubCharge(ChargeCard):
        pass

    assert provider.metadata_of(SubCharge).transport is None, (
        "a subclass is asynchronous only if marked itself"
    )


@pytest.mark.parametrize("transport", ["", "pay ments", "../etc", 5], ids=repr)
def test_the_marker_takes_a_transport_name(transport: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        asynchronous(transport=transport)  # type: ignore[arg-type]
