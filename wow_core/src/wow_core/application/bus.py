"""``ApplicationCommandBus``: plain commands, plain handlers, a middleware pipeline.

Not the aggregate :class:`~wow_core.messaging.CommandBus`: an application command is
any object (usually a dataclass), handled by the one handler registered for its exact
class, through the middleware the application lists, outermost first::

    bus = ApplicationCommandBus(
        middleware=[policy, TransportMiddleware(registry, serializer), retry, transaction],
    )

    @bus.handler(ChargeCard)
    async def charge(command: ChargeCard, operation: Operation) -> Receipt: ...

    operation = await bus.dispatch(ChargeCard(...), attributes={"tenant_id": "t1"})

A middleware is ``async (operation, next) -> result``; it calls ``next(operation)`` to
go on, or returns without calling it to short-circuit (the transport middleware queues
an asynchronous command that way). The bus imposes no order and rejects none: the
order is the application's semantics (``docs/application.md`` discusses the common ones).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from wow_core.application.errors import NoHandlerError
from wow_core.application.operation import ExecutionMode, Operation

__all__ = ["ApplicationCommandBus", "CommandHandler", "CommandMiddleware", "Next"]

Next = Callable[[Operation], Awaitable[Any]]
CommandHandler = Callable[[Any, Operation], Any]
"""``handler(command, operation)``; a coroutine function or a plain function."""

H = TypeVar("H", bound=CommandHandler)


@runtime_checkable
class CommandMiddleware(Protocol):
    async def __call__(self, operation: Operation, next: Next) -> Any: ...


@runtime_checkable
class ValidatingMiddleware(Protocol):
    """A middleware that checks its configuration against the bus at start-up."""

    def validate(self, bus: ApplicationCommandBus) -> None: ...


class ApplicationCommandBus:
    """See the module docstring."""

    __slots__ = ("_handlers", "_pipeline", "middleware")

    def __init__(
        self,
        middleware: Iterable[CommandMiddleware] = (),
        handlers: Mapping[type[Any], CommandHandler] | None = None,
    ) -> None:
        self.middleware: tuple[CommandMiddleware, ...] = tuple(middleware)
        for index, item in enumerate(self.middleware):
            if not callable(item):
                raise TypeError(f"middleware #{index} ({type(item).__qualname__}) is not callable")
        self._handlers: dict[type[Any], CommandHandler] = {}
        for command_type, handler in (handlers or {}).items():
            self.register(command_type, handler)
        pipeline: Next = self._invoke
        for item in reversed(self.middleware):
            pipeline = _link(item, pipeline)
        self._pipeline = pipeline

    def register(self, command_type: type[Any], handler: CommandHandler) -> None:
        """Handle commands of exactly ``command_type`` with ``handler``; one handler a class."""
        if not isinstance(command_type, type):
            raise TypeError(f"handlers are registered by command class, not {command_type!r}")
        if not callable(handler):
            raise TypeError(f"the handler of {command_type.__qualname__} is not callable")
        if command_type in self._handlers:
            raise ValueError(f"{command_type.__qualname__} already has a handler")
        self._handlers[command_type] = handler

    def handler(self, command_type: type[Any]) -> Callable[[H], H]:
        """Decorator form of :meth:`register`."""

        def decorate(handler: H) -> H:
            self.register(command_type, handler)
            return handler

        return decorate

    @property
    def command_types(self) -> tuple[type[Any], ...]:
        return tuple(self._handlers)

    def validate(self) -> None:
        """Let every middleware check its configuration (an asynchronous command naming a
        transport that is not configured fails here, at start-up)."""
        for item in self.middleware:
            if isinstance(item, ValidatingMiddleware):
                item.validate(self)

    async def dispatch(
        self,
        command: object,
        *,
        attributes: Mapping[str, Any] | None = None,
        operation_id: str | None = None,
        execution_mode: ExecutionMode = ExecutionMode.DEFAULT,
    ) -> Operation:
        """Run ``command`` through the pipeline; the returned operation says whether it
        completed here (``result``) or was queued (``transport``)."""
        operation = Operation(
            command, operation_id=operation_id, attributes=attributes, execution_mode=execution_mode
        )
        return await self.execute(operation)

    async def execute(self, operation: Operation) -> Operation:
        try:
            await self._pipeline(operation)
        except BaseException:
            operation.fail()
            raise
        return operation

    async def _invoke(self, operation: Operation) -> Any:
        handler = self._handlers.get(type(operation.command))
        if handler is None:
            raise NoHandlerError(f"no handler is registered for {type(operation.command).__qualname__}")
        result = handler(operation.command, operation)
        if inspect.isawaitable(result):
            result = await result
        operation.complete(result)
        return result


def _link(middleware: CommandMiddleware, next: Next) -> Next:
    async def call(operation: Operation) -> Any:
        return await middleware(operation, next)

    return call
