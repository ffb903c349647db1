"""``PostgresSettings``: the ``postgres`` settings section, read from ``WOW_POSTGRES__*``.

The password is never shown: a :class:`~pydantic.SecretStr` ``password`` is never printed,
and a password inside ``dsn`` (``postgresql://user:secret@host/db``) is masked in the
settings' ``repr``, in ``wow settings`` and ``wow run`` output, and in every message this
package writes (:func:`masked_dsn`).

The schema and table names become SQL identifiers: they are checked here (lower-case
letters, digits and ``_``, starting with a letter or ``_``, at most 63 characters, the
PostgreSQL limit) and quoted wherever they are used, so no setting can inject SQL.
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator

from wow_core.settings import MAX_SECONDS, Count, Seconds, SettingsSection

SECTION = "postgres"
"""The section name: ``WOW_POSTGRES__DSN`` etc."""

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")

RELEASE_DELAY_MAX = 60.0
"""The longest wait of a released record (unless ``release_delay`` itself is longer), s."""


def _check_identifier(value: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a plain SQL name: lower-case letters, digits and '_', starting with a "
            "letter or '_', at most 63 characters"
        )
    return value


Identifier = Annotated[str, AfterValidator(_check_identifier)]
"""A schema or table name: ``[a-z_][a-z0-9_]{0,62}``."""


def masked_dsn(dsn: str) -> str:
    """``dsn`` with its password (if any) replaced by ``***``: safe to print or log."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class PostgresSettings(SettingsSection):
    """The PostgreSQL event store, snapshot repository and transport."""

    dsn: str = Field(
        "postgresql://postgres@127.0.0.1:5432/test",
        description="Connection URL (postgresql:// or postgres://); a password in it is never shown.",
    )
    password: SecretStr | None = Field(None, description="Password; overrides the DSN's. Never logged.")
    schema_name: Identifier = Field(
        "wow",
        description="Schema of every table this package creates (created if missing).",
    )
    events_table: Identifier = Field("event_stream", description="Table of the event streams.")
    snapshots_table: Identifier = Field("snapshot", description="Table of the latest snapshots.")
    queue_table: Identifier = Field(
        "message_queue",
        description="Table of the transport's queued records; <name>_key and <name>_subscription beside it.",
    )
    notify_channel: Identifier = Field(
        "wow_transport", description="LISTEN/NOTIFY channel that wakes the transport's receivers."
    )
    lease_time: Seconds = Field(
        30.0,
        description="Seconds a claimed record (and its key) stays with a receiver without a renewal; a "
        "receiver that stops renewing (a crash) has its records delivered again after it.",
    )
    poll_interval: Seconds = Field(
        1.0, description="Seconds a receiver waits for a notification before it looks again (fallback)."
    )
    ack_confirmed: bool = Field(
        False,
        description="ack() waits for the row's deletion to commit; by default it returns once the "
        "deletion is queued (deleted with the others within one round trip; a crash before that "
        "delivers the record again).",
    )
    max_deliveries: Count = Field(
        10,
        le=1_000_000,
        description="Deliveries of one record to a group without an acknowledgement (handed back, lease "
        "expired) before it goes to <topic>.dlq as poison, with its deliveries and last error.",
    )
    release_delay: float | None = Field(
        1.0,
        ge=0.01,
        le=MAX_SECONDS,
        description="Seconds before a record its consumer released unacknowledged (its processing failed) "
        "is delivered again to the group, doubled per delivery up to 60 s; the key's later records wait "
        "behind it. Empty or unset: release() does nothing, the record stays with its receiver until it "
        "closes or its lease expires.",
    )
    claim_batch: Count = Field(64, le=10_000, description="Records one claim takes at most.")
    read_ahead: Count = Field(128, le=100_000, description="Records a receiver holds unconsumed at most.")
    outbox_enabled: bool = Field(
        False,
        description="The command kernel appends through the transactional outbox: the event stream and "
        "state event it publishes are written in the append's transaction and `wow postgres relay` "
        "publishes them to WOW_TRANSPORT (needs WOW_EVENTSOURCING__STORE=postgres).",
    )
    outbox_table: Identifier = Field("outbox", description="Table of the transactional outbox.")
    outbox_channel: Identifier = Field(
        "wow_outbox", description="LISTEN/NOTIFY channel that wakes the outbox relay."
    )
    relay_batch: Count = Field(
        100, le=10_000, description="Outbox rows the relay reads, publishes and marks sent at once."
    )
    relay_concurrency: Count = Field(
        16,
        le=10_000,
        description="Aggregates whose outbox rows the relay sends at once (one aggregate's rows always in "
        "order, one after the other); 1 sends the batch one row at a time.",
    )
    outbox_retention: Seconds = Field(
        3600.0, description="Seconds a sent outbox row is kept (for inspection) before the relay deletes it."
    )
    pool_min_size: int = Field(1, ge=0, le=1000, description="Connections the pool keeps open at least.")
    pool_max_size: Count = Field(10, le=1000, description="Connections the pool opens at most.")
    migrate_on_start: bool = Field(
        True,
        description="Apply the pending migrations when the store starts (else run `wow postgres migrate`).",
    )
    connect_timeout: Seconds = Field(10.0, description="Seconds to open one connection.")
    command_timeout: Seconds = Field(30.0, description="Seconds one statement may take.")
    retry_attempts: int = Field(
        5, ge=0, le=1000, description="Retries of an operation after a lost connection (0: none)."
    )
    retry_backoff: Seconds = Field(0.1, description="First backoff after a lost connection, s (doubles).")
    retry_backoff_max: Seconds = Field(5.0, description="Longest backoff between retries, s.")

    @field_validator("release_delay", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value in ("", "none", "None") else value

    @field_validator("dsn")
    @classmethod
    def _check_dsn(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("use a postgresql:// or postgres:// URL")
        urlsplit(value).port  # noqa: B018 - raises ValueError on a port that is not a number
        return value

    @model_validator(mode="after")
    def _check_pool(self) -> PostgresSettings:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError(
                f"WOW_POSTGRES__POOL_MIN_SIZE ({self.pool_min_size}) must not be greater than "
                f"WOW_POSTGRES__POOL_MAX_SIZE ({self.pool_max_size})"
            )
        return self

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (masked_dsn(value) if name == "dsn" and isinstance(value, str) else value)

    def release_delay_for(self, deliveries: int) -> float | None:
        """Seconds before a record released after its ``deliveries``-th delivery is
        delivered again: :attr:`release_delay` doubled per delivery after the first, at
        most :data:`RELEASE_DELAY_MAX` (60 s; :attr:`release_delay` itself if longer);
        None (no release delay): ``release()`` leaves the record with its receiver.

        The cap is not tied to ``lease_time``, as Redis ties its cap to the claim idle
        time: a released row is no longer leased while it waits (no lease expiry can
        deliver it a second time meanwhile), so nothing races the delay. What the cap
        bounds is the wait of the key's later records, which are held back behind the
        released one to keep the key's order: 60 s keeps a failure that does not pass
        from being retried in a hot loop (``max_deliveries`` 10 is reached after about
        four minutes) without stalling a key for longer than a minute at a time."""
        if self.release_delay is None:
            return None
        longest = max(RELEASE_DELAY_MAX, self.release_delay)
        return min(self.release_delay * 2.0 ** min(max(deliveries - 1, 0), 32), longest)

    @property
    def masked_dsn(self) -> str:
        """The DSN with its password masked."""
        return masked_dsn(self.dsn)
