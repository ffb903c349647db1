"""``wow.event.*``: the domain event bus and the dispatch pipeline's retry and acknowledgement."""

from __future__ import annotations

from pydantic import Field

from wow_core.messaging.local_first.settings import BusSettings
from wow_core.settings import NonNegativeSeconds, SettingsSection


class RetrySettings(SettingsSection):
    """``WOW_EVENT__RETRY__*``: ``RetryableFilter``'s immediate retries."""

    max_retries: int = Field(
        3, ge=0, le=1000, description="Immediate retries of a RECOVERABLE event-function error."
    )
    min_backoff: NonNegativeSeconds = Field(2.0, description="Minimum backoff between retries, in seconds.")


class EventSettings(SettingsSection):
    """``WOW_EVENT__*``."""

    bus: BusSettings = Field(default_factory=BusSettings)
    ack_on_unrecorded_failure: bool = Field(
        True, description="Acknowledge a failure no recorder recorded (FAILURE_UNRECORDED)."
    )
    retry: RetrySettings = Field(default_factory=RetrySettings)
