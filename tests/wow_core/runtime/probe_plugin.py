"""A plugin module used by the runtime tests: registered directly with ``load_plugins(extra=...)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field, SecretStr

from wow_core.plugins import hookimpl
from wow_core.runtime.settings import WowSettings
from wow_core.transport import (
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    TransportMessage,
    TransportReceiver,
)


class ProbeSettings(BaseModel):
    port: int = Field(7000, ge=1, le=65535, description="A port.")
    token: SecretStr = Field(SecretStr("open-sesame"), min_length=4)
    hosts: list[str] = Field(default_factory=lambda: ["a"], description="Hosts, as a JSON array.")


class ProbeTransport:
    """Records what it is asked to send; opens nothing."""

    def __init__(self, settings: WowSettings) -> None:
        self.settings = settings
        self.sent: list[TransportMessage] = []

    @property
    def name(self) -> str:
        return "probe"

    @property
    def naming(self) -> TopicNaming:
        return DefaultTopicNaming(self.settings.messaging.topic_prefix)

    @property
    def decode_failure_default(self) -> DecodeFailureDefault:
        return DecodeFailureDefault.LEAVE_PENDING

    async def start(self) -> None:
        return None

    async def send(self, message: TransportMessage) -> None:
        self.sent.append(message)

    def open(self, group: str, topics: Sequence[str]) -> TransportReceiver:
        raise NotImplementedError("the probe transport only sends")

    async def close(self) -> None:
        return None


@hookimpl
def register_transports(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("probe", ProbeTransport)
    register("not_a_transport", lambda settings: object())


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    register("probe", ProbeSettings)
