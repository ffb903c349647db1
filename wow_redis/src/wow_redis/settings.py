"""``RedisSettings``: the ``redis`` settings section, read from ``WOW_REDIS__*``.

Everything about the backend (where it is, how to log in, how the receivers read,
recover and trim) lives here and nowhere else; the spec leaves these parameters to the
extension's configuration. The password is a :class:`~pydantic.SecretStr`: it never
appears in a ``repr``, a log line or an error message; neither does a password inside
``url`` (``wow settings`` and ``wow run`` mask URL credentials).

Every value is bounded (the core's settings types): durations are finite and at most a
day, counts at most 2**31 - 1 (``maxlen`` at most 10**12), text at most 4096 characters,
and the key prefix and consumer name, which become Redis key and consumer names, at most
100 printable ASCII characters without spaces.
"""

from __future__ import annotations

import os
import secrets
import socket
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, Field, SecretStr, field_validator

from wow_core.settings import MAX_NAME, MAX_SECONDS, Count, Seconds, SettingsSection

SECTION = "redis"
"""The section name: ``WOW_REDIS__URL`` etc."""


class GroupStart(StrEnum):
    """Where a consumer group that does not exist yet starts reading.

    Only a group's creation uses it: an existing group resumes where it is, whatever
    the setting.
    """

    EARLIEST = "earliest"
    """Everything the stream still holds (``0``); the default. Nothing sent before the
    group was created is skipped: commands are deduplicated by request id, and a new
    event group (projection, saga, event processor) starts with the events the stream
    still retains (bounded by ``maxlen``)."""
    LATEST = "latest"
    """Only entries added after the group was created (``$``): whatever was sent
    before any member created the group is skipped."""


def _check_key_text(value: str) -> str:
    bad = [ch for ch in value if not ("!" <= ch <= "~")]
    if bad:
        raise ValueError(f"only printable ASCII characters without spaces (found {bad[0]!r})")
    return value


KeyText = Annotated[str, Field(max_length=MAX_NAME), AfterValidator(_check_key_text)]
"""Text that becomes part of a Redis key or consumer name: at most 100 printable ASCII
characters, no spaces or control characters."""


def masked_url(url: str) -> str:
    """``url`` with the password (if any) replaced by ``***``: safe to log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def default_consumer_name() -> str:
    """``<host>-<pid>-<random>``: unique per transport instance.

    A generated name changes on every start, so a restarted process does not find its
    own pending entries by name; they are taken over by the idle-claim recovery
    instead. Configure a stable ``consumer_name`` per process to have a restarted
    process re-read its own pending entries at once.
    """
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class RedisSettings(SettingsSection):
    """The Redis Streams transport, event store and snapshot repository."""

    url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Server URL (redis:// or rediss:// for TLS, optional /db).",
    )
    username: str | None = Field(None, description="ACL user name; overrides the URL's.")
    password: SecretStr | None = Field(None, description="Password; overrides the URL's. Never logged.")
    tls: bool = Field(False, description="Use TLS even when the URL says redis://.")
    tls_ca_file: str | None = Field(None, description="CA bundle to verify the server with.")
    tls_verify: bool = Field(True, description="Verify the server certificate and host name.")
    key_prefix: KeyText = Field(
        "",
        description="Prefix of every stream and key this package writes (printable ASCII, no spaces).",
    )
    consumer_name: KeyText | None = Field(
        None,
        description="Consumer name in the groups; stable per process to re-read own pending entries "
        "after a restart (printable ASCII, no spaces). Default: <host>-<pid>-<random>.",
    )
    group_start: GroupStart = Field(
        GroupStart.EARLIEST,
        description="Where a consumer group that does not exist yet starts, on every stream kind: "
        "earliest (0: the first retained entry, nothing sent before the group existed is skipped) "
        "or latest ($: the stream's end when the group is created; what was sent before is skipped).",
    )
    block_time: Seconds = Field(2.0, description="Seconds one XREADGROUP blocks waiting for entries.")
    batch_size: Count = Field(128, description="Entries read (XREADGROUP COUNT) or claimed at once.")
    claim_idle_time: float | None = Field(
        60.0,
        ge=0.05,
        le=MAX_SECONDS,
        description="Seconds an entry stays pending in another consumer before it is claimed "
        "(XAUTOCLAIM); empty or unset disables recovery.",
    )
    claim_interval: Seconds | None = Field(
        None, description="Seconds between claim scans; default half the claim idle time."
    )
    release_delay: float | None = Field(
        1.0,
        ge=0.01,
        le=MAX_SECONDS,
        description="Seconds before an entry its consumer released unacknowledged (its processing "
        "failed) is delivered again by this receiver, doubled per delivery up to nine tenths of the "
        "claim idle time (60 s without recovery); empty or unset leaves it to recovery.",
    )
    max_deliveries: Count = Field(
        16, description="Deliveries after which a pending entry goes to <stream>.dlq instead of again."
    )
    maxlen: Annotated[int, Field(gt=0, le=10**12)] | None = Field(
        1_000_000, description="Approximate retention per stream (XADD MAXLEN ~); unset keeps everything."
    )
    dead_letter_maxlen: Annotated[int, Field(gt=0, le=10**12)] | None = Field(
        100_000, description="Approximate retention of each <stream>.dlq."
    )
    send_batch_size: Count = Field(512, description="Most XADDs pipelined in one round trip.")
    wait_stream_maxlen: Count = Field(
        10_000,
        description="Approximate length the wait streams this process notifies are trimmed to "
        "(XADD MAXLEN ~, applied by the notifying service): the signals a caller may fall behind "
        "by without losing one.",
    )
    wait_stream_ttl: Seconds = Field(
        60.0,
        description="Seconds a caller's wait stream outlives the caller's last refresh (a third "
        "of it): how long a disconnected caller finds its signals kept, and a dead one leaves "
        "its stream behind.",
    )
    send_retries: int = Field(
        3, ge=0, le=1000, description="Retries of a send batch after a connection error."
    )
    reconnect_backoff: Seconds = Field(0.1, description="First backoff after a connection error, s.")
    reconnect_backoff_max: Seconds = Field(5.0, description="Longest backoff between reconnects, s.")
    socket_timeout: Seconds = Field(
        10.0, description="Seconds a command (other than a blocking read) may take."
    )
    max_connections: Annotated[int, Field(ge=2, le=10_000)] = Field(
        100,
        description="Connections each client of this process (the transport, the event store, the "
        "snapshot repository, the wait notifier) opens at most; a command that finds them all busy "
        "waits for one to be free, within its socket timeout (more commands in flight than "
        "connections wait, they do not fail). The transport's needs at least one per receiver "
        "blocked in XREADGROUP, plus what it sends.",
    )
    ack_confirmed: bool = Field(
        False,
        description="ack() waits for the XACK reply (an XACK that meets a lost connection is retried "
        "until it is sent or the receiver closes); by default it returns once the XACK is queued "
        "(sent within one round trip, flushed on close; a crash before that redelivers the entry).",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("use a redis://, rediss:// or unix:// URL")
        return value

    @field_validator(
        "claim_idle_time", "claim_interval", "release_delay", "maxlen", "dead_letter_maxlen", mode="before"
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value in ("", "none", "None") else value

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (masked_url(value) if name == "url" and isinstance(value, str) else value)

    def resolved_consumer_name(self) -> str:
        return self.consumer_name or default_consumer_name()

    def release_delay_for(self, deliveries: int) -> float | None:
        """Seconds before an entry released after its ``deliveries``-th delivery is
        delivered again: :attr:`release_delay` doubled per delivery after the first, at
        most nine tenths of the claim idle time (so recovery does not claim the entry
        meanwhile and deliver it a second time; 60 s without recovery); None: left to
        recovery."""
        if self.release_delay is None:
            return None
        idle = self.claim_idle_time
        longest = max(0.9 * idle if idle is not None else 60.0, self.release_delay)
        return min(self.release_delay * 2.0 ** min(max(deliveries - 1, 0), 32), longest)

    def resolved_claim_interval(self) -> float | None:
        if self.claim_idle_time is None:
            return None
        return self.claim_interval or max(self.claim_idle_time / 2, 0.05)
