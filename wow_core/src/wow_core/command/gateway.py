"""The CommandGateway: sends commands and waits for the stage the caller chose."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.deadline import deadlines
from wow_core.command.endpoint import write_wait_context
from wow_core.command.errors import CommandValidationError, CommandWaitTimeoutError, VoidCommandWaitError
from wow_core.command.stages import CommandResult, CommandStage, CommandWait, Violation, WaitPlan
from wow_core.command.validation import validate_body
from wow_core.messaging.contract import CommandBus
from wow_core.metrics import metrics_source
from wow_core.model import CommandMessage

log = logging.getLogger(__name__)

BodyValidator = Callable[[object], Iterable[Violation]]


class CommandGateway:
    """Send a command, optionally wait for a stage.

    - A body with violations raises :class:`CommandValidationError`; nothing is sent.
    - A Void command accepts only a plan that supports Void (``CommandWait.sent()``);
      any other raises :class:`VoidCommandWaitError` before sending.
    - ``SENT`` is synthesized from the bus's ``send`` itself: it is exactly "the send
      completed", never a signal from elsewhere.
    - Every wait has a deadline (``timeout``, default ``default_timeout``); past it
      :class:`CommandWaitTimeoutError` names the command, the stage waited for and the
      last stage reached. The wait registration is removed in every outcome.
    - A caller that is cancelled while waiting only stops waiting: the command, once
      sent, goes on being processed.
    - Business outcomes (a rejection with its code, a duplicate) come back as a
      :class:`CommandResult`, they are not raised.
    - A plan past ``SENT`` writes the wait context (this process's wait endpoint, the
      stage and function waited for) into the command's header, so the process that
      reaches the stage, whichever it is, signals this one
      (:mod:`wow_core.command.endpoint`); a command whose header is read-only is copied
      first. Across processes a signal can be lost (the notifier is best effort): the
      wait then ends at its deadline, naming the last stage that did arrive.
    """

    __slots__ = ("_bus", "_coordinator", "_validators", "default_timeout")

    def __init__(
        self,
        bus: CommandBus,
        coordinator: WaitCoordinator,
        *,
        default_timeout: float = 30.0,
        validators: Iterable[BodyValidator] = (validate_body,),
    ) -> None:
        if default_timeout <= 0:
            raise ValueError("default_timeout must be > 0")
        self._bus = bus
        self._coordinator = coordinator
        self._validators = tuple(validators)
        self.default_timeout = default_timeout

    @property
    def coordinator(self) -> WaitCoordinator:
        return self._coordinator

    def _check(self, command: CommandMessage[Any], plan: WaitPlan) -> None:
        if command.is_void and not plan.supports_void:
            raise VoidCommandWaitError(command, plan)
        body = command.body
        violations: tuple[Violation, ...] = ()
        for validator in self._validators:
            if found := validator(body):
                violations = (*violations, *found)
        if violations:
            raise CommandValidationError(command, violations)

    async def send(self, command: CommandMessage[Any]) -> CommandResult:
        """Send ``command``; return its ``SENT`` result once the bus's send completed."""
        return await self.send_and_wait(command, CommandWait.sent())

    async def send_and_wait(
        self,
        command: CommandMessage[Any],
        wait: WaitPlan | None = None,
        *,
        timeout: float | None = None,
    ) -> CommandResult:
        """Send ``command`` and wait until ``wait`` (default ``CommandWait.processed()``)."""
        plan = CommandWait.processed() if wait is None else wait
        self._check(command, plan)
        deadline = self.default_timeout if timeout is None else timeout
        if deadline <= 0:
            raise ValueError("timeout must be > 0")
        # Who sends, for the bus's send metrics (one coroutine for the whole call: this
        # is the hot path of every command).
        token = None if metrics_source.get() else metrics_source.set("gateway")
        try:
            task = asyncio.current_task()
            assert task is not None, "send_and_wait runs in a task"
            clock = deadlines()
            if plan.stage is CommandStage.SENT:
                sending = _Sending(task)
                clock.add(sending, deadline)
                try:
                    await self._bus.send(command)
                except asyncio.CancelledError:
                    if sending.expired and task.uncancel() == 0:
                        raise CommandWaitTimeoutError(command, plan, None, deadline) from None
                    raise
                finally:
                    sending.done = True
                    clock.finished()
                return _sent_result(command)
            if command.header.read_only:
                command = command.copy()
            write_wait_context(command.header, plan, self._coordinator.endpoint)
            waiter = self._coordinator.register(command, plan)
            waiter.task = task
            clock.add(waiter, deadline)
            try:
                waiter.sending = True
                await self._bus.send(command)
                waiter.sending = False
                waiter.reached(CommandStage.SENT)
                return await waiter.future
            except asyncio.CancelledError:
                if waiter.expired:
                    external = task.uncancel() if waiter.task_cancelled else task.cancelling()
                    if external == 0:
                        raise CommandWaitTimeoutError(command, plan, waiter.last_stage, deadline) from None
                raise
            finally:
                waiter.done = True
                clock.finished()
                self._coordinator.unregister(waiter)
        finally:
            if token is not None:
                metrics_source.reset(token)

    async def send_and_wait_stream(
        self,
        command: CommandMessage[Any],
        wait: WaitPlan | None = None,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[CommandResult]:
        """Send ``command`` and yield a result for each stage as it is reached, in order:
        ``SENT``, then ``PROCESSED``, ..., ending with the result of ``wait`` (default
        ``CommandWait.processed()``), or earlier with the result that ended the command
        (a rejection at ``PROCESSED``, a failed function). For a chain, the saga's
        ``SAGA_HANDLED`` comes before the result of the saga's commands.

        The same checks as :meth:`send_and_wait` run before anything is sent; past the
        deadline (one for the whole stream) :class:`CommandWaitTimeoutError` is raised,
        naming the last stage reached. A stage whose signal arrives after a later one's
        (possible across processes) is not yielded: the later stage proves it. Leaving
        the iteration early ends the wait (use ``contextlib.aclosing`` to end it at once
        rather than when the iterator is collected); the command goes on being processed.
        """
        plan = CommandWait.processed() if wait is None else wait
        self._check(command, plan)
        deadline = self.default_timeout if timeout is None else timeout
        if deadline <= 0:
            raise ValueError("timeout must be > 0")
        loop = asyncio.get_running_loop()
        until = loop.time() + deadline
        if plan.stage is CommandStage.SENT:
            await self._send_before(command, plan, until, deadline)
            yield _sent_result(command)
            return
        if command.header.read_only:
            command = command.copy()
        write_wait_context(command.header, plan, self._coordinator.endpoint)
        waiter = self._coordinator.register(command, plan)
        stages: asyncio.Queue[CommandResult] = asyncio.Queue()
        waiter.on_stage = stages.put_nowait
        try:
            await self._send_before(command, plan, until, deadline)
            waiter.reached(CommandStage.SENT)
            yield _sent_result(command)
            while True:
                try:
                    async with asyncio.timeout_at(until):
                        result = await stages.get()
                except TimeoutError:
                    raise CommandWaitTimeoutError(command, plan, waiter.last_stage, deadline) from None
                yield result
                if waiter.future.done() and result is waiter.future.result():
                    return
        finally:
            waiter.done = True
            self._coordinator.unregister(waiter)

    async def _send_before(
        self, command: CommandMessage[Any], plan: WaitPlan, until: float, deadline: float
    ) -> None:
        """The bus's send, interrupted at ``until`` (a timeout of the send's own is raised as is)."""
        token = None if metrics_source.get() else metrics_source.set("gateway")
        scope = asyncio.timeout_at(until)
        try:
            async with scope:
                await self._bus.send(command)
        except TimeoutError:
            if scope.expired():
                raise CommandWaitTimeoutError(command, plan, None, deadline) from None
            raise
        finally:
            if token is not None:
                metrics_source.reset(token)


class _Sending:
    """The deadline of a send waited for until SENT: it interrupts the send."""

    __slots__ = ("done", "expired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.done = False
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        self.task.cancel()


def _sent_result(command: CommandMessage[Any]) -> CommandResult:
    return CommandResult(
        command_id=command.id,
        request_id=command.request_id,
        stage=CommandStage.SENT,
        wait_stage=CommandStage.SENT,
        aggregate_id=command.aggregate_id,
    )
