"""Fixtures of the PostgreSQL tests: the shared server on 127.0.0.1:5432, a schema per test.

A test skips when the server is unreachable, except with ``CI=true`` where it fails.
Every test gets its own schema (``wowtest_<uuid>``), dropped with everything in it
afterwards: the database is shared.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest

from wow_postgres import PostgresSettings

POSTGRES_DSN = os.environ.get("WOW_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_reachable(host: str = "127.0.0.1", port: int = 5432) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if postgres_reachable() or os.environ.get("CI") == "true":
        return
    skip = pytest.mark.skip(reason="PostgreSQL is not reachable on 127.0.0.1:5432")
    for item in items:
        if "wow_postgres" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A schema name no other test uses; dropped (cascade) after the test."""
    name = f"wowtest_{uuid.uuid4().hex[:12]}"
    yield name
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await connection.close()


@pytest.fixture
def settings_for(schema: str) -> Callable[..., PostgresSettings]:
    def make(**overrides: Any) -> PostgresSettings:
        values: dict[str, Any] = {"dsn": POSTGRES_DSN, "schema_name": schema, "pool_max_size": 4}
        values.update(overrides)
        return PostgresSettings(**values)

    return make
