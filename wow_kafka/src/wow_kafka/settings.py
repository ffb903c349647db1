"""``KafkaSettings``: the ``kafka`` settings section, read from ``WOW_KAFKA__*``.

Registered through the ``register_settings`` hook, read with
``settings.section("kafka", KafkaSettings)``. Secrets are :class:`~pydantic.SecretStr`,
so ``wow settings`` and logs show them masked. The defaults are the safe ones: every
replica acknowledges a send (``acks=all``), topics are created with the configured
partitions and replication when missing, a partition a consumer group never committed
starts at its earliest retained record (``earliest``: nothing sent before the group
formed is skipped; commands are deduplicated by request id) and that start is anchored
and committed before the member reports ready.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from wow_core.settings import MAX_COUNT, SettingsSection

# Kafka carries these numbers as int32: a larger value is refused here, naming the variable,
# not later by the client. Text is bounded by SettingsSection (at most 4096 characters).
PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT)]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_COUNT)]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
Acks = Literal["all", "1", "0"]
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
OffsetReset = Literal["latest", "earliest"]

_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class KafkaSettings(SettingsSection):
    """Connection, topic, producer and consumer settings of the Kafka transport."""

    # -- connection -----------------------------------------------------------------
    bootstrap_servers: str = Field(
        "127.0.0.1:9092", description="Comma-separated host:port list of brokers to bootstrap from."
    )
    client_id: str = Field("wow", description="Client id sent to the brokers (logs, quotas).")
    security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."
    )
    sasl_mechanism: SaslMechanism | None = Field(
        None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* protocols)."
    )
    sasl_username: str | None = Field(None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(None, description="SASL password (masked).")
    ssl_cafile: str | None = Field(
        None, description="CA bundle (PEM) to verify the brokers; default: system CAs."
    )
    ssl_certfile: str | None = Field(None, description="Client certificate (PEM) for mutual TLS.")
    ssl_keyfile: str | None = Field(None, description="Private key (PEM) of the client certificate.")
    ssl_key_password: SecretStr | None = Field(None, description="Password of the private key (masked).")
    ssl_check_hostname: bool = Field(True, description="Verify that the broker certificate names its host.")
    request_timeout_ms: PositiveInt = Field(
        40000,
        description="Deadline of a broker request; a send unacknowledged within it (retries included) fails.",
    )
    retry_backoff_ms: PositiveInt = Field(100, description="Backoff between retries of a failed request.")
    metadata_max_age_ms: PositiveInt = Field(
        300000, description="Refresh cluster metadata at least this often."
    )

    # -- topics ---------------------------------------------------------------------
    topic_prefix: str | None = Field(
        None, description="Prefix of topic names; default: WOW_MESSAGING__TOPIC_PREFIX ('wow.')."
    )
    group_prefix: str | None = Field(
        None,
        max_length=249,
        description="Prefix of consumer group ids. Kafka groups are cluster-wide, so by default "
        "they carry the topic prefix: two applications separated by their topic prefix never "
        "share a group. '' keeps the bare group names (<service>.command...).",
    )
    partitions: PositiveInt = Field(3, description="Partitions of a topic the transport creates.")
    replication_factor: PositiveInt = Field(
        1, description="Replication factor of a topic the transport creates."
    )
    wait_retention_ms: PositiveInt = Field(
        600_000,
        description="retention.ms of the per-service wait signal topic that the wait notifier creates "
        "(a signal is worth nothing past its wait's deadline; 10 minutes by default).",
    )
    auto_create_topics: bool = Field(
        True, description="Create missing topics (admin client); when false a missing topic is an error."
    )

    # -- producer -------------------------------------------------------------------
    acks: Acks = Field("all", description="Producer acknowledgements: all (every in-sync replica), 1 or 0.")
    enable_idempotence: bool = Field(
        False, description="Idempotent producer (needs broker support; tansu lacks InitProducerId)."
    )
    linger_ms: NonNegativeInt = Field(0, description="How long the producer waits to fill a batch.")
    compression_type: Compression = Field("none", description="none, gzip, snappy, lz4 or zstd.")
    max_batch_size: PositiveInt = Field(16384, description="Maximum size in bytes of a producer batch.")
    max_request_size: PositiveInt = Field(1048576, description="Maximum size in bytes of a produce request.")

    # -- consumer -------------------------------------------------------------------
    auto_offset_reset: OffsetReset = Field(
        "earliest",
        description=(
            "Where a partition the group never committed starts, on every topic kind: earliest "
            "(the first retained record) or latest (its end when the member anchors; what was sent "
            "before is skipped). Anchored and committed before ready."
        ),
    )
    session_timeout_ms: PositiveInt = Field(
        10000, description="A member that does not heartbeat within this is removed from its group."
    )
    heartbeat_interval_ms: PositiveInt = Field(3000, description="Heartbeat interval of a group member.")
    max_poll_interval_ms: PositiveInt = Field(
        300000, description="A member that does not poll within this leaves its group."
    )
    rebalance_timeout_ms: PositiveInt | None = Field(
        None, description="How long the group waits for members to rejoin; default: max_poll_interval_ms."
    )
    max_poll_records: PositiveInt = Field(500, description="Records taken from the client per poll.")
    poll_timeout_ms: PositiveInt = Field(1000, description="How long one poll waits for records.")
    fetch_max_wait_ms: NonNegativeInt = Field(
        500, description="How long the broker may hold a fetch for data."
    )
    max_partition_fetch_bytes: PositiveInt = Field(
        1048576, description="Bytes fetched per partition per request."
    )
    buffered_records: PositiveInt = Field(
        1000, description="Records a receiver holds ahead of its consumer before it pauses fetching."
    )
    commit_interval_ms: PositiveInt = Field(
        100, description="How often acknowledged offsets are committed (also on revocation and close)."
    )
    revocation_drain_timeout_ms: NonNegativeInt = Field(
        3000,
        description="On revocation, how long in-flight records of revoked partitions may finish.",
    )
    release_delay_ms: PositiveInt | None = Field(
        1000,
        description=(
            "How long after its consumer released it unacknowledged (its processing failed) a "
            "record is delivered again by the same member, doubled per delivery up to "
            "WOW_KAFKA__RELEASE_DELAY_MAX_MS; empty or unset leaves it to the partition's next "
            "owner (a rebalance or restart), its partition's commits held at its offset meanwhile."
        ),
    )
    release_delay_max_ms: PositiveInt = Field(
        30000, description="The longest delay before a released record is delivered again."
    )
    max_deliveries: PositiveInt | None = Field(
        16,
        le=1_000_000,
        description=(
            "Deliveries of a released record by one member (in one assignment) after which it goes "
            "to <topic>.dlq and is acknowledged instead of being delivered again (its partition's "
            "commits move on); empty or unset: delivered again for as long as it is released."
        ),
    )

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap_servers(cls, value: str) -> str:
        # a field validator, so that an error names WOW_KAFKA__BOOTSTRAP_SERVERS itself
        for server in (part.strip() for part in value.split(",")):
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"bootstrap server {server!r} must look like host:port (port 1-65535)")
        return value

    @field_validator("release_delay_ms", "max_deliveries", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value in ("", "none", "None") else value

    @field_validator("topic_prefix", "group_prefix")
    @classmethod
    def _check_topic_prefix(cls, value: str | None) -> str | None:
        if value is not None and not set(value) <= _TOPIC_CHARS:
            raise ValueError("a prefix may hold only letters, digits, '.', '_' and '-'")
        return value

    @model_validator(mode="after")
    def _check(self) -> KafkaSettings:
        # Checks across settings: the message names every variable involved.
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"WOW_KAFKA__HEARTBEAT_INTERVAL_MS ({self.heartbeat_interval_ms}) must be lower than "
                f"WOW_KAFKA__SESSION_TIMEOUT_MS ({self.session_timeout_ms})"
            )
        if self.sasl_mechanism is not None and not self.security_protocol.startswith("SASL_"):
            raise ValueError(
                "WOW_KAFKA__SASL_MECHANISM needs WOW_KAFKA__SECURITY_PROTOCOL SASL_PLAINTEXT or SASL_SSL"
            )
        if self.security_protocol.startswith("SASL_") and self.sasl_mechanism is None:
            raise ValueError(
                f"WOW_KAFKA__SECURITY_PROTOCOL={self.security_protocol} needs WOW_KAFKA__SASL_MECHANISM"
            )
        if self.sasl_mechanism is not None and (self.sasl_username is None or self.sasl_password is None):
            raise ValueError(
                "WOW_KAFKA__SASL_MECHANISM needs WOW_KAFKA__SASL_USERNAME and WOW_KAFKA__SASL_PASSWORD"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("WOW_KAFKA__SSL_KEYFILE needs WOW_KAFKA__SSL_CERTFILE")
        return self

    def release_delay_for(self, deliveries: int) -> float | None:
        """Seconds before a record released after its ``deliveries``-th delivery (by this
        member, in this assignment) is delivered again: ``release_delay_ms`` doubled per
        delivery after the first, at most ``release_delay_max_ms`` (or ``release_delay_ms``
        when that is longer); None: not redelivered by this member."""
        if self.release_delay_ms is None:
            return None
        first = self.release_delay_ms
        longest = max(self.release_delay_max_ms, first)
        return min(first * 2.0 ** min(max(deliveries - 1, 0), 32), longest) / 1000

    @property
    def bootstrap_list(self) -> list[str]:
        return [part.strip() for part in self.bootstrap_servers.split(",")]

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")
