"""``wow.command.*``: the command bus, the default deadline of ``send_and_wait``, the wait
notifier and the strictness of command bodies from a transport."""

from __future__ import annotations

from pydantic import Field

from wow_core.messaging.local_first.settings import BusSettings
from wow_core.settings import Count, Name, Seconds, SettingsSection


class CommandWaitSettings(SettingsSection):
    """``WOW_COMMAND__WAIT__*``: how wait signals travel between processes."""

    notifier: Name | None = Field(
        None,
        description="CommandWaitNotifier carrying wait signals between processes, by plugin name "
        "(redis, nats, kafka, in_memory...). Default: the one named like WOW_TRANSPORT.",
    )
    max_pending: Count = Field(
        10_000,
        description="Most wait signals being sent to other processes at once; past it a signal is "
        "dropped and counted (the caller's wait then ends at its deadline).",
    )


class CommandSettings(SettingsSection):
    """``WOW_COMMAND__*``."""

    bus: BusSettings = Field(default_factory=BusSettings)
    wait_timeout: Seconds = Field(30.0, description="Default deadline of send_and_wait, in seconds.")
    wait: CommandWaitSettings = Field(default_factory=CommandWaitSettings)
    strict_bodies: bool = Field(
        True,
        description="Validate command bodies from a transport strictly, and send only those that pass: "
        'unknown fields and lax coercions (true or "5" for an int) are refused, naming the field. '
        "false: pydantic's lax mode, unknown fields ignored.",
    )
