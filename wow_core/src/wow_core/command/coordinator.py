"""The WaitCoordinator: matches wait signals to waiting commands by command id.

Dispatchers signal stages with ``coordinator.route(message.header, signal)``: the header's
wait endpoint (:mod:`wow_core.command.endpoint`) says which process waits. This process's
own endpoint (or none: a wait registered here directly) is a plain method call into
:meth:`WaitCoordinator.signal`, nothing serialized; another process's endpoint goes out
through :attr:`WaitCoordinator.remote` (the process's ``CommandWaitNotifier``), fire and
forget. A signal nobody waits for is dropped. Signals are plain method calls on the event
loop of the coordinator; a signal from another thread goes through
``loop.call_soon_threadsafe(coordinator.signal, signal)``.

A chain wait (:meth:`~wow_core.command.CommandWait.chain`) is one registration under the
caller's command id: the commands the saga sends carry ``command_wait_root`` in their
header, so their signals reach the same waiter (:attr:`WaitSignal.root_id`), in any
order relative to the saga's own ``SAGA_HANDLED`` (they are kept until it arrives).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wow_core.command.endpoint import WAIT_ENDPOINT, WAIT_ROOT, WaitContext, WaitEndpoint, process_id, wanted
from wow_core.command.errors import DuplicateWaitError
from wow_core.command.stages import CommandResult, CommandStage, WaitPlan, WaitSignal
from wow_core.model import CommandMessage

if TYPE_CHECKING:
    from wow_core.command.notifier import RemoteSignals


class Waiter:
    """One registered wait: its plan, the last stage reached, and the result to come.

    ``on_stage``, when set (a streaming wait), is called with a result for each stage
    before the one waited for (``PROCESSED`` before an event stage), in stage order (a
    stage whose signal arrives after a later one is skipped: the later one proves it),
    then with the final result.
    """

    __slots__ = (
        "command",
        "done",
        "expired",
        "future",
        "head",
        "hops",
        "hops_done",
        "last_stage",
        "on_stage",
        "plan",
        "results",
        "sending",
        "streamed",
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
        # Streaming waits: where stage results go, and the rank of the last one given.
        self.on_stage: Callable[[CommandResult], None] | None = None
        self.streamed = 0
        # Chain waits: the saga's last SAGA_HANDLED, the commands it sent, their signals.
        self.head: WaitSignal | None = None
        self.hops: dict[str, None] | None = None
        self.hops_done: dict[str, WaitSignal] | None = None

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
        plan = self.plan
        if signal.root_id and signal.root_id != signal.command_id:
            return self._hop(signal) if plan.tail is not None else False
        if signal.succeeded:
            self.reached(signal.stage)
            if signal.result:
                if self.results is None:
                    self.results = dict(signal.result)
                else:
                    self.results.update(signal.result)
        if plan.tail is not None and signal.succeeded and plan.matches(signal):
            return self._head(signal)
        if not plan.ends_with(signal):
            rank = signal.stage.rank
            if self.on_stage is not None and signal.succeeded and self.streamed < rank < plan.stage.rank:
                self.streamed = rank
                self.on_stage(self._result(signal))
            return False
        self._complete(signal)
        return True

    def _head(self, signal: WaitSignal) -> bool:
        """A SAGA_HANDLED of the saga a chain waits for: note the commands it sent."""
        hops = self.hops
        if hops is None:
            hops = self.hops = {}
        for command_id in signal.commands:
            hops[command_id] = None
        if not signal.is_last:
            return False
        self.head = signal
        if self.on_stage is not None:
            self.streamed = signal.stage.rank
            self.on_stage(self._result(signal))
        return self._chain_done(None)

    def _hop(self, signal: WaitSignal) -> bool:
        """A signal of a command the saga sent: the chain's next hop."""
        tail = self.plan.tail
        assert tail is not None
        if not tail.ends_with(signal):
            return False
        if not signal.succeeded:
            self._complete(signal, chained=True)
            return True
        done = self.hops_done
        if done is None:
            done = self.hops_done = {}
        done[signal.command_id] = signal
        return self._chain_done(signal)

    def _chain_done(self, latest: WaitSignal | None) -> bool:
        head = self.head
        if head is None:
            return False
        hops = self.hops or {}
        done = self.hops_done or {}
        if any(command_id not in done for command_id in hops):
            return False
        if not hops:
            self._complete(head)
            return True
        if latest is None or latest.command_id not in hops:
            latest = max((done[command_id] for command_id in hops), key=lambda s: s.signal_time)
        self.reached(latest.stage)
        self._complete(latest, chained=True)
        return True

    def _result(self, signal: WaitSignal, *, chained: bool = False) -> CommandResult:
        return CommandResult(
            command_id=self.command.id,
            request_id=self.command.request_id,
            stage=signal.stage,
            wait_stage=self.plan.stage,
            aggregate_id=signal.aggregate_id or (None if chained else self.command.aggregate_id),
            aggregate_version=signal.aggregate_version,
            result=self.results if self.results and not chained else signal.result,
            error_code=signal.error_code,
            error_msg=signal.error_msg,
            errors=signal.errors,
            duplicate=signal.duplicate,
            processor_name=signal.processor_name,
            function_name=signal.function_name,
            signal_time=signal.signal_time,
            chain_command_id=signal.command_id if chained else "",
        )

    def _complete(self, signal: WaitSignal, *, chained: bool = False) -> None:
        result = self._result(signal, chained=chained)
        self.future.set_result(result)
        if self.on_stage is not None:
            self.on_stage(result)


class WaitCoordinator:
    """Waits by command id; at most one wait per command id.

    The gateway registers before sending and removes the registration in every outcome
    (result, error, timeout, cancellation), so :func:`len` is 0 when no caller waits.

    ``endpoint`` is this process's wait endpoint (``in_memory:<process id>`` until the
    runtime's notifier started and gave its own); ``remote`` sends to other processes
    (``None``: signals for another process are dropped and counted in ``unroutable``).
    ``unmatched`` counts signals addressed to this process for no wait in progress (a
    wait that finished or timed out, or never existed): they are dropped. ``forwarded``
    counts commands executed here for a wait registered elsewhere (:meth:`forward`).
    """

    __slots__ = ("_waiters", "endpoint", "forwarded", "remote", "unmatched", "unroutable")

    def __init__(self, endpoint: str | None = None) -> None:
        self._waiters: dict[str, Waiter] = {}
        self.endpoint = endpoint or str(WaitEndpoint("in_memory", process_id()))
        self.remote: RemoteSignals | None = None
        self.unmatched = 0
        self.unroutable = 0
        self.forwarded = 0

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
        waiter = self._waiters.get(signal.root_id or signal.command_id)
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

        Never raises; delivery to another process is not awaited. A header naming a chain's
        root (``command_wait_root``) sets the signal's ``root_id``.
        """
        endpoint = header.get(WAIT_ENDPOINT)
        if endpoint is None:
            self.signal(signal)
            return
        root = header.get(WAIT_ROOT)
        if root:
            signal.root_id = root
        if endpoint == self.endpoint:
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
        if endpoint is None:
            return command_id in self._waiters
        if endpoint == self.endpoint:
            return (header.get(WAIT_ROOT) or command_id) in self._waiters
        return True

    def forward(self, command: CommandMessage[Any], context: WaitContext | None) -> CommandMessage[Any]:
        """``command``, carrying ``context``: the wait of another process (or of this one),
        taken from another envelope, so that executing the returned command here signals
        that waiter at every stage, exactly as for a command a saga sent in a chain.

        The entry of intakes that receive a command with its wait context beside it (the
        cluster intake of spec 002) rather than in the command's header. ``None`` (nobody
        waits) returns the command with any wait context removed, so a stale one is never
        followed. A read-only header is copied first; the command is otherwise unchanged.
        """
        if command.header.read_only:
            command = command.copy()
        if context is None:
            for key in [k for k in command.header if k.startswith("command_wait_")]:
                del command.header[key]
            return command
        context.write(command.header)
        if context.endpoint != self.endpoint:
            self.forwarded += 1
        return command

    def waiting(self, command_id: str) -> bool:
        return command_id in self._waiters

    def __len__(self) -> int:
        return len(self._waiters)
