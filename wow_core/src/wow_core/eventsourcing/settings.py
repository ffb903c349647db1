"""``wow.eventsourcing.*``: the state event bus, and the event store and snapshot
repository by plugin name."""

from __future__ import annotations

from pydantic import Field

from wow_core.messaging.local_first.settings import BusSettings
from wow_core.settings import SettingsSection


class StateSettings(SettingsSection):
    """``WOW_EVENTSOURCING__STATE__*``: the state event bus."""

    bus: BusSettings = Field(default_factory=BusSettings)


class EventSourcingSettings(SettingsSection):
    """``WOW_EVENTSOURCING__*``."""

    state: StateSettings = Field(default_factory=StateSettings)
    store: str = Field("in_memory", description="Event store, by plugin name.")
    snapshot: str = Field("in_memory", description="Snapshot repository, by plugin name.")
