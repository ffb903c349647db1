"""The ``redis`` settings section and the plugin's registrations."""

from __future__ import annotations

import pytest

from wow_core.model import NamedAggregate, TopicKind
from wow_core.plugins import load_plugins
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import SettingsError, WowSettings, load_section
from wow_redis import RedisEventStore, RedisSettings, RedisSnapshotRepository, RedisStreamTransport
from wow_redis.connection import create_client
from wow_redis.settings import GroupStart


def test_every_setting_is_read_from_wow_redis_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "URL": "rediss://cache.example:6380/2",
        "USERNAME": "svc",
        "PASSWORD": "s3cret",
        "TLS_VERIFY": "false",
        "KEY_PREFIX": "prod:",
        "CONSUMER_NAME": "node-1",
        "GROUP_START": "earliest",
        "BLOCK_TIME": "0.5",
        "BATCH_SIZE": "64",
        "CLAIM_IDLE_TIME": "30",
        "MAX_DELIVERIES": "5",
        "MAXLEN": "5000",
        "ACK_CONFIRMED": "true",
    }
    for name, value in values.items():
        monkeypatch.setenv(f"WOW_REDIS__{name}", value)
    settings = load_section("redis", RedisSettings)
    assert settings.url == "rediss://cache.example:6380/2"
    assert settings.password is not None
    assert settings.password.get_secret_value() == "s3cret"
    assert (settings.username, settings.key_prefix, settings.consumer_name) == ("svc", "prod:", "node-1")
    assert settings.group_start is GroupStart.EARLIEST
    assert (settings.block_time, settings.batch_size, settings.claim_idle_time) == (0.5, 64, 30.0)
    assert (settings.max_deliveries, settings.maxlen, settings.ack_confirmed) == (5, 5000, True)
    assert not settings.tls_verify


def test_recovery_and_retention_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_REDIS__CLAIM_IDLE_TIME", "")
    monkeypatch.setenv("WOW_REDIS__MAXLEN", "none")
    settings = load_section("redis", RedisSettings)
    assert settings.claim_idle_time is None
    assert settings.resolved_claim_interval() is None
    assert settings.maxlen is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("URL", "http://localhost"),
        ("BATCH_SIZE", "0"),
        ("BLOCK_TIME", "-1"),
        ("MAX_DELIVERIES", "many"),
        ("GROUP_START", "middle"),
        ("CLAIM_IDLE_TIME", "0.001"),
        ("NO_SUCH_SETTING", "1"),
    ],
)
def test_a_wrong_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"WOW_REDIS__{name}", value)
    with pytest.raises(SettingsError) as raised:
        load_section("redis", RedisSettings)
    assert f"WOW_REDIS__{name}" in str(raised.value)


def test_the_password_never_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = RedisSettings(url="redis://svc:in-the-url@h:6379/0", password="in-a-variable")
    shown = repr(settings) + str(settings) + repr(RedisStreamTransport(settings))
    assert "in-the-url" not in shown
    assert "in-a-variable" not in shown
    assert "svc:***@h:6379" in shown


def test_the_client_gets_tls_and_credentials_from_the_settings() -> None:
    client = create_client(
        RedisSettings(url="redis://h:6379/3", tls=True, password="pw", username="u", tls_verify=False)
    )
    kwargs = client.connection_pool.connection_kwargs
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    assert (kwargs["password"], kwargs["username"], kwargs["db"]) == ("pw", "u", 3)
    assert kwargs["ssl_cert_reqs"] == "none"


def test_the_plugin_registers_transport_stores_and_section() -> None:
    plugins = load_plugins()
    for kind in ("transport", "event_store", "snapshot_repository", "settings"):
        registration = plugins.get(kind, "redis")
        assert registration.origin.distribution == "wow-redis"
    assert plugins.get("settings", "redis").value is RedisSettings


def test_the_runtime_builds_the_redis_pieces_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_TRANSPORT", "redis")
    monkeypatch.setenv("WOW_EVENTSOURCING__STORE", "redis")
    monkeypatch.setenv("WOW_EVENTSOURCING__SNAPSHOT", "redis")
    monkeypatch.setenv("WOW_REDIS__KEY_PREFIX", "app:")
    monkeypatch.setenv("WOW_MESSAGING__CONTEXT_ALIASES", '{"bank": "b"}')
    container = create_container(WowSettings.load())
    transport = container.transport()
    assert isinstance(transport, RedisStreamTransport)
    assert transport.naming.topic(NamedAggregate("bank", "account"), TopicKind.EVENT) == "app:b.account:event"
    store, snapshots = container.event_store(), container.snapshot_repository()
    assert isinstance(store, RedisEventStore)
    assert isinstance(snapshots, RedisSnapshotRepository)
    assert store.codec is container.codec()
    assert snapshots.codec is container.codec()
