from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from tests.accounts import (
    Account,
    AccountState,
    Audit,
    Audited,
    Deposit,
    Deposited,
    Explode,
    Noted,
    Open,
    Opened,
    Rename,
    Renamed,
    Touch,
    Withdraw,
)
from wow_core.command import CommandStage, ErrorCodes
from wow_core.eventsourcing import (
    EventVersionConflictError,
    InMemoryEventStore,
    InMemorySnapshotRepository,
    Snapshot,
)
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, DomainEventStream, NamedAggregate
from wow_core.modeling import AggregateRegistry, CommandKernel, StateCache


class RecordingBus:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, message: Any) -> None:
        self.sent.append(message)


@pytest.fixture
def registry() -> AggregateRegistry:
    return AggregateRegistry([Account])


@pytest.fixture
def store() -> InMemoryEventStore:
    return InMemoryEventStore()


@pytest.fixture
def events() -> RecordingBus:
    return RecordingBus()


@pytest.fixture
def states() -> RecordingBus:
    return RecordingBus()


@pytest.fixture
def kernel(
    registry: AggregateRegistry, store: InMemoryEventStore, events: RecordingBus, states: RecordingBus
) -> CommandKernel:
    return CommandKernel(
        registry,
        store,
        InMemorySnapshotRepository(),
        domain_event_bus=events,  # type: ignore[arg-type]
        state_event_bus=states,  # type: ignore[arg-type]
    )


async def opened(kernel: CommandKernel, registry: AggregateRegistry, initial: int = 10) -> AggregateId:
    outcome = await kernel.process(registry.command(Open("ada", initial)))
    assert outcome.succeeded
    return outcome.aggregate_id


async def test_a_creation_appends_and_publishes_stream_then_state(
    kernel: CommandKernel, registry: AggregateRegistry, store: InMemoryEventStore, events: Any, states: Any
) -> None:
    command = registry.command(Open("ada", 10), "acc-1")
    outcome = await kernel.process(command)
    assert outcome.succeeded
    assert (outcome.aggregate_id.id, outcome.version) == ("acc-1", 1)
    assert outcome.state == AccountState("ada", 10, ("opened",))
    [stream] = await store.load(outcome.aggregate_id)
    assert stream.command_id == command.id
    assert stream.request_id == command.request_id
    assert [e.body for e in stream.events] == [Opened("ada", 10)]
    assert events.sent == [stream]
    [state_event] = states.sent
    assert state_event.stream is stream
    assert state_event.state == outcome.state
    signal = outcome.signal()
    assert (signal.stage, signal.aggregate_version, signal.final) == (CommandStage.PROCESSED, 1, False)


async def test_commands_source_state_from_the_events(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(registry.command(Deposit(5), aggregate_id.id))
    assert dict(outcome.result) == {"balance": 15}
    outcome = await kernel.process(registry.command(Withdraw(12), aggregate_id.id))
    assert outcome.succeeded
    assert (outcome.version, outcome.state.balance) == (3, 3)


async def test_state_is_sourced_from_the_store_without_a_cache(
    registry: AggregateRegistry, store: InMemoryEventStore
) -> None:
    writer = CommandKernel(registry, store)
    aggregate_id = await opened(writer, registry)
    await writer.process(registry.command(Deposit(5), aggregate_id.id))
    reader = CommandKernel(registry, store, state_cache=StateCache(0))
    version, state = await reader.load_state(registry.get(aggregate_id.named_aggregate), aggregate_id)  # type: ignore[arg-type]
    assert (version, state.balance, state.history) == (2, 15, ("opened", "deposited"))


async def test_state_loads_from_the_snapshot_then_later_events(
    registry: AggregateRegistry, store: InMemoryEventStore
) -> None:
    snapshots = InMemorySnapshotRepository()
    writer = CommandKernel(registry, store)
    aggregate_id = await opened(writer, registry)
    await writer.process(registry.command(Deposit(5), aggregate_id.id))
    # A snapshot at version 1 that says something the events don't: proves it is used.
    await snapshots.save(Snapshot(aggregate_id, 1, AccountState("snap", 100, ("snapshot",))))
    reader = CommandKernel(registry, store, snapshots, state_cache=StateCache(0))
    version, state = await reader.load_state(registry.get(aggregate_id.named_aggregate), aggregate_id)  # type: ignore[arg-type]
    assert (version, state.owner, state.balance, state.history) == (2, "snap", 105, ("snapshot", "deposited"))


async def test_a_domain_error_rejects_with_code_and_message_and_writes_nothing(
    kernel: CommandKernel, registry: AggregateRegistry, store: InMemoryEventStore, events: Any
) -> None:
    aggregate_id = await opened(kernel, registry, 10)
    published = len(events.sent)
    outcome = await kernel.process(registry.command(Withdraw(50), aggregate_id.id))
    assert (outcome.error_code, outcome.error_msg) == ("INSUFFICIENT_FUNDS", "balance 10 is below 50")
    assert await store.last_version(aggregate_id) == 1
    assert len(events.sent) == published
    signal = outcome.signal()
    assert signal.final
    assert not signal.succeeded


async def test_an_invalid_body_is_refused_before_any_aggregate_decides(
    kernel: CommandKernel, registry: AggregateRegistry, store: InMemoryEventStore
) -> None:
    aggregate_id = await opened(kernel, registry)
    account = registry.get(aggregate_id.named_aggregate)
    assert account is not None
    calls: list[Any] = []
    original = account.commands[Withdraw]
    object.__setattr__(original, "function", lambda *a: calls.append(a))
    try:
        outcome = await kernel.process(registry.command(Withdraw(-3), aggregate_id.id))
    finally:
        object.__setattr__(original, "function", account.instance.withdraw)
    assert outcome.error_code == ErrorCodes.COMMAND_INVALID
    assert [v.path for v in outcome.errors] == ["amount"]
    assert "greater than 0" in outcome.error_msg
    assert calls == []
    assert await store.last_version(aggregate_id) == 1


async def test_an_unknown_aggregate_is_unhandled(kernel: CommandKernel) -> None:
    command = CommandMessage(
        aggregate_id=AggregateId(NamedAggregate("bank", "loan"), "l-1"), body=Deposit(1), name="Deposit"
    )
    outcome = await kernel.process(command)
    assert outcome.error_code == ErrorCodes.COMMAND_UNHANDLED
    assert "bank.loan" in outcome.error_msg


async def test_an_unknown_command_type_is_unhandled(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    @dataclass
    class Close:
        reason: str

    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(CommandMessage(aggregate_id=aggregate_id, body=Close("x"), name="Close"))
    assert outcome.error_code == ErrorCodes.COMMAND_UNHANDLED
    assert "Close" in outcome.error_msg


async def test_a_command_to_a_missing_aggregate_is_not_found(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    outcome = await kernel.process(registry.command(Deposit(1), "nobody"))
    assert outcome.error_code == ErrorCodes.AGGREGATE_NOT_FOUND


async def test_a_creation_of_an_existing_aggregate_is_refused(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(registry.command(Open("bob"), aggregate_id.id))
    assert outcome.error_code == ErrorCodes.DUPLICATE_AGGREGATE_ID


async def test_the_expected_version_is_checked(kernel: CommandKernel, registry: AggregateRegistry) -> None:
    aggregate_id = await opened(kernel, registry)
    stale = await kernel.process(registry.command(Deposit(1), aggregate_id.id, aggregate_version=0))
    assert stale.error_code == ErrorCodes.COMMAND_EXPECT_VERSION_CONFLICT
    fresh = await kernel.process(registry.command(Deposit(1), aggregate_id.id, aggregate_version=1))
    assert fresh.succeeded


async def test_a_command_returning_no_event_changes_nothing(
    kernel: CommandKernel, registry: AggregateRegistry, store: InMemoryEventStore
) -> None:
    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(registry.command(Touch(), aggregate_id.id))
    assert outcome.succeeded
    assert (outcome.version, outcome.stream) == (1, None)
    assert outcome.signal().final
    assert await store.last_version(aggregate_id) == 1


async def test_a_command_function_can_read_the_command(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(registry.command(Audit(), aggregate_id.id, header={"user": "eve"}))
    assert outcome.succeeded
    assert outcome.stream is not None
    assert outcome.stream.events[0].body.by == "eve"
    assert outcome.stream.header["user"] == "eve"


async def test_local_first_marks_do_not_leak_into_events(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    outcome = await kernel.process(
        registry.command(Open("ada"), header={"local_first": "true", "trace": "t"})
    )
    assert outcome.stream is not None
    assert dict(outcome.stream.header) == {"trace": "t"}


async def test_a_failing_command_function_is_a_processing_error(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(registry.command(Explode(), aggregate_id.id))
    assert outcome.error_code == ErrorCodes.PROCESSING_ERROR
    assert "bug in the aggregate" in outcome.error_msg


# -- request-id de-duplication -----------------------------------------------------------


async def test_the_same_request_twice_is_decided_once(
    kernel: CommandKernel, registry: AggregateRegistry, store: InMemoryEventStore, events: Any
) -> None:
    aggregate_id = await opened(kernel, registry, 10)
    first = await kernel.process(registry.command(Deposit(5), aggregate_id.id, request_id="req-1"))
    published = len(events.sent)
    second = await kernel.process(registry.command(Deposit(5), aggregate_id.id, request_id="req-1"))
    assert first.succeeded
    assert not first.duplicate
    assert second.duplicate
    assert second.succeeded
    assert (second.aggregate_id, second.version) == (aggregate_id, first.version)
    assert await store.last_version(aggregate_id) == 2
    assert len(events.sent) == published
    assert second.signal().final


async def test_a_creation_sent_twice_answers_with_the_original_aggregate(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    first = await kernel.process(registry.command(Open("ada"), request_id="req-open"))
    # A new aggregate id for the same request: the store names the original.
    second = await kernel.process(registry.command(Open("ada"), request_id="req-open"))
    assert second.duplicate
    assert (second.aggregate_id, second.version) == (first.aggregate_id, 1)
    # The same aggregate id: the creation rule refuses it, but the answer is the duplicate.
    third = await kernel.process(registry.command(Open("ada"), first.aggregate_id.id, request_id="req-open"))
    assert third.duplicate
    assert third.succeeded
    assert (third.aggregate_id, third.version) == (first.aggregate_id, 1)


async def test_a_repeated_request_whose_second_decision_appends_nothing_is_a_duplicate(
    kernel: CommandKernel, registry: AggregateRegistry, store: InMemoryEventStore, events: Any
) -> None:
    aggregate_id = await opened(kernel, registry)
    first = await kernel.process(registry.command(Rename("bob"), aggregate_id.id, request_id="req-rename"))
    published = len(events.sent)
    # Decided again on the renamed state, the rename appends nothing: still the duplicate it is.
    second = await kernel.process(registry.command(Rename("bob"), aggregate_id.id, request_id="req-rename"))
    assert (first.succeeded, first.duplicate, first.version) == (True, False, 2)
    assert (second.succeeded, second.duplicate) == (True, True)
    assert (second.aggregate_id, second.version) == (aggregate_id, 2)
    assert second.signal().duplicate
    assert second.signal().final
    assert await store.last_version(aggregate_id) == 2
    assert len(events.sent) == published


async def test_a_repeated_request_id_is_a_duplicate_whatever_the_second_command_is(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    aggregate_id = await opened(kernel, registry)
    first = await kernel.process(registry.command(Deposit(5), aggregate_id.id, request_id="req-7"))
    touched = await kernel.process(registry.command(Touch(), aggregate_id.id, request_id="req-7"))
    assert touched.duplicate
    assert (touched.aggregate_id, touched.version) == (aggregate_id, first.version)


async def test_a_command_appending_nothing_with_a_new_request_id_is_no_duplicate(
    kernel: CommandKernel, registry: AggregateRegistry
) -> None:
    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(registry.command(Touch(), aggregate_id.id, request_id="req-new"))
    assert (outcome.succeeded, outcome.duplicate, outcome.version) == (True, False, 1)


# -- optimistic concurrency --------------------------------------------------------------


class InterferingStore(InMemoryEventStore):
    """Appends a competing stream just before each of the first ``interfere`` appends."""

    def __init__(self, interfere: int) -> None:
        super().__init__()
        self.interfere = interfere
        self.conflicts = 0

    async def append(self, stream: DomainEventStream) -> None:
        if self.interfere > 0 and stream.version > 1:
            self.interfere -= 1
            rival = DomainEventStream(
                aggregate_id=stream.aggregate_id,
                version=stream.version,
                events=(_deposit_event(stream),),
                command_id="rival",
                request_id=f"rival-{self.interfere}",
            )
            await super().append(rival)
        try:
            await super().append(stream)
        except EventVersionConflictError:
            self.conflicts += 1
            raise


def _deposit_event(stream: DomainEventStream) -> Any:
    from wow_core.model import DomainEvent

    return DomainEvent(
        aggregate_id=stream.aggregate_id, body=Deposited(100), name="Deposited", version=stream.version
    )


async def test_a_version_conflict_is_retried_on_fresh_state(registry: AggregateRegistry) -> None:
    store = InterferingStore(interfere=2)
    kernel = CommandKernel(registry, store, max_conflict_retries=3)
    aggregate_id = await opened(kernel, registry, 10)
    outcome = await kernel.process(registry.command(Deposit(1), aggregate_id.id))
    assert outcome.succeeded, outcome.error_msg
    assert outcome.attempts == 3
    assert store.conflicts == 2
    # Decided on the state the rivals produced (10 + 100 + 100), not the stale one.
    assert (outcome.version, outcome.state.balance) == (4, 211)
    assert dict(outcome.result) == {"balance": 211}


async def test_conflicts_past_the_retry_bound_are_reported(registry: AggregateRegistry) -> None:
    store = InterferingStore(interfere=10)
    kernel = CommandKernel(registry, store, max_conflict_retries=2)
    aggregate_id = await opened(kernel, registry)
    outcome = await kernel.process(registry.command(Deposit(1), aggregate_id.id))
    assert outcome.error_code == ErrorCodes.EVENT_VERSION_CONFLICT
    assert "3 attempts" in outcome.error_msg
    assert store.conflicts == 3


async def test_concurrent_commands_to_one_aggregate_all_land(registry: AggregateRegistry) -> None:
    store = InMemoryEventStore()
    kernel = CommandKernel(registry, store, max_conflict_retries=50)
    aggregate_id = await opened(kernel, registry, 0)
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(kernel.process(registry.command(Deposit(1), aggregate_id.id)) for _ in range(20))),
        10,
    )
    assert all(o.succeeded for o in outcomes)
    assert sorted(o.version for o in outcomes) == list(range(2, 22))
    version, state = await kernel.load_state(registry.get(aggregate_id.named_aggregate), aggregate_id)  # type: ignore[arg-type]
    assert (version, state.balance) == (21, 20)


def test_the_registry_registers_every_body_type_for_the_wire(registry: AggregateRegistry) -> None:
    bodies = registry.register_body_types(BodyTypeRegistry())
    # Audited and Noted have no sourcing function: returned events are registered all the same.
    for cls in (Open, Deposit, Withdraw, Opened, Deposited, Audited, Noted, Renamed, AccountState):
        assert cls in bodies


async def test_an_event_type_the_function_does_not_declare_is_refused_and_nothing_written(
    kernel: CommandKernel, registry: AggregateRegistry, store: InMemoryEventStore, events: Any
) -> None:
    aggregate_id = await opened(kernel, registry)
    account = registry.get(aggregate_id.named_aggregate)
    assert account is not None
    published = len(events.sent)
    # The function is annotated -> Renamed | None; at run time it returns something else.
    account.instance.rename_to = Deposited
    try:
        outcome = await kernel.process(registry.command(Rename("eve"), aggregate_id.id))
    finally:
        del account.instance.rename_to
    assert outcome.error_code == ErrorCodes.PROCESSING_ERROR
    declared = "returned Deposited, which is not one of the event types it declares (Renamed)"
    assert declared in outcome.error_msg
    assert await store.last_version(aggregate_id) == 1
    assert len(events.sent) == published


async def test_a_broken_sourcing_function_is_a_processing_error_not_an_outage(
    registry: AggregateRegistry, store: InMemoryEventStore
) -> None:
    writer = CommandKernel(registry, store)
    aggregate_id = await opened(writer, registry)
    account = registry.get(aggregate_id.named_aggregate)
    assert account is not None
    sourcing = dict(account.sourcing)
    broken = dict(sourcing)
    broken[Opened] = lambda state, event: None
    object.__setattr__(account, "sourcing", broken)
    try:
        reader = CommandKernel(registry, store, state_cache=StateCache(0))
        outcome = await reader.process(registry.command(Deposit(1), aggregate_id.id))
    finally:
        object.__setattr__(account, "sourcing", sourcing)
    assert outcome.error_code == ErrorCodes.PROCESSING_ERROR
    assert "returned None" in outcome.error_msg
    assert await store.last_version(aggregate_id) == 1
