"""The innermost filter: retrieve the function stored on the exchange and invoke it.

For a stateless saga, what the function returns is the commands to send: each is sent
through the :class:`CommandSender` (the ``CommandGateway``) inside the function boundary,
so a failed send fails the function (and is retried and recorded like any error). A
command whose ``request_id`` was left at its default gets a stable one derived from the
event id and its position, so a redelivered event produces the same requests and the
command kernel de-duplicates them.

When the event's stream carries the head of a chain wait
(:meth:`~wow_core.command.CommandWait.chain`) naming this saga (or no saga), each command
gets the chain's next hop as its wait context
(:meth:`~wow_core.command.endpoint.WaitContext.onward`): its stages signal the caller
that waits for the chain, wherever they happen.

Each command also carries its :class:`~wow_core.event.compensation.SagaOrigin` (this saga
function and the event it handled) in its header, unless the function's ``@retry``
disables compensation: the command dispatcher of the aggregate that rejects or fails the
command hands it to the failure recorder, so a failed hop of the saga is a record of
this function on this event, retried by running the function again (the commands it
already got through are then duplicates the kernel recognises by their request ids).
When the function runs as a compensation, it waits for each command to be ``PROCESSED``
and fails with :class:`SagaCommandRejectedError` if one is rejected, so the compensation
settles on what the commands did, not on their having been sent. That wait ends at once
when the dispatcher stops (:mod:`wow_core.event.stopping`): the replay is released for
redelivery and its record stays ``PREPARED``; a stop does not wait for the commands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from inspect import isawaitable
from typing import Any, Protocol, runtime_checkable

from wow_core.command.endpoint import InvalidWaitEndpointError, WaitContext
from wow_core.command.origin import SagaOrigin
from wow_core.command.stages import CommandWait
from wow_core.event.exchange import FunctionExchange
from wow_core.event.filter import Next, filter_type, order
from wow_core.event.function import ComponentKind
from wow_core.metrics import metrics_source
from wow_core.model import CommandMessage, DomainEvent, StateEvent

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


@runtime_checkable
class WaitingCommandSender(CommandSender, Protocol):
    """A sender that can also wait for a stage (the ``CommandGateway``)."""

    async def send_and_wait(
        self, command: CommandMessage[Any], wait: Any = None, *, timeout: float | None = None
    ) -> Any: ...


class SagaCommandRejectedError(RuntimeError):
    """A command a saga function sent during a compensation was rejected or failed."""

    def __init__(self, command: CommandMessage[Any], error_code: str, error_msg: str) -> None:
        super().__init__(
            f"{command.name} {command.id} to {command.aggregate_id} was not processed: {error_code}"
            + (f": {error_msg}" if error_msg else "")
        )
        self.command = command
        self.error_code = error_code
        self.error_msg = error_msg


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
        function = exchange.function
        onward = _onward(exchange)
        origin = saga_origin(exchange) if function.retry_enabled else None
        waiting = self.sender if exchange.compensation is not None else None
        token = metrics_source.set(f"saga:{function.processor_name}")
        try:
            for index, command in enumerate(commands):
                if command.request_id == command.id:
                    command = dataclasses.replace(
                        command, request_id=f"{exchange.message.id}.{function.function_name}.{index}"
                    )
                if onward is not None or origin is not None:
                    if command.header.read_only:
                        command = command.copy()
                    if onward is not None:
                        onward.write(command.header)
                    if origin is not None:
                        command.header.update(origin)
                if isinstance(waiting, WaitingCommandSender):
                    sent = waiting.send_and_wait(command, CommandWait.processed())
                    stop = exchange.stop
                    if stop is not None:
                        sent = stop.interrupt(sent, f"waiting for {command.name} {command.id}")
                    result = await sent
                    if not result.succeeded:
                        raise SagaCommandRejectedError(command, result.error_code, result.error_msg)
                else:
                    await self.sender.send(command)
        finally:
            metrics_source.reset(token)


def saga_origin(exchange: FunctionExchange) -> dict[str, str]:
    """The header entries naming this saga function and the event it handles."""
    message = exchange.message
    event = message.stream.events[0] if isinstance(message, StateEvent) else message
    assert isinstance(event, DomainEvent)
    ref = exchange.function.ref
    named = event.aggregate_id.named_aggregate
    compensation = exchange.compensation
    return SagaOrigin(
        ref.context_name,
        ref.processor_name,
        ref.function_name,
        ref.function_kind,
        event.id,
        "+".join(e.name for e in message.stream.events) if isinstance(message, StateEvent) else event.name,
        named.context_name,
        named.aggregate_name,
        event.aggregate_id.id,
        event.version,
        event.aggregate_id.tenant_id,
        message.stream.id if isinstance(message, StateEvent) else "",
        compensation.compensation_id if compensation is not None else "",
    ).to_header()


def _onward(exchange: FunctionExchange) -> WaitContext | None:
    """The wait context of the commands this saga function sends, if a chain waits on it."""
    try:
        context = WaitContext.of(exchange.stream.header)
    except InvalidWaitEndpointError:
        return None  # a malformed context is not followed (the notifier drops it too)
    if context is None:
        return None
    ref = exchange.function.ref
    return context.onward(exchange.stream.command_id, ref.context_name, ref.processor_name, ref.function_name)
