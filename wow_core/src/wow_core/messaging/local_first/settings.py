"""``wow.<bus>.local-first.*``: the settings of local-first dual-copy admission.

One :class:`LocalFirstSettings` per bus: ``WOW_COMMAND__BUS__LOCAL_FIRST__*``,
``WOW_EVENT__BUS__LOCAL_FIRST__*`` and ``WOW_EVENTSOURCING__STATE__BUS__LOCAL_FIRST__*``
(each read through its concept's :class:`BusSettings`).
"""

from __future__ import annotations

from pydantic import Field

from wow_core.settings import Count, Seconds, SettingsSection


class LocalFirstSettings(SettingsSection):
    """``wow.<bus>.local-first.*``: local-first dual-copy admission of one bus."""

    enabled: bool = Field(True, description="Hand messages of local aggregates to local receivers first.")
    backlog_high_water_mark: Count = Field(
        10000,
        description="Copies waiting per aggregate type past which a warning is logged (once per crossing).",
    )
    hand_off_timeout: Seconds = Field(
        30.0, description="Seconds to wait for local admission before a copy goes out unmarked."
    )


class BusSettings(SettingsSection):
    """``wow.<bus>.*``: the settings of one bus (its local-first admission)."""

    local_first: LocalFirstSettings = Field(default_factory=LocalFirstSettings)
