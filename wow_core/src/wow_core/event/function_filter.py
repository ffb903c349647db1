"""The innermost filter: retrieve the function stored on the exchange and invoke it.

For a stateless saga, what the function returns is the commands to send: each is sent
through the :class:`CommandSender` (the ``CommandGateway``) inside the function boundary,
so a failed send fails the function (and is retried and recorded like any error). A
command whose ``request_id`` was left at its default gets a stable one derived from the
event id and its position, so a redelivered event produces the same requests and the
command kernel de-duplicates them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from inspect import isawaitable
from typing import Any, Protocol, runtime_checkable

from wow_core.event.exchange import FunctionExchange
from wow_core.event.filter import Next, filter_type, order
from wow_core.event.function import ComponentKind
from wow_core.metrics import metrics_source
from wow_core.model import CommandMessage

ResultHandler = Callable[[FunctionExchange, Any], Awaitable[None]]


@order(1_000_000, after=["RetryableFilter"])
@filter_type(ComponentKind.EVENT_PROCESSOR, ComponentKind.STATELESS_SAGA, ComponentKind.PROJECTION)
class FunctionFilter:
    """Invokes ``exchange.function``; stores its return value as ``exchange.result``."""

    name = "FunctionFilter"

    def __init__(self, result_handler: ResultHandler | None = None) -> None:
        self._result_handler = result_handler

    async def filter(self, exchange: FunctionExchange, next: Next) -> None:
        exchange.attempts += 1
        function = exchange.function
        result = function.call(exchange.message)
        if function.is_async or (result is not None and isawaitable(result)):
            result = await result
        if self._result_handler is not None and exchange.function.component is ComponentKind.STATELESS_SAGA:
            await self._result_handler(exchange, result)
        exchange.result = result
        await next(exchange)


@runtime_checkable
class CommandSender(Protocol):
    """What a saga sends its commands through (the ``CommandGateway``)."""

    async def send(self, command: CommandMessage[Any]) -> Any: ...


class SagaCommandError(TypeError):
    """A saga function returned something that is not a command."""


def saga_commands(result: object) -> list[CommandMessage[Any]]:
    """The commands a saga function returned: None, one command, or an iterable of them."""
    if result is None:
        return []
    if isinstance(result, CommandMessage):
        return [result]
    if isinstance(result, Iterable) and not isinstance(result, str | bytes):
        commands = list(result)
        for item in commands:
            if not isinstance(item, CommandMessage):
                raise SagaCommandError(f"a saga function returned {type(item).__name__} among its commands")
        return commands
    raise SagaCommandError(f"a saga function returns commands, not {type(result).__name__}")


class SagaCommandSender:
    """Sends the commands a saga function returned, with stable request ids."""

    def __init__(self, sender: CommandSender) -> None:
        self.sender = sender

    async def __call__(self, exchange: FunctionExchange, result: Any) -> None:
        commands = saga_commands(result)
        if not commands:
            return
        token = metrics_source.set(f"saga:{exchange.function.processor_name}")
        try:
            for index, command in enumerate(commands):
                if command.request_id == command.id:
                    command = dataclasses.replace(
                        command, request_id=f"{exchange.message.id}.{exchange.function.function_name}.{index}"
                    )
                await self.sender.send(command)
        finally:
            metrics_source.reset(token)
