"""``wow.command.*``: the command bus, the default deadline of ``send_and_wait`` and the strictness
of command bodies from a transport."""

from __future__ import annotations

from pydantic import Field

from wow_core.messaging.local_first.settings import BusSettings
from wow_core.settings import Seconds, SettingsSection


class CommandSettings(SettingsSection):
    """``WOW_COMMAND__*``."""

    bus: BusSettings = Field(default_factory=BusSettings)
    wait_timeout: Seconds = Field(30.0, description="Default deadline of send_and_wait, in seconds.")
    strict_bodies: bool = Field(
        True,
        description="Validate command bodies from a transport strictly, and send only those that pass: "
        'unknown fields and lax coercions (true or "5" for an int) are refused, naming the field. '
        "false: pydantic's lax mode, unknown fields ignored.",
    )
