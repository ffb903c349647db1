"""Building the redis-py asyncio client from :class:`RedisSettings`, and the backoff."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wow_redis.settings import RedisSettings

TRANSIENT_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)
"""Errors after which a command is retried (redis-py reconnects on the next command)."""


def create_client(settings: RedisSettings, **overrides: Any) -> Redis:
    """A client with its own connection pool; the caller closes it (``aclose``).

    The pool holds at most ``max_connections`` connections and is a blocking one: a command
    that finds every connection busy waits for one to be released (up to
    ``socket_timeout``; past it the redis-py ``ConnectionError`` "No connection available",
    transient like a lost connection) instead of failing at once with ``MaxConnectionsError``
    as redis-py's default pool does. The runtime admits ``WOW_RUNTIME__MAX_IN_FLIGHT``
    commands at once (1024), each loading and appending through these clients: more than
    any pool size.

    ``decode_responses`` stays off: payloads are decoded by the transport, strictly, so
    that a record that is not UTF-8 is reported instead of silently mangled.
    """
    url = settings.url
    if settings.tls and url.startswith("redis://"):
        url = "rediss://" + url[len("redis://") :]
    # No socket_timeout: redis-py then sends through ``asyncio.wait_for``, which on
    # Python 3.11 can swallow a cancellation that races the send's completion (a closed
    # receiver would block until its XREADGROUP returned). Commands are bounded with
    # ``asyncio.timeout`` by the callers instead (see :func:`command`).
    options: dict[str, Any] = {
        "socket_timeout": None,
        "socket_connect_timeout": settings.socket_timeout,
        "socket_keepalive": True,
        "health_check_interval": 0,
        "protocol": 2,
    }
    if settings.username is not None:
        options["username"] = settings.username
    if settings.password is not None:
        options["password"] = settings.password.get_secret_value()
    if url.startswith("rediss://"):
        options["ssl_cert_reqs"] = "required" if settings.tls_verify else "none"
        options["ssl_check_hostname"] = settings.tls_verify
        if settings.tls_ca_file is not None:
            options["ssl_ca_certs"] = settings.tls_ca_file
    options.update(overrides)
    pool = BlockingConnectionPool.from_url(
        url, max_connections=settings.max_connections, timeout=settings.socket_timeout, **options
    )
    return Redis.from_pool(pool)


class Backoff:
    """Exponential backoff with full jitter, reset after a success."""

    __slots__ = ("_attempt", "initial", "maximum")

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._attempt = 0

    @property
    def attempt(self) -> int:
        return self._attempt

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * (2**self._attempt))
        self._attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0


@contextlib.asynccontextmanager
async def deadline(seconds: float, what: str) -> AsyncIterator[None]:
    """Bound a round trip: past ``seconds`` it raises :class:`redis.exceptions.TimeoutError`
    (transient, retried by the callers); redis-py drops the connection it was using."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError as error:
        raise RedisTimeoutError(f"{what} took longer than {seconds}s") from error


async def ping(client: Redis, timeout: float) -> None:
    """PING within ``timeout`` seconds; a server that does not answer is a builtin
    ``ConnectionError`` whose message names the settings to check (the runtime reports it
    as the part that did not start). Proves the server answered now, nothing later."""
    try:
        async with deadline(timeout, "PING"):
            await client.ping()
    except (RedisConnectionError, RedisTimeoutError) as error:
        reason = str(error).rstrip(". ") or type(error).__name__
        raise ConnectionError(
            f"Redis did not answer: {reason} (WOW_REDIS__URL, WOW_REDIS__SOCKET_TIMEOUT)"
        ) from error


async def command(client: Redis, *args: Any, timeout: float, **options: Any) -> Any:
    """``client.execute_command`` (untyped in redis-py) bounded by ``timeout`` seconds."""
    async with deadline(timeout, str(args[0])):
        return await client.execute_command(*args, **options)  # type: ignore[no-untyped-call]


def bulk(data: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%b\r\n" % (len(data), data)


def pack(*parts: bytes) -> bytes:
    """One command in RESP, from arguments already encoded (cheaper than redis-py's generic
    ``pack_command``, which checks and encodes every argument)."""
    return b"*%d\r\n" % len(parts) + b"".join(bulk(part) for part in parts)


async def round_trip(client: Redis, packed: list[bytes]) -> list[Any]:
    """Write every command on one pooled connection, then read every reply, in order.

    An error reply is returned in its place; a connection error drops the connection.
    Callers bound it with :func:`deadline`.
    """
    pool = client.connection_pool
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await connection.send_packed_command(packed, check_health=False)
        replies: list[Any] = []
        for _ in packed:
            try:
                replies.append(await connection.read_response())
            except ResponseError as error:
                replies.append(error)
        return replies
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        await pool.release(connection)
