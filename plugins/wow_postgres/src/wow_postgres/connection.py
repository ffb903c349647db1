"""The connection pool and the retry of an operation after a lost connection.

:func:`create_pool` opens an asyncpg pool from :class:`~wow_postgres.settings.PostgresSettings`
(the ``password`` setting overrides the DSN's). :class:`Retrying` runs an operation again,
with exponential backoff, when the server could not be reached or the connection broke
(:data:`TRANSIENT`): a restarted or failed-over server is waited for rather than failing
every command in between. Errors of the statement itself (a constraint, bad SQL) are not
retried. Whether a retry is *safe* is the caller's decision: every operation of this
package is either read-only or made idempotent (an append recognises its own earlier
commit by the stream id, see :mod:`wow_postgres.event_store`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from wow_postgres.settings import PostgresSettings

T = TypeVar("T")

Connection: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"
"""A connection of its own or one lent by the pool."""

log = logging.getLogger("wow_postgres")

TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable
    asyncio.TimeoutError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,  # starting up, shutting down
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,  # e.g. the pool's connection was closed under it
)
"""Errors after which the operation is tried again on a fresh connection."""


class PostgresUnavailableError(ConnectionError):
    """The server stayed unreachable through every retry; the message names it (password masked)."""


async def create_pool(settings: PostgresSettings) -> asyncpg.Pool:
    """An open pool; raises :class:`PostgresUnavailableError` if the server cannot be reached
    after the configured retries (a refusal, such as an unknown database or a wrong
    password, is raised as asyncpg's error at once)."""

    async def open_pool() -> asyncpg.Pool:
        return await asyncpg.create_pool(
            settings.dsn,
            password=_password(settings),
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            timeout=settings.connect_timeout,
            command_timeout=settings.command_timeout,
        )

    return await Retrying(settings, "connect").run(open_pool)


async def connect(settings: PostgresSettings, what: str = "connect") -> asyncpg.Connection[Any]:
    """One connection of its own (not pooled), retried as :func:`create_pool` is."""

    async def open_connection() -> asyncpg.Connection[Any]:
        return await asyncpg.connect(
            settings.dsn,
            password=_password(settings),
            timeout=settings.connect_timeout,
            command_timeout=settings.command_timeout,
        )

    return await Retrying(settings, what).run(open_connection)


def _password(settings: PostgresSettings) -> str | None:
    return settings.password.get_secret_value() if settings.password is not None else None


class Retrying:
    """Runs an operation, again after a :data:`TRANSIENT` error, with exponential backoff."""

    def __init__(self, settings: PostgresSettings, what: str) -> None:
        self._settings = settings
        self._what = what

    async def run(self, operation: Callable[[], Awaitable[T]]) -> T:
        delay = self._settings.retry_backoff
        attempt = 0
        while True:
            try:
                return await operation()
            except TRANSIENT as error:
                if attempt >= self._settings.retry_attempts:
                    raise PostgresUnavailableError(
                        f"PostgreSQL at {self._settings.masked_dsn}: {self._what} failed after "
                        f"{attempt + 1} attempt(s): {type(error).__name__}: {error}"
                    ) from error
                attempt += 1
                log.warning(
                    "PostgreSQL at %s: %s failed (%s: %s), retry %d in %.2fs",
                    self._settings.masked_dsn,
                    self._what,
                    type(error).__name__,
                    error,
                    attempt,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._settings.retry_backoff_max)
