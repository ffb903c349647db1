"""``wow.cluster.*``: the cluster command intake of a node (``WOW_CLUSTER__INTAKE__*``)."""

from __future__ import annotations

from pydantic import Field

from wow_core.settings import Count, Name, NonNegativeCount, Seconds, SettingsSection


class IntakeSettings(SettingsSection):
    """``WOW_CLUSTER__INTAKE__*``: the intakes ``wow run`` starts for the app's contexts."""

    enabled: bool = Field(
        False,
        description="Run the cluster intake (spec 002) of every bounded context the app hosts: the "
        "subscription <context>.intake of the topic <prefix><context>.commands. Needs a transport "
        "with partition ownership (in_memory, kafka).",
    )
    name: Name | None = Field(
        None,
        description="The subscription NAME of the intakes (one per context: <context>.<name>). "
        "Default: intake.",
    )
    in_flight: Count | None = Field(
        None,
        description="InFlightLimit.intakes: commands the node's intakes execute at once. "
        "Default: half of WOW_RUNTIME__MAX_IN_FLIGHT.",
    )
    retries: NonNegativeCount = Field(
        3, description="Technical failures of a command retried before its aggregate is parked."
    )
    retry_backoff: Seconds = Field(
        0.2,
        description="Seconds before the first retry (of a command, or of a ledger topic write the "
        "broker did not take); doubled at each next one.",
    )
    max_retry_backoff: Seconds = Field(5.0, description="Longest wait between two retries, in seconds.")
    busy_backoff: Seconds = Field(
        0.05, description="Seconds before a command refused as busy runs again (no retry spent)."
    )
    durable_ledger: bool | None = Field(
        None,
        description="Keep the failure ledger in the topic <prefix><context>.ledger, read by every "
        "node (a restarted or new owner holds what is parked; wow ledger list answers for every "
        "partition). Default: on for every transport but in_memory (one process: its ledger is "
        "the node's).",
    )
    max_buffered: Count = Field(
        4096, description="Records an intake received and has not settled, at most (read-ahead)."
    )


class ClusterSettings(SettingsSection):
    """``WOW_CLUSTER__*``."""

    intake: IntakeSettings = Field(default_factory=IntakeSettings)
