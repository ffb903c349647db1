"""The ``kafka`` settings section, the plugin registration and the client configuration."""

from __future__ import annotations

import pytest

from wow_core.application import TransportRegistry
from wow_core.plugins import load_plugins
from wow_core.runtime.settings import SettingsError, WowSettings, load_section
from wow_kafka import KafkaSettings, KafkaTransport
from wow_kafka.connection import common_config, consumer_config, producer_config
from wow_kafka.plugin import kafka_transport


def test_env_vars_fill_the_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_KAFKA__BOOTSTRAP_SERVERS", "a:9092, b:9093")
    monkeypatch.setenv("WOW_KAFKA__PARTITIONS", "12")
    monkeypatch.setenv("WOW_KAFKA__ACKS", "1")
    monkeypatch.setenv("WOW_KAFKA__LINGER_MS", "5")
    monkeypatch.setenv("WOW_KAFKA__COMPRESSION_TYPE", "gzip")
    monkeypatch.setenv("WOW_KAFKA__AUTO_CREATE_TOPICS", "false")
    settings = load_section("kafka", KafkaSettings)
    assert settings.bootstrap_list == ["a:9092", "b:9093"]
    assert settings.partitions == 12
    assert settings.auto_create_topics is False
    producer = producer_config(settings, common_config(settings))
    assert producer["acks"] == 1
    assert producer["linger_ms"] == 5
    assert producer["compression_type"] == "gzip"


def test_defaults_are_the_safe_ones() -> None:
    settings = KafkaSettings()
    producer = producer_config(settings, common_config(settings))
    assert producer["acks"] == "all"
    assert producer["compression_type"] is None
    consumer = consumer_config(settings, common_config(settings), "g")
    assert consumer["enable_auto_commit"] is False
    # a group without committed offsets starts at the earliest retained record
    assert consumer["auto_offset_reset"] == "earliest"
    assert consumer["group_id"] == "g"


def test_secrets_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_KAFKA__SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("WOW_KAFKA__SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("WOW_KAFKA__SASL_USERNAME", "svc")
    monkeypatch.setenv("WOW_KAFKA__SASL_PASSWORD", "hunter2")
    settings = load_section("kafka", KafkaSettings)
    assert "hunter2" not in repr(settings)
    assert "hunter2" not in settings.model_dump_json()
    config = common_config(settings)
    assert config["sasl_plain_password"] == "hunter2"
    assert config["sasl_mechanism"] == "SCRAM-SHA-256"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("WOW_KAFKA__PARTITIONS", "0", "WOW_KAFKA__PARTITIONS"),
        ("WOW_KAFKA__ACKS", "2", "WOW_KAFKA__ACKS"),
        ("WOW_KAFKA__SECURITY_PROTOCOL", "TLS", "WOW_KAFKA__SECURITY_PROTOCOL"),
        ("WOW_KAFKA__BOOTSTRAP_SERVERS", "no-port", "host:port"),
        ("WOW_KAFKA__SASL_MECHANISM", "PLAIN", "SASL_PLAINTEXT or SASL_SSL"),
        ("WOW_KAFKA__TOPIC_PREFIX", "bad prefix/", "WOW_KAFKA__TOPIC_PREFIX"),
        ("WOW_KAFKA__UNKNOWN_OPTION", "1", "WOW_KAFKA__UNKNOWN_OPTION"),
    ],
)
def test_wrong_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=says):
        load_section("kafka", KafkaSettings)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WOW_KAFKA__BOOTSTRAP_SERVERS", "no-port"),
        ("WOW_KAFKA__BOOTSTRAP_SERVERS", "a:9092,:9093"),
        ("WOW_KAFKA__BOOTSTRAP_SERVERS", "a:99999"),
        ("WOW_KAFKA__BOOTSTRAP_SERVERS", ""),
        ("WOW_KAFKA__TOPIC_PREFIX", "bad prefix/"),
    ],
)
def test_a_bad_value_names_its_exact_variable_not_the_section(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_section("kafka", KafkaSettings)
    assert f"{variable}={value!r} is not accepted" in str(raised.value)
    assert "WOW_KAFKA is not accepted" not in str(raised.value)


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        (
            {"WOW_KAFKA__SESSION_TIMEOUT_MS": "1000", "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": "1000"},
            ["WOW_KAFKA__HEARTBEAT_INTERVAL_MS", "WOW_KAFKA__SESSION_TIMEOUT_MS"],
        ),
        (
            {"WOW_KAFKA__SASL_MECHANISM": "PLAIN"},
            ["WOW_KAFKA__SASL_MECHANISM", "WOW_KAFKA__SECURITY_PROTOCOL"],
        ),
        ({"WOW_KAFKA__SECURITY_PROTOCOL": "SASL_SSL"}, ["WOW_KAFKA__SASL_MECHANISM"]),
        (
            {"WOW_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "WOW_KAFKA__SASL_MECHANISM": "PLAIN"},
            ["WOW_KAFKA__SASL_USERNAME", "WOW_KAFKA__SASL_PASSWORD"],
        ),
        ({"WOW_KAFKA__SSL_KEYFILE": "key.pem"}, ["WOW_KAFKA__SSL_KEYFILE", "WOW_KAFKA__SSL_CERTFILE"]),
    ],
)
def test_a_combination_refused_names_the_variables_involved(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: list[str]
) -> None:
    for variable, value in variables.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_section("kafka", KafkaSettings)
    for variable in named:
        assert variable in str(raised.value)
    # the section's own check: its message is the line, not "WOW_KAFKA is not accepted: ..."
    (line,) = str(raised.value).splitlines()[1:]
    assert line.strip().startswith("WOW_KAFKA__"), line
    assert "WOW_KAFKA is not accepted" not in line


def test_the_heartbeat_must_be_shorter_than_the_session() -> None:
    with pytest.raises(ValueError, match="HEARTBEAT_INTERVAL_MS"):
        KafkaSettings(session_timeout_ms=1000, heartbeat_interval_ms=1000)


def test_ssl_settings_build_a_context(tmp_path: pytest.TempPathFactory) -> None:
    settings = KafkaSettings(security_protocol="SSL", ssl_check_hostname=False)
    config = common_config(settings)
    assert config["security_protocol"] == "SSL"
    assert config["ssl_context"].check_hostname is False
    with pytest.raises(ValueError, match="SSL_KEYFILE needs WOW_KAFKA__SSL_CERTFILE"):
        KafkaSettings(security_protocol="SSL", ssl_keyfile="key.pem")


def test_the_plugin_registers_the_transport_and_the_section(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = load_plugins()
    transport = registry.get("transport", "kafka")
    assert transport.origin.distribution == "wow-kafka"
    assert registry.get("settings", "kafka").value is KafkaSettings
    monkeypatch.setenv("WOW_KAFKA__BOOTSTRAP_SERVERS", "broker:19092")
    monkeypatch.setenv("WOW_MESSAGING__TOPIC_PREFIX", "acme.")
    built = kafka_transport(WowSettings.load())
    assert isinstance(built, KafkaTransport)
    assert built.settings.bootstrap_servers == "broker:19092"
    from wow_core.model import NamedAggregate, TopicKind

    assert built.naming.topic(NamedAggregate("bank", "account"), TopicKind.EVENT) == "acme.bank.account.event"
    monkeypatch.setenv("WOW_KAFKA__TOPIC_PREFIX", "kfk.")
    assert (
        kafka_transport(WowSettings.load()).naming.topic(NamedAggregate("bank", "account"), TopicKind.STATE)
        == "kfk.bank.account.state"
    )


def test_wow_settings_prints_the_section_with_secrets_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from wow_core.runtime.cli import main

    monkeypatch.setenv("WOW_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("WOW_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("WOW_KAFKA__SASL_USERNAME", "svc")
    monkeypatch.setenv("WOW_KAFKA__SASL_PASSWORD", "hunter2")
    monkeypatch.setenv("WOW_KAFKA__SSL_KEY_PASSWORD", "keypass")
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    assert "WOW_KAFKA__SASL_USERNAME=svc" in out
    assert "WOW_KAFKA__SASL_PASSWORD=**********" in out
    assert "hunter2" not in out
    assert "keypass" not in out


def _group_id(transport: KafkaTransport, group: str) -> str:
    receiver = transport.open(group, ["wow.x.y.command"])
    return str(receiver.group)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, "wow.bank.command"),
        ({"WOW_MESSAGING__TOPIC_PREFIX": "staging."}, "staging.bank.command"),
        ({"WOW_KAFKA__TOPIC_PREFIX": "prod."}, "prod.bank.command"),
        ({"WOW_KAFKA__TOPIC_PREFIX": "prod.", "WOW_KAFKA__GROUP_PREFIX": "team-a."}, "team-a.bank.command"),
        ({"WOW_KAFKA__TOPIC_PREFIX": "prod.", "WOW_KAFKA__GROUP_PREFIX": ""}, "bank.command"),
    ],
)
def test_consumer_groups_live_in_the_topic_prefix_namespace(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], expected: str
) -> None:
    """Kafka groups are cluster-wide: two applications separated by their topic prefix never
    share a group (a dead member of one would stall the other's rebalances)."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    transport = KafkaTransport.from_settings(WowSettings.load())
    assert _group_id(transport, "bank.command") == expected


def test_a_group_prefix_with_other_characters_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_KAFKA__GROUP_PREFIX", "a b")
    with pytest.raises(SettingsError, match="WOW_KAFKA__GROUP_PREFIX"):
        load_section("kafka", KafkaSettings)


@pytest.mark.parametrize(
    ("kafka_prefix", "topic"),
    [(None, "acme.application.payments"), ("k.", "k.application.payments")],
    ids=["the messaging prefix", "WOW_KAFKA__TOPIC_PREFIX"],
)
def test_application_topics_carry_the_kafka_topic_prefix_like_every_topic(
    monkeypatch: pytest.MonkeyPatch, kafka_prefix: str | None, topic: str
) -> None:
    monkeypatch.setenv("WOW_APPLICATION__TRANSPORTS", '{"payments": "kafka"}')
    monkeypatch.setenv("WOW_MESSAGING__TOPIC_PREFIX", "acme.")
    if kafka_prefix is not None:
        monkeypatch.setenv("WOW_KAFKA__TOPIC_PREFIX", kafka_prefix)
    registry = TransportRegistry.from_settings(WowSettings.load(), load_plugins())
    assert registry.topic("payments") == topic
