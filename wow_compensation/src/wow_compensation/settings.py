"""``CompensationSettings``: the ``compensation`` section, read from ``WOW_COMPENSATION__*``.

The recorder is chosen by the core (``WOW_FAILURE_RECORDER=compensation``); this section
holds what the compensation module itself needs: the defaults of the retry spec a
function's ``@retry(...)`` overrides, the scheduler, the store of the records' read
model, and the bounds of what a record keeps of an error.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, SecretStr, field_validator

from wow_core.settings import Count, NonNegativeSeconds, Seconds, SettingsSection

SECTION = "compensation"


class RetryDefaults(SettingsSection):
    """``WOW_COMPENSATION__RETRY__*``: a function's retry spec where ``@retry`` says nothing."""

    max_retries: int = Field(10, ge=0, le=1000, description="Compensations of one record at most.")
    min_backoff: NonNegativeSeconds = Field(
        180.0, description="Seconds before the first compensation; doubles after each."
    )
    execution_timeout: Seconds = Field(
        120.0, description="Seconds one compensation may take before it may be prepared again."
    )
    max_backoff: Seconds = Field(86_400.0, description="The cap of the backoff, in seconds.")


class SchedulerSettings(SettingsSection):
    """``WOW_COMPENSATION__SCHEDULER__*``."""

    enabled: bool = Field(True, description="Run the scheduler in this process.")
    interval: Seconds = Field(60.0, description="Seconds between two runs.")
    batch: Count = Field(100, description="Records prepared per run at most.")
    lease: Seconds = Field(
        30.0, description="Seconds one instance holds the scheduler lease for a run (renewed per run)."
    )


class UiSettings(SettingsSection):
    """``WOW_COMPENSATION__UI__*``: the operations page (needs ``wow-compensation[ui]``)."""

    enabled: bool = Field(
        False, description="Serve the operations page from this process (wow run, any runtime)."
    )
    host: str = Field("127.0.0.1", min_length=1, description="Address the page's server listens on.")
    port: int = Field(8089, ge=0, le=65535, description="Port of the page's server (0: any free port).")
    token: SecretStr | None = Field(
        None,
        description="Operator token: with it the page's actions (prepare, force prepare, retry spec, "
        "recoverability, function) are enabled for who signs in with it; without it the page is "
        "read-only. At least 16 characters.",
    )
    refresh: Seconds = Field(2.0, description="Seconds between two live refreshes of the page.")

    @field_validator("token")
    @classmethod
    def _long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and len(token.get_secret_value()) < 16:
            raise ValueError("the operator token must have at least 16 characters")
        return token


class StoreKind(StrEnum):
    AUTO = "auto"
    IN_MEMORY = "in_memory"
    REDIS = "redis"


class CompensationSettings(SettingsSection):
    """``WOW_COMPENSATION__*``."""

    store: StoreKind = Field(
        StoreKind.AUTO,
        description="Where the records' read model and the scheduler lease are kept; auto: redis "
        "when the event store is redis, else in memory (one process).",
    )
    retry: RetryDefaults = Field(default_factory=RetryDefaults)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    ui: UiSettings = Field(default_factory=UiSettings)
    max_message: int = Field(2048, ge=64, le=1 << 20, description="Characters kept of an error message.")
    max_stack_trace: int = Field(
        16_384, ge=0, le=1 << 22, description="Characters kept of an error's stack trace."
    )
    command_timeout: Seconds = Field(
        10.0, description="Seconds a write to a record may take before it counts as failed."
    )
