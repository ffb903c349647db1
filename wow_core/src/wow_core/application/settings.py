"""``WOW_APPLICATION__*``: the named transports of application commands, the serializer's
bounds, and the worker's concurrency and rejection policy.

``WOW_APPLICATION__TRANSPORTS='{"payments": "redis", "mail": "kafka"}'`` maps each
transport name that ``@asynchronous(transport=...)`` uses to a transport plugin (the
names ``wow plugins`` lists). Each named transport is its own instance of that plugin,
configured by the plugin's own section (``WOW_REDIS__*``); its commands travel on the
topic ``<WOW_MESSAGING__TOPIC_PREFIX>application.<name>``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from wow_core.settings import Count, Name, Seconds, SettingsSection


class RejectionAction(StrEnum):
    RETRY = "retry"
    """Try again in this process with exponential backoff, up to ``retry_attempts``; then
    leave the record unacknowledged: the transport delivers it again later."""
    DEAD_LETTER = "dead_letter"
    """Publish the record unchanged to ``<topic>.dlq`` on the same transport, then
    acknowledge it (if that publish fails, it stays unacknowledged)."""
    DROP = "drop"
    """Log it at error level and acknowledge it."""


class SerializerSettings(SettingsSection):
    max_depth: int = Field(32, ge=1, le=256, description="How many containers deep a field value may nest.")
    max_payload_chars: int = Field(
        1_000_000, ge=2, le=64 * 1024 * 1024, description="Largest command payload a worker parses."
    )


class WorkerSettings(SettingsSection):
    concurrency: Count = Field(8, le=1024, description="Commands a worker executes at once.")
    rejection: RejectionAction = Field(
        RejectionAction.RETRY, description="What a failed delivery becomes: retry, dead_letter or drop."
    )
    retry_attempts: Count = Field(5, le=1000, description="Attempts of a delivery under the retry policy.")
    retry_backoff: Seconds = Field(0.2, description="First delay between attempts; doubles each time.")
    retry_backoff_max: Seconds = Field(10.0, description="Longest delay between attempts.")
    shutdown_timeout: Seconds = Field(
        30.0, description="Seconds a stopping worker waits for its in-flight commands."
    )
    group: Name | None = Field(
        None, description="Consumer group of the workers (default: <service name>.application.<transport>)."
    )


class ApplicationSettings(SettingsSection):
    """``WOW_APPLICATION__*``."""

    transports: dict[Name, Name] = Field(
        default_factory=dict,
        description="Named transports of asynchronous commands: name -> transport plugin (JSON object).",
    )
    serializer: SerializerSettings = Field(default_factory=SerializerSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
