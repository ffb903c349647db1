"""The ``nats`` settings section, the plugin's registrations and the stream layout."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from wow_core.plugins import load_plugins
from wow_core.runtime.settings import SettingsError, WowSettings
from wow_core.transport import DefaultTopicNaming
from wow_nats import InvalidTopicError, NatsSettings, NatsTransport, StreamLayout
from wow_nats.settings import SECTION


def section(monkeypatch: pytest.MonkeyPatch, **env: str) -> NatsSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return WowSettings.load().section(SECTION, NatsSettings)


def test_defaults_need_no_environment() -> None:
    settings = NatsSettings()
    assert settings.servers == ["nats://127.0.0.1:4222"]
    assert (settings.ack_wait, settings.max_deliver, settings.storage, settings.replicas) == (
        30.0,
        5,
        "file",
        1,
    )


def test_environment_variables_fill_the_section(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = section(
        monkeypatch,
        WOW_NATS__SERVERS="nats://a:4222, nats://b:4222",
        WOW_NATS__TOKEN="s3cret",
        WOW_NATS__ACK_WAIT="2.5",
        WOW_NATS__MAX_DELIVER="9",
        WOW_NATS__FETCH_BATCH="10",
        WOW_NATS__REPLICAS="3",
        WOW_NATS__STORAGE="memory",
        WOW_NATS__STREAM_PREFIX="team-a_",
    )
    assert settings.servers == ["nats://a:4222", "nats://b:4222"]
    assert settings.token == SecretStr("s3cret")
    assert (settings.ack_wait, settings.max_deliver, settings.fetch_batch) == (2.5, 9, 10)
    assert (settings.replicas, settings.storage, settings.stream_prefix) == (3, "memory", "team-a_")


def test_servers_may_be_a_json_array(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = section(monkeypatch, WOW_NATS__SERVERS='["tls://x:4222"]')
    assert settings.servers == ["tls://x:4222"]


def test_secrets_are_masked() -> None:
    settings = NatsSettings(password=SecretStr("hunter2"), token=SecretStr("tok"), user="u")
    assert "hunter2" not in repr(settings)
    assert "tok'" not in repr(settings)
    assert "hunter2" not in str(settings.model_dump())


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WOW_NATS__ACK_WAIT", "soon"),
        ("WOW_NATS__ACK_WAIT", "-1"),
        ("WOW_NATS__MAX_DELIVER", "0"),
        ("WOW_NATS__STORAGE", "disk"),
        ("WOW_NATS__REPLICAS", "7"),
        ("WOW_NATS__SERVERS", "http://x:80"),
        ("WOW_NATS__SERVERS", "[not json"),
        ("WOW_NATS__STREAM_PREFIX", "a.b"),
        ("WOW_NATS__DELIVER_POLICY", "last"),
        ("WOW_NATS__UNKNOWN_KEY", "1"),
    ],
)
def test_a_wrong_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        WowSettings.load().section(SECTION, NatsSettings)
    assert variable in str(raised.value)


def test_the_plugin_is_found_through_its_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_NATS__ACK_WAIT", "3")
    monkeypatch.setenv("WOW_MESSAGING__TOPIC_PREFIX", "acme.")
    registry = load_plugins()
    transport = registry.get("transport", "nats")
    assert transport.origin.distribution == "wow-nats"
    assert registry.get("settings", "nats").value is NatsSettings
    built = transport.value(WowSettings.load())
    assert isinstance(built, NatsTransport)
    assert built.settings.ack_wait == 3.0
    assert built.layout.topic_prefix == "acme."
    assert isinstance(built.naming, DefaultTopicNaming)
    assert built.naming.prefix == "acme."


def test_layout_stream_per_context_and_subject_per_topic() -> None:
    layout = StreamLayout("wow.", "p_")
    assert layout.subject("wow.orders.order.command") == "wow.orders.order.command"
    assert layout.base("wow.orders.order.command") == "wow.orders"
    assert (
        layout.stream("wow.orders.order.command") == layout.stream("wow.orders.cart.event") == "p_wow_orders"
    )
    assert layout.stream("wow.billing.bill.command") == "p_wow_billing"
    assert layout.stream_subjects("wow.orders") == ["wow.orders", "wow.orders.>"]
    assert layout.base(layout.dead_letter_subject("wow.orders.order.command")) == "wow.orders"
    # outside the prefix: the first token is the context
    assert layout.base("other.thing") == "other"
    assert layout.base("single") == "single"


def test_consumer_names_are_safe_and_distinct() -> None:
    one = StreamLayout.consumer("orders.processor", "wow.orders.order.event")
    two = StreamLayout.consumer("orders_processor", "wow.orders.order.event")
    assert one != two
    for name in (one, two, StreamLayout.consumer("g" * 300, "t." * 200 + "x")):
        assert all(ch.isalnum() or ch in "-_" for ch in name)
        assert len(name) < 120
    with pytest.raises(ValueError, match="group"):
        StreamLayout.consumer("", "t")


@pytest.mark.parametrize("topic", ["", "a b", "a.*", "*", ">", "a..b", "a.", "\x00", "é"])
def test_layout_refuses_what_is_not_a_subject(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        StreamLayout().subject(topic)
