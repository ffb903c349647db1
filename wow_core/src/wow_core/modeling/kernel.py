"""The command kernel: decide one command against its aggregate.

Per command:

1. route: an unknown aggregate or command type is ``COMMAND_UNHANDLED``;
2. validate the body before any aggregate decides it: violations are
   ``COMMAND_INVALID``, listing them;
3. load the state: the latest snapshot (the kernel's own cache of sourced states
   first, then the :class:`~wow_core.eventsourcing.SnapshotRepository`), then the
   later events from the :class:`~wow_core.eventsourcing.EventStore`;
4. check the creation rules and the expected version, run the command function (a
   :class:`~wow_core.modeling.DomainError` is a rejection with its code and message);
5. append the new :class:`~wow_core.model.DomainEventStream` with the optimistic
   version check; a version conflict reloads and decides again, at most
   ``max_conflict_retries`` times, then it is reported (``EVENT_VERSION_CONFLICT``);
   a request id the store already holds for the aggregate type is a *duplicate*: the
   outcome names the original aggregate and version;
6. publish the stream on the ``DomainEventBus``, then the sourced state on the
   ``StateEventBus``.

A rejection writes nothing. A request id the store already holds is a duplicate
whatever the repeated command decides: a rejected command, an invalid body or a
decision that appends nothing is reported as the duplicate it is (a creation sent
twice finds its aggregate existing, but the answer is the original one). Only appended
request ids are recorded: a repeat of a request whose first decision appended nothing
is decided again (it appends nothing again unless the state moved meanwhile). The kernel is safe to call
concurrently for one aggregate (the append decides), though the command dispatcher
runs one aggregate's commands in order.

Not guaranteed: publication is after the append, so a crash between the two leaves
events in the store that the buses never carried; the outcome is PROCESSED either way
(a failed publication is logged and named in the outcome's ``publish_failures``, the
history stands). With an ``outbox`` (:class:`~wow_core.modeling.outbox.OutboxPublisher`)
the stream's distributed copies are written in the append's transaction and a relay
publishes them; only the local hand-off follows the append (see
:mod:`wow_core.modeling.outbox`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from wow_core.command.stages import CommandStage, ErrorCodes, Violation, WaitSignal
from wow_core.command.validation import validate_body
from wow_core.eventsourcing.store import (
    DuplicateRequestIdError,
    EventStore,
    EventVersionConflictError,
    SnapshotRepository,
)
from wow_core.messaging.contract import DomainEventBus, StateEventBus
from wow_core.model import (
    AggregateId,
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    Header,
    StateEvent,
    now_ms,
)
from wow_core.modeling.aggregate import AggregateMetadata, CommandFunction, DomainError, Emit
from wow_core.modeling.outbox import OutboxedPublication, OutboxPublisher
from wow_core.modeling.registry import AggregateRegistry

log = logging.getLogger(__name__)

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(slots=True)
class CommandOutcome:
    """How the kernel decided one command (a value: treat it as immutable).

    ``stream`` is the appended stream (``None`` for a rejection, a duplicate or a
    command that returned no events). For a duplicate, ``aggregate_id`` and ``version``
    are those of the original append. ``conflicts`` counts the version conflicts met on
    the way (each one reloaded and decided again); ``publish_failures`` names the buses
    (``event``, ``state``) whose publication of the appended stream failed.
    """

    command: CommandMessage[Any]
    aggregate_id: AggregateId
    version: int
    stream: DomainEventStream | None = None
    state: Any = None
    result: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    error_code: str = ErrorCodes.SUCCEEDED
    error_msg: str = ""
    errors: tuple[Violation, ...] = ()
    duplicate: bool = False
    attempts: int = 1
    conflicts: int = 0
    publish_failures: tuple[str, ...] = ()
    publication: OutboxedPublication | None = field(default=None, repr=False, compare=False)
    """What an outbox append left to do locally (``None`` without an outbox)."""

    @property
    def succeeded(self) -> bool:
        return not self.error_code

    def signal(self) -> WaitSignal:
        """The ``PROCESSED`` wait signal of this outcome.

        It is final (no later stage follows) unless a stream was appended.
        """
        return WaitSignal(
            command_id=self.command.id,
            stage=CommandStage.PROCESSED,
            aggregate_id=self.aggregate_id,
            aggregate_version=self.version,
            result=self.result,
            error_code=self.error_code,
            error_msg=self.error_msg,
            errors=self.errors,
            duplicate=self.duplicate,
            final=self.stream is None,
        )


class SourcingError(RuntimeError):
    """A sourcing function raised, or returned no state."""


class _Rejected(Exception):
    def __init__(self, code: str, message: str, errors: tuple[Violation, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.errors = errors


class StateCache:
    """The latest sourced states the kernel saw, least recently used evicted first.

    A hit is only a starting point: the kernel still loads the events after its
    version, and the append's version check catches anything newer.
    """

    __slots__ = ("_entries", "capacity")

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[AggregateId, tuple[int, Any]] = OrderedDict()

    def get(self, aggregate_id: AggregateId) -> tuple[int, Any] | None:
        entry = self._entries.get(aggregate_id)
        if entry is not None:
            self._entries.move_to_end(aggregate_id)
        return entry

    def put(self, aggregate_id: AggregateId, version: int, state: Any) -> None:
        if self.capacity <= 0:
            return
        held = self._entries.get(aggregate_id)
        if held is not None and held[0] >= version:
            return
        self._entries[aggregate_id] = (version, state)
        self._entries.move_to_end(aggregate_id)
        if len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def evict(self, aggregate_id: AggregateId) -> None:
        self._entries.pop(aggregate_id, None)

    def __len__(self) -> int:
        return len(self._entries)


class CommandKernel:
    """Decides commands for the aggregates of an :class:`AggregateRegistry`."""

    def __init__(
        self,
        registry: AggregateRegistry,
        event_store: EventStore,
        snapshot_repository: SnapshotRepository | None = None,
        *,
        domain_event_bus: DomainEventBus | None = None,
        state_event_bus: StateEventBus | None = None,
        max_conflict_retries: int = 3,
        state_cache: StateCache | None = None,
        validators: Iterable[Any] = (validate_body,),
        outbox: OutboxPublisher | None = None,
    ) -> None:
        if max_conflict_retries < 0:
            raise ValueError("max_conflict_retries must be >= 0")
        self.registry = registry
        self.event_store = event_store
        self.snapshot_repository = snapshot_repository
        self.domain_event_bus = domain_event_bus
        self.state_event_bus = state_event_bus
        self.max_conflict_retries = max_conflict_retries
        self.state_cache = StateCache() if state_cache is None else state_cache
        self._validators = tuple(validators)
        self.outbox = outbox

    async def process(self, command: CommandMessage[Any]) -> CommandOutcome:
        """Decide ``command``; business outcomes are returned, store failures raise."""
        metadata = self.registry.get(command.aggregate_id.named_aggregate)
        if metadata is None:
            return self._rejected(
                command,
                ErrorCodes.COMMAND_UNHANDLED,
                f"this service hosts no aggregate {command.aggregate_id.named_aggregate}",
            )
        function = metadata.commands.get(type(command.body))
        if function is None:
            return self._rejected(
                command,
                ErrorCodes.COMMAND_UNHANDLED,
                f"aggregate {metadata.named_aggregate} has no command function for "
                f"{type(command.body).__qualname__}",
            )
        violations: tuple[Violation, ...] = ()
        for validator in self._validators:
            if found := validator(command.body):
                violations = (*violations, *found)
        if violations:
            return await self._rejected_or_duplicate(
                command,
                _Rejected(ErrorCodes.COMMAND_INVALID, "; ".join(str(v) for v in violations), violations),
                1,
            )
        attempts = 0
        conflicts = 0
        while True:
            attempts += 1
            try:
                outcome = await self._attempt(command, metadata, function, attempts)
            except _Rejected as rejection:
                outcome = await self._rejected_or_duplicate(command, rejection, attempts)
                break
            except EventVersionConflictError as conflict:
                self.state_cache.evict(command.aggregate_id)
                conflicts += 1
                if attempts > self.max_conflict_retries:
                    outcome = await self._rejected_or_duplicate(
                        command,
                        _Rejected(
                            ErrorCodes.EVENT_VERSION_CONFLICT,
                            f"{conflict}; gave up after {attempts} attempts",
                        ),
                        attempts,
                    )
                    break
                continue
            except DuplicateRequestIdError as duplicate:
                outcome = self._duplicate(command, duplicate.aggregate_id, duplicate.version, attempts)
                break
            if outcome.stream is None:
                # Nothing was appended, so the store's request-id check never ran: a repeated
                # request is a duplicate whatever this decision returned.
                outcome = await self._unless_duplicate(outcome)
                break
            if outcome.publication is not None:
                failures = await self._publish_outboxed(outcome.stream, outcome.publication)
            else:
                failures = await self._publish(outcome.stream, outcome.state)
            if failures:
                outcome = replace(outcome, publish_failures=failures)
            break
        if conflicts:
            outcome = replace(outcome, conflicts=conflicts)
        return outcome

    def dropped(self, command: CommandMessage[Any]) -> None:
        """The dispatcher acknowledged the Void ``command`` without deciding it (spec 000,
        Void): nothing to decide, nothing written. A named hook for middleware."""

    async def load_state(
        self, metadata: AggregateMetadata[Any], aggregate_id: AggregateId
    ) -> tuple[int, Any]:
        """The aggregate's (version, state): latest snapshot, then later events."""
        cached = self.state_cache.get(aggregate_id)
        if cached is None and self.snapshot_repository is not None:
            snapshot = await self.snapshot_repository.load(aggregate_id)
            if snapshot is not None:
                cached = (snapshot.version, snapshot.state)
        version, state = cached if cached is not None else (0, metadata.initial_state(aggregate_id))
        for stream in await self.event_store.load(aggregate_id, version + 1):
            state = self._source(metadata, state, stream)
            version = stream.version
        return version, state

    def _source(self, metadata: AggregateMetadata[Any], state: Any, stream: DomainEventStream) -> Any:
        for event in stream.events:
            sourcing = metadata.sourcing.get(type(event.body))
            if sourcing is not None:
                try:
                    state = sourcing(state, event.body)
                except Exception as error:
                    raise SourcingError(
                        f"sourcing {type(event.body).__qualname__} of {stream.aggregate_id} "
                        f"v{stream.version} failed: {type(error).__name__}: {error}"
                    ) from error
                if state is None:
                    raise SourcingError(
                        f"the sourcing function of {type(event.body).__qualname__} returned None; "
                        "sourcing functions return the new state"
                    )
        return state

    async def _attempt(
        self,
        command: CommandMessage[Any],
        metadata: AggregateMetadata[Any],
        function: CommandFunction,
        attempts: int,
    ) -> CommandOutcome:
        aggregate_id = command.aggregate_id
        try:
            version, state = await self.load_state(metadata, aggregate_id)
        except SourcingError as error:
            # A bug in the aggregate, not an outage: redelivering would fail the same way.
            log.error("%s", error)
            raise _Rejected(ErrorCodes.PROCESSING_ERROR, str(error)) from None
        if version == 0 and not (function.allow_create or command.allow_create):
            raise _Rejected(ErrorCodes.AGGREGATE_NOT_FOUND, f"aggregate {aggregate_id} does not exist")
        if version > 0 and function.create:
            raise _Rejected(ErrorCodes.DUPLICATE_AGGREGATE_ID, f"aggregate {aggregate_id} already exists")
        if command.aggregate_version is not None and command.aggregate_version != version:
            raise _Rejected(
                ErrorCodes.COMMAND_EXPECT_VERSION_CONFLICT,
                f"{command.name} expects {aggregate_id} at version {command.aggregate_version}, "
                f"it is at {version}",
            )
        try:
            if function.takes_command:
                returned = function.function(state, command.body, command)
            else:
                returned = function.function(state, command.body)
            if function.is_async:
                returned = await returned
        except DomainError as error:
            raise _Rejected(error.code, error.message) from None
        except Exception as error:
            log.exception("command function %s of %s failed", function.name, metadata.named_aggregate)
            raise _Rejected(ErrorCodes.PROCESSING_ERROR, f"{type(error).__name__}: {error}") from None
        result: Mapping[str, Any] = _EMPTY
        if isinstance(returned, Emit):
            bodies: tuple[object, ...] = tuple(returned.events)
            result = returned.result
        elif returned is None:
            bodies = ()
        elif isinstance(returned, list | tuple):
            bodies = tuple(returned)
        else:
            bodies = (returned,)
        if not bodies:
            return CommandOutcome(command, aggregate_id, version, None, state, result, attempts=attempts)
        for body in bodies:
            if type(body) not in function.event_types:
                # Only declared types are registered for the wire: an undeclared one would be
                # appended and then fail to reach any transport, so it is refused here.
                message = (
                    f"{metadata.aggregate_type.__qualname__}.{function.name} returned "
                    f"{type(body).__qualname__}, which is not one of the event types it declares "
                    f"({', '.join(sorted(t.__qualname__ for t in function.event_types)) or 'none'}); "
                    "name it in its return annotation or in @on_command(events=[...])"
                )
                log.error("%s", message)
                raise _Rejected(ErrorCodes.PROCESSING_ERROR, message)
        stream = self._stream(command, version + 1, bodies)
        try:
            new_state = self._source(metadata, state, stream)
        except SourcingError as error:
            log.exception("%s", error)
            raise _Rejected(ErrorCodes.PROCESSING_ERROR, str(error)) from None
        publication = None
        if self.outbox is not None:
            publication = await self.outbox.append(stream, new_state)
        else:
            await self.event_store.append(stream)
        self.state_cache.put(aggregate_id, stream.version, new_state)
        return CommandOutcome(
            command,
            aggregate_id,
            stream.version,
            stream,
            new_state,
            result,
            attempts=attempts,
            publication=publication,
        )

    @staticmethod
    def _stream(command: CommandMessage[Any], version: int, bodies: tuple[object, ...]) -> DomainEventStream:
        aggregate_id = command.aggregate_id
        command_id = command.id
        created = now_ms()  # one clock reading for the stream and its events
        last = len(bodies)
        if last == 1:
            body = bodies[0]
            events: tuple[DomainEvent[Any], ...] = (
                DomainEvent(
                    aggregate_id,
                    body,
                    type(body).__name__,
                    version,
                    1,
                    True,
                    command_id=command_id,
                    create_time=created,
                ),
            )
        else:
            events = tuple(
                DomainEvent(
                    aggregate_id,
                    body,
                    type(body).__name__,
                    version,
                    index,
                    index == last,
                    command_id=command_id,
                    create_time=created,
                )
                for index, body in enumerate(bodies, start=1)
            )
        header = command.header.copy_without(Header.LOCAL_FIRST)
        return DomainEventStream(
            aggregate_id=aggregate_id,
            version=version,
            events=events,
            command_id=command_id,
            request_id=command.request_id,
            header=header,
            create_time=created,
        )

    async def _publish(self, stream: DomainEventStream, state: Any) -> tuple[str, ...]:
        """Publish the stream, then the state; the buses that failed (``event``, ``state``)."""
        failures: tuple[str, ...] = ()
        if self.domain_event_bus is not None:
            try:
                await self.domain_event_bus.send(stream)
            except Exception:
                failures = ("event",)
                log.exception(
                    "publishing %s v%d failed; it is in the store", stream.aggregate_id, stream.version
                )
        if self.state_event_bus is not None:
            try:
                await self.state_event_bus.send(
                    StateEvent(stream=stream, state=state, create_time=stream.create_time)
                )
            except Exception:
                failures = (*failures, "state")
                log.exception("publishing the state of %s v%d failed", stream.aggregate_id, stream.version)
        return failures

    async def _publish_outboxed(
        self, stream: DomainEventStream, publication: OutboxedPublication
    ) -> tuple[str, ...]:
        """The local steps after an outbox append (the relay sends the distributed copies)."""
        failures: tuple[str, ...] = ()
        for name, step in publication.local:
            try:
                await step()
            except Exception:
                failures = (*failures, name)
                log.exception(
                    "publishing %s v%d locally on the %s bus failed; it is in the store and the outbox",
                    stream.aggregate_id,
                    stream.version,
                    name,
                )
        return failures

    def _rejected(
        self, command: CommandMessage[Any], code: str, message: str, errors: tuple[Violation, ...] = ()
    ) -> CommandOutcome:
        return CommandOutcome(
            command, command.aggregate_id, 0, error_code=code, error_msg=message, errors=errors
        )

    async def _rejected_or_duplicate(
        self, command: CommandMessage[Any], rejection: _Rejected, attempts: int
    ) -> CommandOutcome:
        original = await self.event_store.find_request(
            command.aggregate_id.named_aggregate, command.request_id
        )
        if original is not None:
            return self._duplicate(command, original.aggregate_id, original.version, attempts)
        outcome = self._rejected(command, rejection.code, rejection.message, rejection.errors)
        return CommandOutcome(
            command,
            outcome.aggregate_id,
            outcome.version,
            error_code=outcome.error_code,
            error_msg=outcome.error_msg,
            errors=outcome.errors,
            attempts=attempts,
        )

    async def _unless_duplicate(self, outcome: CommandOutcome) -> CommandOutcome:
        command = outcome.command
        original = await self.event_store.find_request(
            command.aggregate_id.named_aggregate, command.request_id
        )
        if original is None:
            return outcome
        return self._duplicate(command, original.aggregate_id, original.version, outcome.attempts)

    def _duplicate(
        self, command: CommandMessage[Any], aggregate_id: AggregateId, version: int, attempts: int
    ) -> CommandOutcome:
        return CommandOutcome(command, aggregate_id, version, duplicate=True, attempts=attempts)
