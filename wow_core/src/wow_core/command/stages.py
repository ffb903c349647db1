"""Wait stages, wait plans (``CommandWait``), wait signals and command results.

What each stage proves (the Completion Semantics page has the full table):

- ``SENT``: the command bus's ``send`` completed (for the in-memory bus: the message
  entered the local sink, possibly with no receiver). Not that anyone received it.
- ``PROCESSED``: the command kernel decided the command: its events were appended to
  the event store (or it was rejected, or it was a duplicate). Not that any event
  handler, projection or snapshot saw the events.
- ``SNAPSHOT`` / ``PROJECTED`` / ``EVENT_HANDLED`` / ``SAGA_HANDLED``: one function of the
  matching dispatcher (snapshotting, a projection, an event processor, a saga) finished
  handling the command's events. Only that function boundary: not the other
  dispatchers, not a follow-up command, not an external system.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from wow_core.model import AggregateId, now_ms

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class CommandStage(StrEnum):
    """The stages a caller can wait for, in the order they can be reached."""

    SENT = "SENT"
    PROCESSED = "PROCESSED"
    SNAPSHOT = "SNAPSHOT"
    PROJECTED = "PROJECTED"
    EVENT_HANDLED = "EVENT_HANDLED"
    SAGA_HANDLED = "SAGA_HANDLED"

    @property
    def rank(self) -> int:
        """0 for SENT, 1 for PROCESSED, 2 for the event stages (which run in parallel)."""
        return _RANK[self]


_RANK = {
    CommandStage.SENT: 0,
    CommandStage.PROCESSED: 1,
    CommandStage.SNAPSHOT: 2,
    CommandStage.PROJECTED: 2,
    CommandStage.EVENT_HANDLED: 2,
    CommandStage.SAGA_HANDLED: 2,
}


class ErrorCodes:
    """The error codes the framework itself reports (a domain error brings its own)."""

    SUCCEEDED = ""
    COMMAND_INVALID = "COMMAND_INVALID"
    COMMAND_UNHANDLED = "COMMAND_UNHANDLED"
    AGGREGATE_NOT_FOUND = "AGGREGATE_NOT_FOUND"
    DUPLICATE_AGGREGATE_ID = "DUPLICATE_AGGREGATE_ID"
    COMMAND_EXPECT_VERSION_CONFLICT = "COMMAND_EXPECT_VERSION_CONFLICT"
    EVENT_VERSION_CONFLICT = "EVENT_VERSION_CONFLICT"
    PROCESSING_ERROR = "PROCESSING_ERROR"


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason a command body is invalid: where (a dotted path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(slots=True)
class WaitSignal:
    """A stage reached by one command, sent to :meth:`WaitCoordinator.signal`.

    A plain (not frozen, for speed on the hot path) value: treat it as immutable.
    ``error_code`` empty means success. ``final`` says no later stage will be signalled
    for this command (a rejection, a duplicate, a command that appended nothing), so a
    wait for a later stage completes with this signal. ``context_name``,
    ``processor_name`` and ``function_name`` name the function that signalled an event
    stage; a wait plan may filter on them. ``is_last`` is true when this is the last
    signal of that function for the command (the last event of the stream it handles):
    only those, and failures, are signalled to a waiting caller.
    """

    command_id: str
    stage: CommandStage
    aggregate_id: AggregateId | None = None
    aggregate_version: int | None = None
    result: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    error_code: str = ErrorCodes.SUCCEEDED
    error_msg: str = ""
    errors: tuple[Violation, ...] = ()
    duplicate: bool = False
    final: bool = False
    context_name: str = ""
    processor_name: str = ""
    function_name: str = ""
    signal_time: int = field(default_factory=now_ms)
    is_last: bool = True
    root_id: str = ""
    commands: tuple[str, ...] = ()

    @property
    def succeeded(self) -> bool:
        return not self.error_code

    @property
    def wait_id(self) -> str:
        """The command id of the wait this signal serves."""
        return self.root_id or self.command_id


@dataclass(slots=True)
class CommandResult:
    """What a caller learns about its command (a value: treat it as immutable).

    ``stage`` is the stage this result reports (the stage waited for, or an earlier one
    that ended the command: a rejection is reported at ``PROCESSED``).
    ``duplicate`` marks a request decided before: ``aggregate_id`` and
    ``aggregate_version`` are then those of the original.

    For a chain wait (:meth:`CommandWait.chain`) the result of the last stage is that of
    a command the saga sent: ``command_id`` stays the one the caller sent,
    ``chain_command_id`` names the saga's command the result reports (empty otherwise),
    and ``aggregate_id``/``aggregate_version`` are that command's.
    """

    command_id: str
    request_id: str
    stage: CommandStage
    wait_stage: CommandStage
    aggregate_id: AggregateId | None
    aggregate_version: int | None = None
    result: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    error_code: str = ErrorCodes.SUCCEEDED
    error_msg: str = ""
    errors: tuple[Violation, ...] = ()
    duplicate: bool = False
    processor_name: str = ""
    function_name: str = ""
    signal_time: int = field(default_factory=now_ms)
    chain_command_id: str = ""

    @property
    def succeeded(self) -> bool:
        return not self.error_code


@dataclass(frozen=True, slots=True)
class WaitPlan:
    """What ``send_and_wait`` waits for: a stage and, for event stages, optionally which
    function. Build plans with :class:`CommandWait`.

    ``supports_void``: whether a Void command may use the plan. Only ``SENT`` can: a
    Void command is dropped by the command dispatcher and reaches no later stage.

    ``tail``: for a chain (:meth:`CommandWait.chain`), the plan each command the saga
    sent must reach; this plan (``SAGA_HANDLED``) is then the chain's head.
    """

    stage: CommandStage
    supports_void: bool = False
    context_name: str = ""
    processor_name: str = ""
    function_name: str = ""
    tail: WaitPlan | None = None

    def matches(self, signal: WaitSignal) -> bool:
        """Whether ``signal`` is the one this plan waits for."""
        return (
            signal.stage is self.stage
            and (not self.context_name or signal.context_name == self.context_name)
            and (not self.processor_name or signal.processor_name == self.processor_name)
            and (not self.function_name or signal.function_name == self.function_name)
        )

    def ends_with(self, signal: WaitSignal) -> bool:
        """Whether ``signal`` completes a wait on this plan.

        The matching signal does; so does a final or failed signal of an earlier
        stage (a rejected command is never projected).
        """
        if self.matches(signal):
            return True
        return signal.stage.rank < self.stage.rank and (signal.final or not signal.succeeded)

    def __str__(self) -> str:
        names = [n for n in (self.context_name, self.processor_name, self.function_name) if n]
        text = f"{self.stage.value}({'.'.join(names)})" if names else self.stage.value
        return text if self.tail is None else f"{text} -> {self.tail}"


class CommandWait:
    """The built-in wait plans."""

    @staticmethod
    def sent() -> WaitPlan:
        """Until the bus's send completed; the only plan a Void command accepts."""
        return _SENT

    @staticmethod
    def processed() -> WaitPlan:
        """Until the kernel decided the command (appended, rejected or duplicate)."""
        return _PROCESSED

    @staticmethod
    def snapshot() -> WaitPlan:
        """Until the snapshot of the command's version was handled."""
        return _SNAPSHOT

    @staticmethod
    def projected(context_name: str = "", processor_name: str = "", function_name: str = "") -> WaitPlan:
        """Until a projection (optionally: this one) handled the command's events."""
        return WaitPlan(CommandStage.PROJECTED, False, context_name, processor_name, function_name)

    @staticmethod
    def event_handled(context_name: str = "", processor_name: str = "", function_name: str = "") -> WaitPlan:
        """Until an event processor (optionally: this one) handled the command's events."""
        return WaitPlan(CommandStage.EVENT_HANDLED, False, context_name, processor_name, function_name)

    @staticmethod
    def saga_handled(context_name: str = "", processor_name: str = "", function_name: str = "") -> WaitPlan:
        """Until a saga (optionally: this one) handled the command's events."""
        return WaitPlan(CommandStage.SAGA_HANDLED, False, context_name, processor_name, function_name)

    @staticmethod
    def chain(saga: WaitPlan, then: WaitPlan) -> WaitPlan:
        """Until a saga handled the command's events *and* every command it sent reached
        ``then``: a wait two hops away (the caller's command, the saga, the saga's commands).

        ``saga`` is a ``saga_handled(...)`` plan (naming the saga is wise when several
        handle the events); ``then`` is any plan past ``SENT`` (``SAGA_HANDLED`` already
        proves the saga's sends completed), not itself a chain. The wait context travels
        with the saga's commands (:mod:`wow_core.command.endpoint`), so each of them
        signals this process wherever it runs. The result reports the last of the saga's
        commands to reach ``then`` (``chain_command_id``); the first failure or rejection
        among them ends the wait with its error. A saga that sent nothing ends the chain
        at its own ``SAGA_HANDLED``.
        """
        if saga.stage is not CommandStage.SAGA_HANDLED or saga.tail is not None:
            raise ValueError(f"a chain starts at a saga_handled(...) plan, not {saga}")
        if then.stage is CommandStage.SENT:
            raise ValueError("a chain's next hop waits past SENT (SAGA_HANDLED proves the saga's sends)")
        if then.tail is not None:
            raise ValueError(f"a chain has one hop after the saga, not {then}")
        return WaitPlan(
            CommandStage.SAGA_HANDLED, False, saga.context_name, saga.processor_name, saga.function_name, then
        )


_SENT = WaitPlan(CommandStage.SENT, supports_void=True)
_PROCESSED = WaitPlan(CommandStage.PROCESSED)
_SNAPSHOT = WaitPlan(CommandStage.SNAPSHOT)
