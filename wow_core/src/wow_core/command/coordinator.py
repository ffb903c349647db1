"""The WaitCoordinator: matches wait signals to waiting commands by command id.

Dispatchers signal stages with ``coordinator.route(message.header, signal)``: the header's
wait endpoint (:mod:`wow_core.command.endpoint`) says which process waits. This process's
own endpoint (or none: a wait registered here directly) is a plain method call into
:meth:`WaitCoordinator.signal`, nothing serialized; another process's endpoint goes out
through :attr:`WaitCoordinator.remote` (the process's ``CommandWaitNotifier``), fire and
forget. A signal nobody waits for is dropped. Signals are plain method calls on the event
loop of the coordinator; a signal from another thread goes through
``loop.call_soon_threadsafe(coordinator.signal, signal)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wow_core.command.endpoint import WAIT_ENDPOINT, WaitEndpoint, process_id, wanted
from wow_core.command.errors import DuplicateWaitError
from wow_core.command.stages import CommandResult, CommandStage, WaitPlan, WaitSignal
from wow_core.model import CommandMessage

if TYPE_CHECKING:
    from wow_core.command.notifier import RemoteSignals


class Waiter:
    """One registered wait: its plan, the last stage reached, and the result to come."""

    __slots__ = (
        "command",
        "done",
        "expired",
        "future",
        "last_stage",
        "plan",
        "results",
        "sending",
        "task",
        "task_cancelled",
    )

    def __init__(self, command: CommandMessage[Any], plan: WaitPlan, future: asyncio.Future[CommandResult]):
        self.command = command
        self.plan = plan
        self.future = future
        self.last_stage: CommandStage | None = None
        # What earlier stages returned (the command's result at PROCESSED), so a wait for a
        # later stage still reports it; a later signal's own result adds to it.
        self.results: dict[str, Any] | None = None
        # Deadline bookkeeping, driven by CommandGateway.send_and_wait.
        self.task: asyncio.Task[Any] | None = None
        self.sending = False
        self.done = False
        self.expired = False
        self.task_cancelled = False

    def expire(self) -> None:
        """The deadline passed: interrupt the send in progress, or end the wait."""
        self.expired = True
        if self.sending and self.task is not None:
            self.task_cancelled = True
            self.task.cancel()
        elif not self.future.done():
            self.future.cancel()

    def reached(self, stage: CommandStage) -> None:
        if self.last_stage is None or stage.rank > self.last_stage.rank:
            self.last_stage = stage

    def offer(self, signal: WaitSignal) -> bool:
        """Record ``signal``; complete the wait when it ends the plan. True when it did."""
        if self.future.done():
            return False
        if signal.succeeded:
            self.reached(signal.stage)
            if signal.result:
                if self.results is None:
                    self.results = dict(signal.result)
                else:
                    self.results.update(signal.result)
        if not self.plan.ends_with(signal):
            return False
        self.future.set_result(
            CommandResult(
                command_id=self.command.id,
                request_id=self.command.request_id,
                stage=signal.stage,
                wait_stage=self.plan.stage,
                aggregate_id=signal.aggregate_id or self.command.aggregate_id,
                aggregate_version=signal.aggregate_version,
                result=self.results if self.results else signal.result,
                error_code=signal.error_code,
                error_msg=signal.error_msg,
                errors=signal.errors,
                duplicate=signal.duplicate,
                processor_name=signal.processor_name,
                function_name=signal.function_name,
                signal_time=signal.signal_time,
            )
        )
        return True


class WaitCoordinator:
    """Waits by command id; at most one wait per command id.

    The gateway registers before sending and removes the registration in every outcome
    (result, error, timeout, cancellation), so :func:`len` is 0 when no caller waits.

    ``endpoint`` is this process's wait endpoint (``in_memory:<process id>`` until the
    runtime's notifier started and gave its own); ``remote`` sends to other processes
    (``None``: signals for another process are dropped and counted in ``unroutable``).
    ``unmatched`` counts signals addressed to this process for no wait in progress (a
    wait that finished or timed out, or never existed): they are dropped.
    """

    __slots__ = ("_waiters", "endpoint", "remote", "unmatched", "unroutable")

    def __init__(self, endpoint: str | None = None) -> None:
        self._waiters: dict[str, Waiter] = {}
        self.endpoint = endpoint or str(WaitEndpoint("in_memory", process_id()))
        self.remote: RemoteSignals | None = None
        self.unmatched = 0
        self.unroutable = 0

    def register(self, command: CommandMessage[Any], plan: WaitPlan) -> Waiter:
        if command.id in self._waiters:
            raise DuplicateWaitError(f"command {command.id!r} is already waited for")
        waiter = Waiter(command, plan, asyncio.get_running_loop().create_future())
        self._waiters[command.id] = waiter
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        if self._waiters.get(waiter.command.id) is waiter:
            del self._waiters[waiter.command.id]
        if not waiter.future.done():
            waiter.future.cancel()

    def signal(self, signal: WaitSignal) -> bool:
        """Deliver ``signal`` to the wait of its command, if any; never raises for a
        signal nobody waits for. True when a wait in progress took it."""
        waiter = self._waiters.get(signal.command_id)
        if waiter is None or waiter.future.done():
            return False
        waiter.offer(signal)
        return True

    def receive(self, signal: WaitSignal) -> bool:
        """A signal addressed to this process (from another one, or from
        :meth:`route`): delivered, or dropped and counted in ``unmatched``."""
        if self.signal(signal):
            return True
        self.unmatched += 1
        return False

    def route(self, header: Mapping[str, str], signal: WaitSignal) -> None:
        """Send ``signal`` where the wait context of ``header`` says (see the module doc).

        Never raises; delivery to another process is not awaited.
        """
        endpoint = header.get(WAIT_ENDPOINT)
        if endpoint is None:
            self.signal(signal)
        elif endpoint == self.endpoint:
            self.receive(signal)
        elif not wanted(header, signal):
            return
        elif self.remote is None:
            self.unroutable += 1
        else:
            self.remote.send(endpoint, signal)

    def wants(self, command_id: str, header: Mapping[str, str]) -> bool:
        """Whether a signal of ``command_id`` whose message carries ``header`` may be
        delivered anywhere (cheap: used to avoid building signals nobody waits for)."""
        endpoint = header.get(WAIT_ENDPOINT)
        if endpoint is None or endpoint == self.endpoint:
            return command_id in self._waiters
        return True

    def waiting(self, command_id: str) -> bool:
        return command_id in self._waiters

    def __len__(self) -> int:
        return len(self._waiters)
