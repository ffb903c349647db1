"""The ``postgres`` settings section (the DSN password never shown), the plugin's
registrations, the versioned migrations and ``wow postgres migrate``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import pytest
from pydantic import SecretStr

from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.plugins import load_plugins
from wow_core.runtime.cli import main
from wow_core.runtime.settings import SettingsError, WowSettings
from wow_postgres import (
    MigrationError,
    PostgresEventStore,
    PostgresSettings,
    PostgresSnapshotRepository,
    PostgresTransport,
    PostgresUnavailableError,
    masked_dsn,
    migrate,
)
from wow_postgres.migrations import applied, latest_version
from wow_postgres.settings import SECTION

pytestmark = pytest.mark.postgres

SECRET_DSN = "postgresql://app:hunter2@127.0.0.1:1/test"


def section(monkeypatch: pytest.MonkeyPatch, **env: str) -> PostgresSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return WowSettings.load().section(SECTION, PostgresSettings)


def test_environment_variables_fill_the_section(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = section(
        monkeypatch,
        WOW_POSTGRES__DSN="postgres://db.internal:5433/orders",
        WOW_POSTGRES__PASSWORD="s3cret",
        WOW_POSTGRES__SCHEMA_NAME="orders_es",
        WOW_POSTGRES__EVENTS_TABLE="streams",
        WOW_POSTGRES__POOL_MAX_SIZE="20",
        WOW_POSTGRES__MIGRATE_ON_START="false",
    )
    assert settings.dsn == "postgres://db.internal:5433/orders"
    assert settings.password == SecretStr("s3cret")
    assert (settings.schema_name, settings.events_table, settings.snapshots_table) == (
        "orders_es",
        "streams",
        "snapshot",
    )
    assert (settings.pool_max_size, settings.migrate_on_start) == (20, False)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WOW_POSTGRES__DSN", "mysql://x/y"),
        ("WOW_POSTGRES__SCHEMA_NAME", 'wow"; DROP SCHEMA public; --'),
        ("WOW_POSTGRES__SCHEMA_NAME", "Upper"),
        ("WOW_POSTGRES__EVENTS_TABLE", "a" * 64),
        ("WOW_POSTGRES__POOL_MAX_SIZE", "0"),
        ("WOW_POSTGRES__RETRY_BACKOFF", "-1"),
        ("WOW_POSTGRES__UNKNOWN_KEY", "1"),
    ],
)
def test_a_wrong_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        WowSettings.load().section(SECTION, PostgresSettings)
    assert variable in str(raised.value)


def test_the_password_is_masked_in_repr_and_in_wow_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = PostgresSettings(dsn=SECRET_DSN, password=SecretStr("other-secret"))
    assert "hunter2" not in repr(settings)
    assert "other-secret" not in repr(settings)
    assert settings.masked_dsn == masked_dsn(SECRET_DSN) == "postgresql://app:***@127.0.0.1:1/test"
    monkeypatch.setenv("WOW_POSTGRES__DSN", SECRET_DSN)
    assert main(["settings"]) == 0
    shown = capsys.readouterr().out
    assert "app:***@127.0.0.1:1" in shown
    assert "hunter2" not in shown


async def test_an_unreachable_server_fails_after_the_retries_with_the_password_masked() -> None:
    store = PostgresEventStore(
        PostgresSettings(dsn=SECRET_DSN, retry_attempts=2, retry_backoff=0.01, connect_timeout=2)
    )
    with pytest.raises(PostgresUnavailableError) as raised:
        await asyncio.wait_for(store.start(), 60)
    assert "after 3 attempt(s)" in str(raised.value)
    assert "app:***@127.0.0.1:1" in str(raised.value)
    assert "hunter2" not in str(raised.value)


def test_the_plugin_registers_the_stores_the_command_and_the_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_POSTGRES__SCHEMA_NAME", "from_env")
    registry = load_plugins()
    store = registry.get("event_store", "postgres")
    assert store.origin.distribution == "wow-postgres"
    assert registry.get("settings", "postgres").value is PostgresSettings
    built = store.value(WowSettings.load())
    assert isinstance(built, PostgresEventStore)
    assert built.settings.schema_name == "from_env"
    assert isinstance(
        registry.get("snapshot_repository", "postgres").value(WowSettings.load()), PostgresSnapshotRepository
    )
    assert registry.get("command", "postgres").value.help.startswith("migrate")
    assert isinstance(registry.get("transport", "postgres").value(WowSettings.load()), PostgresTransport)


# -- migrations -------------------------------------------------------------------------


async def test_migrate_creates_the_schema_once_and_is_idempotent(
    settings_for: Callable[..., PostgresSettings],
) -> None:
    settings = settings_for()
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        assert await applied(connection, settings) == []
        assert await migrate(connection, settings) == list(range(1, latest_version(settings) + 1))
        assert await migrate(connection, settings) == []
        assert await applied(connection, settings) == list(range(1, latest_version(settings) + 1))
        tables = await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
            settings.schema_name,
        )
        assert [t["table_name"] for t in tables] == [
            "event_stream",
            "message_queue",
            "message_queue_key",
            "message_queue_subscription",
            "outbox",
            "snapshot",
            "wow_migration",
        ]
    finally:
        await connection.close()


async def test_concurrent_migrations_apply_each_version_once(
    settings_for: Callable[..., PostgresSettings],
) -> None:
    settings = settings_for()
    connections = [await asyncpg.connect(POSTGRES_DSN) for _ in range(4)]
    try:
        results = await asyncio.wait_for(asyncio.gather(*(migrate(c, settings) for c in connections)), 60)
        assert sorted(map(len, results)) == [0, 0, 0, latest_version(settings)]
    finally:
        for connection in connections:
            await connection.close()


async def test_a_schema_migrated_by_a_newer_release_is_refused(
    settings_for: Callable[..., PostgresSettings],
) -> None:
    settings = settings_for()
    store = PostgresEventStore(settings)
    await store.start()
    await store.close()
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(
            f'INSERT INTO "{settings.schema_name}".wow_migration VALUES (999, $1)', "from the future"
        )
    finally:
        await connection.close()
    again = PostgresEventStore(settings)
    try:
        with pytest.raises(MigrationError, match=r"\[999\].*upgrade wow-postgres"):
            await again.start()
    finally:
        await again.close()


def test_wow_postgres_migrate_and_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], schema: str
) -> None:
    monkeypatch.setenv("WOW_POSTGRES__DSN", POSTGRES_DSN)
    monkeypatch.setenv("WOW_POSTGRES__SCHEMA_NAME", schema)
    assert main(["postgres", "status"]) == 1
    assert "pending [1, 2, 3, 4, 5]" in capsys.readouterr().out
    assert main(["postgres", "migrate"]) == 0
    assert "applied migration(s) 1, 2, 3, 4, 5" in capsys.readouterr().out
    assert main(["postgres", "migrate"]) == 0
    assert "is up to date" in capsys.readouterr().out
    assert main(["postgres", "status"]) == 0
    assert "pending none" in capsys.readouterr().out
