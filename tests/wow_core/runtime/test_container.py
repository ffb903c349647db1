from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from dependency_injector import providers

from tests.wow_core.runtime import probe_plugin
from tests.wow_core.runtime.probe_plugin import ProbeSettings, ProbeTransport
from wow_core.context import MetricsSourceCapture
from wow_core.event.failure import NONE_RECORDER
from wow_core.metrics import InMemoryMetrics, NoopMetrics
from wow_core.model import BodyTypeRegistry, MessageCodec
from wow_core.plugins import PluginError, PluginRegistry, hookimpl, load_plugins
from wow_core.runtime.container import SELECTIONS, WowContainer, create_container, select
from wow_core.runtime.settings import SettingsError, WowSettings


@pytest.fixture
def plugins() -> PluginRegistry:
    return load_plugins(extra=[("probe", probe_plugin)])


def test_the_selected_transport_is_built_from_the_settings(plugins: PluginRegistry) -> None:
    settings = WowSettings(transport="probe")
    container = create_container(settings, plugins=plugins)
    transport = container.transport()
    assert isinstance(transport, ProbeTransport)
    assert transport.settings is settings
    assert container.transport() is transport, "one transport per container"


def test_the_transport_follows_wow_transport(
    monkeypatch: pytest.MonkeyPatch, plugins: PluginRegistry
) -> None:
    monkeypatch.setenv("WOW_TRANSPORT", "probe")
    container = create_container(plugins=plugins)
    assert isinstance(container.transport(), ProbeTransport)


def test_an_unknown_transport_names_the_variable_the_value_and_the_accepted_names(
    plugins: PluginRegistry,
) -> None:
    with pytest.raises(SettingsError) as raised:
        create_container(WowSettings(transport="carrier-pigeon"), plugins=plugins)
    message = str(raised.value)
    assert "WOW_TRANSPORT='carrier-pigeon'" in message
    assert "in_memory" in message
    assert "probe" in message


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"failure_recorder": "x"}, "WOW_FAILURE_RECORDER='x'"),
        ({"metrics": "x"}, "WOW_METRICS='x'"),
        ({"messaging": {"decode_failure": "x"}}, "WOW_MESSAGING__DECODE_FAILURE='x'"),
        ({"eventsourcing": {"store": "x"}}, "WOW_EVENTSOURCING__STORE='x'"),
        ({"eventsourcing": {"snapshot": "x"}}, "WOW_EVENTSOURCING__SNAPSHOT='x'"),
    ],
)
def test_every_selection_is_checked_at_start_up(
    plugins: PluginRegistry, overrides: dict[str, object], variable: str
) -> None:
    with pytest.raises(SettingsError, match=variable):
        create_container(WowSettings.model_validate(overrides), plugins=plugins)


def test_the_defaults_select_registered_built_ins() -> None:
    registry = load_plugins()
    settings = WowSettings()
    for kind in SELECTIONS:
        assert select(registry, settings, kind).origin.distribution == "wow-core"


def test_metrics_are_noop_by_default_and_in_memory_on_request(plugins: PluginRegistry) -> None:
    assert isinstance(create_container(WowSettings(), plugins=plugins).metrics(), NoopMetrics)
    metrics = create_container(WowSettings(metrics="in_memory"), plugins=plugins).metrics()
    assert isinstance(metrics, InMemoryMetrics)


def test_a_test_overrides_a_single_provider(plugins: PluginRegistry) -> None:
    container = create_container(WowSettings(transport="probe"), plugins=plugins)
    fake = ProbeTransport(WowSettings())
    with container.transport.override(providers.Object(fake)):
        assert container.transport() is fake
    assert container.transport() is not fake
    metrics = InMemoryMetrics()
    container.metrics.override(providers.Object(metrics))
    assert container.metrics() is metrics


def test_shared_singletons(plugins: PluginRegistry) -> None:
    container = create_container(WowSettings(), plugins=plugins)
    assert isinstance(container.body_types(), BodyTypeRegistry)
    codec = container.codec()
    assert isinstance(codec, MessageCodec)
    assert container.codec() is codec
    assert container.failure_recorder() is NONE_RECORDER


def test_every_registered_context_capture_is_collected(plugins: PluginRegistry) -> None:
    captures = create_container(WowSettings(), plugins=plugins).context_captures()
    assert any(isinstance(capture, MetricsSourceCapture) for capture in captures)


def test_a_factory_returning_the_wrong_thing_names_its_plugin(plugins: PluginRegistry) -> None:
    container = create_container(WowSettings(transport="not_a_transport"), plugins=plugins)
    with pytest.raises(PluginError, match=r"plugin 'probe'.*not_a_transport.*not a Transport"):
        container.transport()


class _Mistaken:
    """A plugin whose registrations are wrong in the ways a plugin author gets them wrong."""

    @hookimpl
    def register_transports(self, register: Callable[[str, Any], None]) -> None:
        def raising(settings: Any) -> Any:
            raise RuntimeError("cannot build: missing WOW_MISTAKEN__URL")

        register("raising", raising)
        register("not_callable", object())

    @hookimpl
    def register_settings(self, register: Callable[[str, Any], None]) -> None:
        register("messaging", ProbeSettings)


def test_a_factory_that_raises_or_is_not_callable_is_the_plugins_error_not_the_apps() -> None:
    plugins = load_plugins(extra=[("mistaken", _Mistaken())], entry_points=False)
    container = create_container(WowSettings(transport="raising"), plugins=plugins, validate=False)
    with pytest.raises(
        PluginError, match=r"plugin 'mistaken'.*transport factory 'raising' raised RuntimeError"
    ):
        container.transport()
    container = create_container(WowSettings(transport="not_callable"), plugins=plugins, validate=False)
    with pytest.raises(PluginError, match=r"transport factory 'not_callable' is an object, not a callable"):
        container.transport()


def test_a_plugin_section_named_like_a_core_section_is_refused() -> None:
    plugins = load_plugins(extra=[("mistaken", _Mistaken())], entry_points=False)
    container = create_container(WowSettings(), plugins=plugins, validate=False)
    with pytest.raises(PluginError, match=r"plugin 'mistaken'.*settings section 'messaging' is the core's"):
        container.plugin_sections()


def test_plugin_sections_are_read_and_validated_at_start_up(
    monkeypatch: pytest.MonkeyPatch, plugins: PluginRegistry
) -> None:
    monkeypatch.setenv("WOW_PROBE__PORT", "7443")
    sections = create_container(WowSettings(), plugins=plugins).plugin_sections()
    assert sections["probe"] == ProbeSettings(port=7443)
    monkeypatch.setenv("WOW_PROBE__PORT", "99999")
    with pytest.raises(SettingsError, match=r"WOW_PROBE__PORT='99999'.*less than or equal to 65535"):
        create_container(WowSettings(), plugins=plugins)


def test_the_container_class_reads_the_environment_when_not_given_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_SERVICE_NAME", "orders")
    assert WowContainer().settings().service_name == "orders"


class CodecAwareStore:
    def __init__(self) -> None:
        self.codec: MessageCodec | None = None

    def use_codec(self, codec: MessageCodec) -> None:
        self.codec = codec


class CodecAwarePlugin:
    from wow_core.plugins import hookimpl

    @hookimpl
    def register_event_stores(self, register: object) -> None:
        register("codec-aware", lambda settings: CodecAwareStore())  # type: ignore[operator]

    @hookimpl
    def register_snapshot_repositories(self, register: object) -> None:
        register("codec-aware", lambda settings: CodecAwareStore())  # type: ignore[operator]


def test_a_codec_aware_store_gets_the_process_codec() -> None:
    plugins = load_plugins(extra=[("codec-aware", CodecAwarePlugin())])
    settings = WowSettings(eventsourcing={"store": "codec-aware", "snapshot": "codec-aware"})
    container = create_container(settings, plugins=plugins)
    store, snapshots = container.event_store(), container.snapshot_repository()
    assert isinstance(store, CodecAwareStore)
    assert isinstance(snapshots, CodecAwareStore)
    assert store.codec is container.codec()
    assert snapshots.codec is container.codec()
