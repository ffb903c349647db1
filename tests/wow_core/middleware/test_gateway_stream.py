"""A gateway decorator forwards the streaming wait to the decorator under it, so every
decorator of a chain sees it (without the forwarding, an outer decorator that overrides
nothing would run the gateway's own code over the innermost gateway's attributes and
skip the decorators between)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tests.accounts import Account, Open
from wow_core.command import CommandGateway, CommandResult, CommandWait, WaitPlan
from wow_core.middleware import CommandGatewayDecorator, Middleware
from wow_core.model import CommandMessage
from wow_core.runtime.app import WowApp
from wow_core.runtime.assembly import build_runtime
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import WowSettings


class Counting(CommandGatewayDecorator):
    streams = 0

    def send_and_wait_stream(
        self, command: CommandMessage[Any], wait: WaitPlan | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[CommandResult]:
        Counting.streams += 1
        return self.inner.send_and_wait_stream(command, wait, timeout=timeout)


class Outer(Middleware):
    def decorate_gateway(self, gateway: CommandGateway) -> CommandGateway:
        return CommandGatewayDecorator(gateway)


class Inner(Middleware):
    def decorate_gateway(self, gateway: CommandGateway) -> CommandGateway:
        return Counting(gateway)


async def test_a_stream_passes_through_every_decorator_of_the_gateway() -> None:
    container = create_container(WowSettings())
    container.middleware.override([Outer(), Inner()])
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    async with runtime:
        command = runtime.aggregates.command(Open("ada"))
        stages = [
            r.stage.value
            async for r in runtime.gateway.send_and_wait_stream(command, CommandWait.processed())
        ]
    assert stages == ["SENT", "PROCESSED"]
    assert Counting.streams == 1, "the inner decorator saw the stream"
