"""The CommandDispatcher: from the command bus to the kernel, one aggregate at a time.

It subscribes (runtime-owned) to the command topics of the aggregates the kernel hosts,
one receiver for all of them (group ``<service>.command``). For every exchange:

- a **Void** command is acknowledged and dropped before the command pipeline: it never
  reaches the kernel and produces no ``PROCESSED`` or later stage (spec 000, Void);
- any other command runs on the :class:`~wow_core.runtime.keyed_executor.KeyedExecutor` in its
  aggregate's lane (one aggregate's commands in order, different aggregates in
  parallel, bounded in total); the kernel decides it, the ``PROCESSED`` signal goes to
  the wait endpoint in the command's header (this process's
  :class:`~wow_core.command.WaitCoordinator`, or the caller's process through its
  ``CommandWaitNotifier``, fire and forget), then the exchange is acknowledged.

A business outcome (a rejection, a duplicate) is acknowledged like a success: it is
decided. A failure of the kernel itself (the event store is down) is signalled as
``PROCESSING_ERROR`` and logged; the exchange is released without acknowledgement, so a
transport that redelivers will present the command again (the kernel's request-id
de-duplication keeps a second decision from writing twice). That signal is final for the
waiting caller (its wait ends with it; the dispatcher cannot know whether, or when, the
transport delivers again), yet the command may still be applied by a later delivery: its
message ends with :data:`NOT_DECIDED` to say so.

A command a saga sent carries its :class:`~wow_core.event.compensation.SagaOrigin`; when
it is rejected or fails, the dispatcher hands it to the ``saga_recorder`` (the failure
recorder, when it records saga hops) before it settles the exchange, so the failed hop
is recorded where the command was decided. A recorder that cannot write releases the
exchange unacknowledged, like a kernel failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.origin import (
    InvalidSagaOriginError,
    SagaCommandFailure,
    SagaCommandRecorder,
    SagaOrigin,
)
from wow_core.command.stages import CommandStage, ErrorCodes, WaitSignal
from wow_core.executor import Executor, NowaitExecutor
from wow_core.messaging.contract import (
    CommandBus,
    MessageReceiver,
    MessageSubscription,
    ServerCommandExchange,
)
from wow_core.model import CommandMessage, NamedAggregate
from wow_core.modeling.kernel import CommandKernel

log = logging.getLogger(__name__)

NOT_DECIDED = " (not decided: released for redelivery, the command may still be applied)"
"""Ends the message of the ``PROCESSING_ERROR`` signalled when the kernel itself failed (the
event store did not answer): the caller's wait ends with it, although a transport that
redelivers presents the command again, and a later delivery may apply it."""


class CommandDispatcher:
    """Runs the commands of the kernel's aggregates; see the module docstring."""

    def __init__(
        self,
        bus: CommandBus,
        kernel: CommandKernel,
        coordinator: WaitCoordinator,
        executor: Executor,
        *,
        group: str = "wow-service.command",
        named_aggregates: frozenset[NamedAggregate] | None = None,
        saga_recorder: SagaCommandRecorder | None = None,
    ) -> None:
        self.bus = bus
        self.kernel = kernel
        self.coordinator = coordinator
        self.executor = executor
        self.group = group
        self.saga_recorder = saga_recorder
        self.named_aggregates = (
            kernel.registry.named_aggregates if named_aggregates is None else named_aggregates
        )
        self._receiver: MessageReceiver[ServerCommandExchange] | None = None
        self._loop: asyncio.Task[None] | None = None
        self.void_dropped = 0

    @property
    def name(self) -> str:
        return "CommandDispatcher"

    @property
    def receiver(self) -> MessageReceiver[ServerCommandExchange] | None:
        return self._receiver

    async def prepare(self) -> None:
        """Open the receiver and wait until it is ready (no processing yet)."""
        if self._receiver is not None or not self.named_aggregates:
            return
        subscription = MessageSubscription.of(self.group, self.named_aggregates, runtime_owned=True)
        self._receiver = self.bus.receiver(subscription)
        await self._receiver.ready()

    async def start(self) -> None:
        """Open processing and consume (prepares first if needed)."""
        if self._loop is not None:
            return
        await self.prepare()
        if self._receiver is None:
            return
        self._receiver.open_processing()
        self._loop = asyncio.get_running_loop().create_task(self._consume(self._receiver), name=self.group)
        log.info(
            "command dispatcher %s runs %s", self.group, ", ".join(sorted(map(str, self.named_aggregates)))
        )

    async def _consume(self, receiver: MessageReceiver[ServerCommandExchange]) -> None:
        executor = self.executor
        submit_nowait = executor.submit_nowait if isinstance(executor, NowaitExecutor) else None
        async for exchange in receiver:
            command = exchange.message
            if command.is_void:
                self.void_dropped += 1
                self.kernel.dropped(command)
                await exchange.ack()
                continue
            work = _Work(self, exchange)
            if submit_nowait is None or not submit_nowait(command.aggregate_id, work):
                await executor.submit(command.aggregate_id, work)

    async def handle(self, exchange: ServerCommandExchange) -> None:
        """Decide one command, signal PROCESSED, settle the exchange."""
        command = exchange.message
        try:
            outcome = await self.kernel.process(command)
        except Exception as error:
            log.exception(
                "command %s %s to %s failed; released for redelivery",
                command.name,
                command.id,
                command.aggregate_id,
            )
            message = f"{type(error).__name__}: {error}{NOT_DECIDED}"
            self.coordinator.route(
                command.header,
                WaitSignal(
                    command.id,
                    CommandStage.PROCESSED,
                    command.aggregate_id,
                    error_code=ErrorCodes.PROCESSING_ERROR,
                    error_msg=message,
                    final=True,
                ),
            )
            await self._record_saga_hop(command, ErrorCodes.PROCESSING_ERROR, message, error)
            exchange.release()
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "command %s %s to %s (request %s): PROCESSED v%d %s",
                command.name,
                command.id,
                command.aggregate_id,
                command.request_id,
                outcome.version,
                "duplicate" if outcome.duplicate else outcome.error_code or "succeeded",
            )
        self.coordinator.route(command.header, outcome.signal())
        if (
            outcome.error_code
            and not outcome.duplicate
            and not await self._record_saga_hop(command, outcome.error_code, outcome.error_msg, None)
        ):
            exchange.release()
            return
        await exchange.ack()

    async def _record_saga_hop(
        self, command: CommandMessage[object], code: str, message: str, error: BaseException | None
    ) -> bool:
        """Record a failed command of a saga; False when the record could not be written."""
        recorder = self.saga_recorder
        if recorder is None:
            return True
        try:
            origin = SagaOrigin.from_header(command.header)
        except InvalidSagaOriginError as invalid:
            log.warning("command %s: its saga origin is not recorded: %s", command.id, invalid)
            return True
        if origin is None or origin.compensation_id:
            # No saga sent it, or a compensation did and waits for it to settle its record.
            return True
        try:
            await recorder.record_saga_command_failure(
                SagaCommandFailure(origin, command, code, message, error)
            )
        except Exception:
            log.exception("command %s: the failed saga hop could not be recorded", command.id)
            return False
        return True

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop taking commands and let those in flight finish (up to ``timeout``); close.

        True when everything in flight settled.
        """
        receiver = self._receiver
        if receiver is None:
            return True
        settled = await receiver.quiesce(timeout)
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        await receiver.close()
        self._receiver = None
        return settled


class _Work:
    """The executor's unit of work for one exchange (cheaper than a closure per command)."""

    __slots__ = ("dispatcher", "exchange")

    def __init__(self, dispatcher: CommandDispatcher, exchange: ServerCommandExchange) -> None:
        self.dispatcher = dispatcher
        self.exchange = exchange

    def __call__(self) -> Awaitable[None]:
        return self.dispatcher.handle(self.exchange)
