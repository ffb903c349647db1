"""``NatsSettings``: the ``nats`` settings section, read from ``WOW_NATS__*``.

The plugin contributes this model through the ``register_settings`` hook; the core reads
it with ``WowSettings.section("nats", NatsSettings)``, so a wrong value fails with the
core's ``SettingsError`` naming the variable (``WOW_NATS__ACK_WAIT='soon' is not
accepted: ...``). Secrets are :class:`~pydantic.SecretStr`: they never appear in a
``repr``, a log line or ``wow plugins`` output, and credentials inside a server URL
(``nats://user:password@host``) are masked by ``wow settings`` and ``wow run``.

Every value is bounded (the core's settings types): durations are finite and at most a
day (``max_age`` at most 100 years), counts at most 2**31 - 1, text at most 4096
characters, at most 64 server URLs, and the stream prefix at most 64 characters.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from wow_core.settings import MAX_SECONDS, Count, NonNegativeSeconds, Seconds, SettingsSection

SECTION = "nats"
MAX_AGE = 100 * 365 * 86_400.0
"""The longest retention ``max_age`` accepts, in seconds (100 years; 0 is no limit)."""


class NatsSettings(SettingsSection):
    """Connection, stream and consumer settings of the NATS JetStream transport."""

    servers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["nats://127.0.0.1:4222"],
        max_length=64,
        description="Server URLs: a comma-separated list or a JSON array.",
    )
    user: str | None = Field(None, description="User name (with password).")
    password: SecretStr | None = Field(None, description="Password (with user).")
    token: SecretStr | None = Field(None, description="Authentication token.")
    credentials: str | None = Field(None, description="Path of a .creds file (JWT and NKey seed).")
    connection_name: str | None = Field(None, description="Connection name shown by the server.")
    connect_timeout: Seconds = Field(5.0, description="Seconds to wait for the first connection.")
    reconnect_time_wait: Seconds = Field(1.0, description="Seconds between reconnect attempts.")
    max_reconnect_attempts: int = Field(
        -1, ge=-1, le=1_000_000, description="Reconnect attempts, -1 for no limit."
    )
    stream_prefix: str = Field(
        "",
        max_length=64,
        description="Prefix of every stream name. Subjects are the topic names: applications "
        "sharing a server also need distinct WOW_MESSAGING__TOPIC_PREFIX values.",
    )
    replicas: int = Field(1, ge=1, le=5, description="Stream replicas (1 on a single server).")
    storage: Literal["file", "memory"] = Field("file", description="Stream storage.")
    max_age: float = Field(
        0.0, ge=0, le=MAX_AGE, description="Seconds a stream keeps a message, 0 for no limit."
    )
    ack_wait: Seconds = Field(
        30.0, description="Seconds a delivered, unacknowledged record waits before it is delivered again."
    )
    max_deliver: Count = Field(
        5, description="Deliveries of one record before it is dead-lettered to <topic>.dlq as poison."
    )
    release_delay: float | None = Field(
        1.0,
        ge=0.01,
        le=MAX_SECONDS,
        description="Seconds before a record its consumer released unacknowledged (its processing "
        "failed) is delivered again (a nak with this delay), doubled per delivery up to the ack wait; "
        "empty leaves it to the ack wait.",
    )
    max_ack_pending: Count = Field(
        1000, description="Records of one consumer delivered and not yet acknowledged, at most."
    )
    fetch_batch: Count = Field(64, description="Records asked for by one pull request.")
    fetch_timeout: Seconds = Field(1.0, description="Seconds one pull request waits for records.")
    publish_timeout: Seconds = Field(5.0, description="Seconds a send waits for the publish ack.")
    deduplicate: bool = Field(
        True,
        description="Send a Nats-Msg-Id so that a publish retried after a lost ack is stored once.",
    )
    max_pending_publishes: Count = Field(
        4000, description="Publishes waiting for their ack at once; a send waits for room beyond it."
    )
    deliver_policy: Literal["all", "new"] = Field(
        "all",
        description="Where a group that has no consumer yet starts, on every topic kind: all (the "
        "first retained record; nothing sent before the group existed is skipped) or new (its "
        "receiver's open; what was stored before is skipped).",
    )
    wait_stream_storage: Literal["file", "memory"] = Field(
        "file",
        description="Storage of the stream that keeps wait signals for their callers: file (kept "
        "through a server restart) or memory.",
    )
    wait_stream_max_age: float = Field(
        60.0,
        ge=5.0,
        le=MAX_SECONDS,
        description="Seconds the wait stream keeps a signal (a caller away longer loses it; a "
        "caller's reader also goes after this long without reading).",
    )
    wait_stream_max_per_caller: Count = Field(
        10_000, description="Signals the wait stream keeps for one caller, at most (the oldest go first)."
    )
    start_margin: NonNegativeSeconds = Field(
        0.0,
        description="With deliver_policy=new, seconds before its first open a new group starts "
        "(allowance for clock skew).",
    )

    @field_validator("servers", mode="before")
    @classmethod
    def _split_servers(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except ValueError as error:
                    raise ValueError(f"not a JSON array of URLs: {error}") from None
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("servers")
    @classmethod
    def _check_servers(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one server URL is needed")
        for url in value:
            if not url.startswith(("nats://", "tls://", "ws://", "wss://")):
                raise ValueError(f"{url!r} is not a nats://, tls://, ws:// or wss:// URL")
        return value

    @field_validator("release_delay", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # an empty variable (like ``null``) is no value: the optional setting is unset
        return None if value in ("", "none", "None") else value

    @field_validator("stream_prefix")
    @classmethod
    def _check_stream_prefix(cls, value: str) -> str:
        bad = [ch for ch in value if not (ch.isascii() and (ch.isalnum() or ch in "-_"))]
        if bad:
            raise ValueError(f"a stream prefix holds only letters, digits, '-' and '_' (found {bad[0]!r})")
        return value

    def release_delay_for(self, deliveries: int) -> float | None:
        """Seconds before a record released after its ``deliveries``-th delivery is
        delivered again: :attr:`release_delay` doubled per delivery after the first, at
        most :attr:`ack_wait` (a release never waits longer than the ack wait that
        brings back a record nobody released); None without a release delay: left to
        the ack wait."""
        delay = self.release_delay
        if delay is None:
            return None
        return min(delay * 2.0 ** min(max(deliveries - 1, 0), 32), self.ack_wait)
