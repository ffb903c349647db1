"""Fixtures of the PostgreSQL tests: the shared server on 127.0.0.1:5432, a schema per test.

A test skips when the server is unreachable, except with ``CI=true`` where it fails.
Every test gets its own schema (``wowtest_<uuid>``), dropped with everything in it
afterwards: the database is shared.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest

from tests.services import reachable, skip_folder_unless_reachable
from wow_postgres import PostgresSettings

POSTGRES_DSN = os.environ.get("WOW_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_reachable() -> bool:
    return reachable(5432)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_folder_unless_reachable(items, "wow_postgres", "PostgreSQL", 5432)


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
