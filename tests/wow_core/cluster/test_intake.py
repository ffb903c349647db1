"""The cluster command intake (spec 002) on the in-memory transport: one test per sentence.

Each test sends intake envelopes on ``wow.bank.commands`` and reads the receipts on
``wow.orders.receipts``, as a caller in another context would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.accounts import ACCOUNT, Account, Deposit, Note, Open, Withdraw
from wow_core.cluster import (
    CommandBusyError,
    CommandIntake,
    CommandReceipt,
    CommandWire,
    FailureLedger,
    InFlightLimit,
    IntakeOptions,
    IntakeUnsupportedError,
    ParkedNotFoundError,
    ReceiptDeduplicator,
    ReplyTo,
    commands_topic,
    encode_command,
    receipts_topic,
)
from wow_core.command import CommandStage, ErrorCodes, WaitContext, WaitCoordinator
from wow_core.command.stages import WaitPlan
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.metrics import InMemoryMetrics
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, NamedAggregate, now_ms
from wow_core.modeling import AggregateRegistry, CommandKernel, aggregate, on_command, on_sourcing
from wow_core.testing import eventually
from wow_core.transport import InMemoryBroker, InMemoryTransport, TransportMessage, set_revocation_listener

TOPIC = commands_topic("bank")
RECEIPTS = receipts_topic("orders")
FAST = IntakeOptions(retries=2, retry_backoff=0.01, max_retry_backoff=0.02, busy_backoff=0.005)
COMMITTED = ReplyTo("orders", committed=True)
WAIT = 10.0  # seconds: generous bound on any single expected event under load


class FlakyStore(InMemoryEventStore):
    """An event store that is down while ``down`` is set (its appends raise)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.failed_appends = 0

    async def append(self, stream: Any) -> None:
        if self.down:
            self.failed_appends += 1
            raise ConnectionError("event store is down")
        await super().append(stream)


@dataclass(frozen=True)
class Hold:
    """A command that waits for its test to release it (observes parallelism)."""

    tag: str


@dataclass(frozen=True)
class Held:
    tag: str


@dataclass(frozen=True)
class GateState:
    tags: tuple[str, ...] = ()


class Gate:
    running = 0
    peak = 0
    release: asyncio.Event | None = None
    entered: asyncio.Queue[str] | None = None


@aggregate("bank", "gate", state=GateState)
class GateAggregate:
    @on_command(allow_create=True)
    async def hold(self, state: GateState, body: Hold) -> Held:
        Gate.running += 1
        Gate.peak = max(Gate.peak, Gate.running)
        assert Gate.entered is not None
        assert Gate.release is not None
        Gate.entered.put_nowait(body.tag)
        try:
            await Gate.release.wait()
        finally:
            Gate.running -= 1
        return Held(body.tag)

    @on_sourcing
    def held(self, state: GateState, event: Held) -> GateState:
        return GateState((*state.tags, event.tag))


class Node:
    """One intake over a shared in-memory broker, with a receipts reader."""

    def __init__(
        self,
        broker: InMemoryBroker,
        store: InMemoryEventStore,
        *,
        options: IntakeOptions = FAST,
        limit: InFlightLimit | None = None,
        kernel_type: type[CommandKernel] = CommandKernel,
    ) -> None:
        self.transport = InMemoryTransport(broker=broker)
        self.aggregates = AggregateRegistry([Account, GateAggregate])
        self.bodies = self.aggregates.register_body_types(BodyTypeRegistry())
        self.store = store
        self.kernel = kernel_type(self.aggregates, store)
        self.coordinator = WaitCoordinator()
        self.ledger = FailureLedger()
        self.intake = CommandIntake(
            "bank",
            self.transport,
            self.kernel,
            self.coordinator,
            self.bodies,
            limit=limit or InFlightLimit(64),
            ledger=self.ledger,
            options=options,
        )


@pytest.fixture
def broker() -> InMemoryBroker:
    return InMemoryBroker(partitions=4)


@pytest.fixture
def store() -> FlakyStore:
    return FlakyStore()


@pytest.fixture
async def receipts(broker: InMemoryBroker) -> AsyncIterator[Receipts]:
    reader = Receipts(InMemoryTransport(broker=broker))
    yield reader
    await reader.close()


class Receipts:
    """The caller's side: the receipts topic of ``orders``, read in the group ``orders``."""

    def __init__(self, transport: InMemoryTransport) -> None:
        self.transport = transport
        self.receiver = transport.open("orders", [RECEIPTS])
        self.receiver.open_processing()
        self.all: list[CommandReceipt] = []

    async def next(self) -> CommandReceipt:
        record = await asyncio.wait_for(anext(aiter(self.receiver)), WAIT)
        await record.ack()
        receipt = CommandReceipt.decode(record.payload)
        self.all.append(receipt)
        return receipt

    async def take(self, count: int) -> list[CommandReceipt]:
        return [await self.next() for _ in range(count)]

    def pending(self) -> int:
        return self.transport.broker.backlog("orders", RECEIPTS)

    async def close(self) -> None:
        await self.transport.close()


@pytest.fixture
async def node(broker: InMemoryBroker, store: FlakyStore) -> AsyncIterator[Node]:
    started = Node(broker, store)
    await started.intake.start()
    yield started
    await started.intake.stop(5)
    await started.transport.close()


def account(name: str) -> AggregateId:
    return AggregateId(ACCOUNT, name)


def command(aggregate_id: AggregateId, body: object, **fields: Any) -> CommandMessage[Any]:
    return CommandMessage(aggregate_id, body, type(body).__name__, **fields)


async def send(
    node: Node,
    message: CommandMessage[Any],
    *,
    reply_to: ReplyTo | None = COMMITTED,
    wait: WaitContext | None = None,
    due_at: int | None = None,
    assigned_id: bool = False,
) -> None:
    payload = encode_command(CommandWire(message, reply_to, wait, due_at, assigned_id), node.bodies)
    key = message.request_id if assigned_id else message.aggregate_id.id
    await node.transport.send(TransportMessage(TOPIC, key, payload, now_ms()))


async def send_raw(node: Node, key: str, payload: str) -> None:
    await node.transport.send(TransportMessage(TOPIC, key, payload, now_ms()))


# -- ownership ----------------------------------------------------------------------------


async def test_a_transport_without_partition_ownership_is_refused_at_start(store: FlakyStore) -> None:
    class SharedStreams(InMemoryTransport):
        name = "redis-like"
        owns_partitions = False

    node = Node(InMemoryBroker(), store)
    node.intake.transport = SharedStreams(broker=InMemoryBroker())
    with pytest.raises(IntakeUnsupportedError, match=r"partition to one member.*'redis-like'"):
        await node.intake.start()


@pytest.mark.parametrize("plugin", ["redis", "nats"])
async def test_redis_and_nats_are_refused_at_start_naming_why(store: FlakyStore, plugin: str) -> None:
    if plugin == "redis":
        from wow_redis import RedisStreamTransport

        transport: Any = RedisStreamTransport()
    else:
        from wow_nats.transport import NatsTransport

        transport = NatsTransport()
    node = Node(InMemoryBroker(), store)
    node.intake.transport = transport
    with pytest.raises(IntakeUnsupportedError, match=rf"'{plugin}' does not: its consumers share a stream"):
        await node.intake.prepare()  # refused before any connection is made


async def test_the_members_of_the_subscription_split_the_partitions_and_each_command_runs_once(
    broker: InMemoryBroker, store: FlakyStore, receipts: Receipts
) -> None:
    first, second = Node(broker, store), Node(broker, store)
    await first.intake.start()
    await second.intake.start()
    try:
        ids = [account(f"own-{n}") for n in range(24)]
        for aggregate_id in ids:
            await send(first, command(aggregate_id, Open("x")))
        got = await receipts.take(len(ids))
        assert sorted(r.aggregate_id.id for r in got if r.aggregate_id) == sorted(a.id for a in ids)
        assert all(r.committed and r.version == 1 for r in got)
        # both members executed some, none executed any twice
        assert first.intake.committed > 0
        assert second.intake.committed > 0
        assert first.intake.committed + second.intake.committed == len(ids)
        # the partition of a command's position is the one its key hashes to on the event topics too
        for r in got:
            partition = int(r.position.split(":")[0])
            assert r.aggregate_id is not None
            owner = broker.view(first.intake.name, TOPIC).partitions[partition].owner
            assert owner in (first.intake._receiver, second.intake._receiver)
    finally:
        for member in (first, second):
            await member.intake.stop(5)
            await member.transport.close()


# -- lanes and the in-flight bound --------------------------------------------------------


async def test_one_aggregates_commands_run_in_order(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    alice = account("alice")
    await send(node, command(alice, Open("alice")))
    for amount in range(1, 21):
        await send(node, command(alice, Deposit(amount)))
    got = await receipts.take(21)
    assert [r.version for r in got] == list(range(1, 22))
    assert [r.result.get("balance") for r in got[1:]] == [sum(range(1, n + 1)) for n in range(1, 21)]


@pytest.fixture
def gate() -> Gate:
    Gate.running = Gate.peak = 0
    Gate.release = asyncio.Event()
    Gate.entered = asyncio.Queue()
    return Gate()


async def test_different_aggregates_run_in_parallel_up_to_the_intakes_bound(
    broker: InMemoryBroker, store: FlakyStore, receipts: Receipts, gate: Gate
) -> None:
    limit = InFlightLimit(6)  # intakes: half of it
    assert limit.intakes == 3
    node = Node(broker, store, limit=limit)
    await node.intake.start()
    try:
        for n in range(8):
            await send(node, command(AggregateId(NamedAggregate("bank", "gate"), f"g{n}"), Hold(f"t{n}")))
        entered = {await asyncio.wait_for(gate.entered.get(), WAIT) for _ in range(3)}  # type: ignore[union-attr]
        assert len(entered) == 3
        assert Gate.running == 3
        assert node.intake.in_flight == 8
        assert gate.entered.empty()  # type: ignore[union-attr]
        assert Gate.release is not None
        Gate.release.set()
        got = await receipts.take(8)
        assert all(r.committed for r in got)
        assert Gate.peak == 3
    finally:
        await node.intake.stop(5)
        await node.transport.close()


def test_the_in_flight_limit_of_the_intakes_is_half_the_nodes_unless_set() -> None:
    assert InFlightLimit(1024).intakes == 512
    assert InFlightLimit(1).intakes == 1
    assert InFlightLimit(10, 7).intakes == 7
    with pytest.raises(ValueError, match="between 1 and the node's bound 10"):
        InFlightLimit(10, 11)
    with pytest.raises(ValueError, match=">= 1"):
        InFlightLimit(0)


# -- execution: forward, creations, dedup -------------------------------------------------


async def test_the_envelopes_wait_context_is_forwarded_and_the_waiter_is_signalled(
    node: Node, receipts: Receipts
) -> None:
    opened = command(account("waited"), Open("w"))
    waiter = node.coordinator.register(opened, WaitPlan(CommandStage.PROCESSED))
    context = WaitContext(node.coordinator.endpoint, WaitPlan(CommandStage.PROCESSED))
    await send(node, opened, wait=context)
    result = await asyncio.wait_for(waiter.future, WAIT)
    assert result.stage is CommandStage.PROCESSED
    assert result.succeeded
    assert result.aggregate_version == 1
    receipt = await receipts.next()
    assert receipt.wait == context  # carried past the commit, for a saga's on_committed


async def test_a_wait_of_another_node_goes_out_through_the_remote_signals(
    node: Node, receipts: Receipts
) -> None:
    sent: list[tuple[str, Any]] = []

    class Remote:
        def send(self, endpoint: str, signal: Any) -> None:
            sent.append((endpoint, signal))

    node.coordinator.remote = Remote()  # type: ignore[assignment]
    elsewhere = WaitContext("redis:wow.wait.other-node", WaitPlan(CommandStage.PROCESSED))
    message = command(account("remote"), Open("r"))
    await send(node, message, wait=elsewhere)
    await receipts.next()
    assert [(e, s.command_id, s.stage) for e, s in sent] == [
        ("redis:wow.wait.other-node", message.id, CommandStage.PROCESSED)
    ]
    assert node.coordinator.forwarded == 1


async def test_a_creation_that_names_no_aggregate_is_given_its_id_first_and_the_same_id_again(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    creation = command(account("placeholder"), Open("new"), is_create=True)
    await send(node, creation, assigned_id=True)
    await send(node, creation, assigned_id=True)  # delivered twice
    first, second = await receipts.take(2)
    assert first.committed
    assert not first.duplicate
    assert first.version == 1
    assert first.aggregate_id is not None
    assert first.aggregate_id.id != "placeholder"
    assert second.duplicate
    assert second.aggregate_id == first.aggregate_id
    assert second.version == 1
    assert len(await store.load(first.aggregate_id, 1)) == 1


async def test_a_command_delivered_twice_is_not_decided_again(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    bob = account("bob")
    await send(node, command(bob, Open("bob")))
    deposit = command(bob, Deposit(5))
    await send(node, deposit)
    again = command(bob, Deposit(5), request_id=deposit.request_id)  # a saga that retried
    await send(node, again)
    _opened, deposited, duplicate = await receipts.take(3)
    assert (deposited.version, deposited.duplicate) == (2, False)
    assert (duplicate.version, duplicate.duplicate, duplicate.command_id) == (2, True, again.id)
    assert [s.version for s in await store.load(bob, 1)] == [1, 2]


# -- settling and receipts -----------------------------------------------------------------


async def test_a_commit_is_answered_only_when_the_command_asks_for_its_receipt(
    node: Node, receipts: Receipts
) -> None:
    quiet = command(account("quiet"), Open("q"))
    await send(node, quiet, reply_to=ReplyTo("orders", committed=False))
    loud = command(account("loud"), Open("l"))
    await send(node, loud)
    receipt = await receipts.next()
    assert receipt.command_id == loud.id
    assert json.loads(receipt.encode()).keys() >= {"aggregate", "version", "result"}
    assert "state" not in json.loads(receipt.encode())
    assert node.intake.committed == 2
    assert receipts.pending() == 0


async def test_a_rejection_is_answered_written_nowhere_and_never_parked(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    poor = account("poor")
    await send(node, command(poor, Open("p")), reply_to=None)
    refused = command(poor, Withdraw(10))
    await send(node, refused, reply_to=ReplyTo("orders"))
    receipt = await receipts.next()
    assert not receipt.committed
    assert receipt.error_code == "INSUFFICIENT_FUNDS"
    assert receipt.command_id == refused.id
    assert [s.version for s in await store.load(poor, 1)] == [1]
    assert node.intake.parked() == []
    assert node.intake.retried == 0


async def test_an_unknown_aggregate_type_or_command_type_is_unhandled_with_its_receipt(
    node: Node, receipts: Receipts
) -> None:
    stranger = AggregateId(NamedAggregate("bank", "vault"), "v1")
    await send(node, command(stranger, Deposit(1)), reply_to=ReplyTo("orders"))
    wire = json.loads(
        encode_command(CommandWire(command(account("a1"), Deposit(1)), ReplyTo("orders")), node.bodies)
    )
    wire["command"]["body_type"] = "tests.NotYetKnown"
    await send_raw(node, "a1", json.dumps(wire))
    vault, unknown = await receipts.take(2)
    assert (vault.error_code, unknown.error_code) == (ErrorCodes.COMMAND_UNHANDLED,) * 2
    assert "vault" in vault.error_msg
    assert "NotYetKnown" in unknown.error_msg
    assert node.intake.parked() == []


async def test_an_invalid_body_is_rejected_listing_its_violations_before_any_aggregate_decides(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    carol = account("carol")
    await send(node, command(carol, Note("   ")), reply_to=ReplyTo("orders"))  # the validators' rule
    wire = json.loads(encode_command(CommandWire(command(carol, Deposit(1)), ReplyTo("orders")), node.bodies))
    wire["command"]["body"]["amount"] = -3  # the field's own constraint
    await send_raw(node, "carol", json.dumps(wire))
    blank, negative = await receipts.take(2)
    assert blank.error_code == negative.error_code == ErrorCodes.COMMAND_INVALID
    assert [str(v) for v in blank.errors] == ["text must not be blank"]
    assert negative.errors
    assert "amount" in negative.errors[0].message
    assert await store.load(carol, 1) == []


async def test_a_receipt_the_broker_does_not_acknowledge_holds_the_checkpoint_and_is_sent_again(
    broker: InMemoryBroker, store: FlakyStore, receipts: Receipts
) -> None:
    class Unacknowledged(InMemoryTransport):
        refusals = 2

        async def send(self, message: TransportMessage) -> None:
            if message.topic == RECEIPTS and self.refusals:
                self.refusals -= 1
                raise ConnectionError("broker did not acknowledge")
            await super().send(message)

    node = Node(broker, store)
    node.transport = Unacknowledged(broker=broker)
    node.intake.transport = node.transport
    await node.intake.start()
    try:
        message = command(account("dave"), Open("d"))
        await send(node, message)
        receipt = await receipts.next()
        assert receipt.command_id == message.id
        assert receipt.version == 1
        assert node.intake.retried == 2
        assert node.intake.executed == 1
        partition = int(receipt.position.split(":")[0])
        assert node.intake.checkpoint(partition) == int(receipt.position.split(":")[1]) + 1
    finally:
        await node.intake.stop(5)
        await node.transport.close()


# -- technical failures: retry, park, the ledger -------------------------------------------


async def test_a_store_outage_is_retried_then_parks_the_aggregate_while_others_flow(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    erin, frank = account("erin"), account("frank")
    await send(node, command(erin, Open("e")))
    await receipts.next()
    store.down = True
    failing = command(erin, Deposit(1))
    await send(node, failing)
    await send(node, command(erin, Deposit(2)))  # waits behind the parked one
    await _parked(node)
    [parked] = node.intake.parked()
    assert parked.aggregate_id == erin
    assert parked.command_id == failing.id
    assert parked.attempts == FAST.retries + 1
    assert "event store is down" in parked.error
    assert store.failed_appends == FAST.retries + 1
    store.down = False
    await send(node, command(frank, Open("f")))
    flowing = await receipts.next()
    assert flowing.aggregate_id == frank
    # the ledger's retry drains the parked aggregate, in order
    node.intake.retry(erin)
    first, second = await receipts.take(2)
    assert [first.version, second.version] == [2, 3]
    assert node.intake.parked() == []
    assert node.intake.in_flight == 0


async def test_the_parked_command_holds_its_partitions_checkpoint_until_skipped(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    gina = account("gina")
    await send(node, command(gina, Open("g")))
    opened = await receipts.next()
    partition, offset = map(int, opened.position.split(":"))
    assert node.intake.checkpoint(partition) == offset + 1
    store.down = True
    failed = command(gina, Deposit(1))
    await send(node, failed)
    await _parked(node)
    assert len(node.intake.parked()) == 1
    assert node.intake.checkpoint(partition) == offset + 1  # never past the parked offset
    store.down = False
    await send(node, command(gina, Deposit(2)))
    await node.intake.skip(gina)
    skipped = await receipts.next()  # its sender asked for a reply: told it was skipped
    assert (skipped.command_id, skipped.committed, skipped.error_code) == (
        failed.id,
        False,
        "COMMAND_SKIPPED",
    )
    after = await receipts.next()
    assert after.version == 2
    assert after.result == {"balance": 2}
    assert node.intake.checkpoint(partition) == int(after.position.split(":")[1]) + 1
    with pytest.raises(ParkedNotFoundError):
        node.intake.retry(gina)


async def _parked(node: Node) -> None:
    async def parked() -> bool:
        return bool(node.intake.parked())

    await eventually(parked, WAIT, "the aggregate to be parked")


async def test_a_contended_outcome_is_a_technical_failure(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    from wow_core.eventsourcing import EventVersionConflictError

    hugo = account("hugo")
    await send(node, command(hugo, Open("h")))
    await receipts.next()
    conflicts = 0
    real_append = InMemoryEventStore.append

    async def contended(self: InMemoryEventStore, stream: Any) -> None:
        nonlocal conflicts
        if conflicts < 4 + 1:  # more than the kernel's own conflict retries (3)
            conflicts += 1
            raise EventVersionConflictError(stream.aggregate_id, stream.version, stream.version)
        await real_append(self, stream)

    store.append = contended.__get__(store)  # type: ignore[method-assign]
    await send(node, command(hugo, Deposit(1)))
    receipt = await receipts.next()
    assert receipt.committed
    assert receipt.version == 2
    assert node.intake.retried == 1  # the kernel gave up once; the intake retried


async def test_busy_is_backpressure_retried_without_spending_the_retry_budget(
    broker: InMemoryBroker, store: FlakyStore, receipts: Receipts
) -> None:
    class BusyKernel(CommandKernel):
        refusals = 5

        async def process(self, command: CommandMessage[Any]) -> Any:
            if self.refusals:
                self.refusals -= 1
                raise CommandBusyError("node busy")
            return await super().process(command)

    node = Node(broker, store, options=IntakeOptions(retries=0, busy_backoff=0.005), kernel_type=BusyKernel)
    await node.intake.start()
    try:
        await send(node, command(account("ivy"), Open("i")))
        receipt = await receipts.next()
        assert receipt.committed
        assert node.intake.busy_retried == 5
        assert node.intake.parked() == []
        assert node.intake.retried == 0
    finally:
        await node.intake.stop(5)
        await node.transport.close()


# -- scheduled commands --------------------------------------------------------------------


async def test_a_scheduled_command_waits_in_its_lane_for_its_due_time(node: Node, receipts: Receipts) -> None:
    jack, kate = account("jack"), account("kate")
    await send(node, command(jack, Open("j")))
    await receipts.next()
    due = now_ms() + 1000
    await send(node, command(jack, Deposit(1)), due_at=due)
    await send(node, command(jack, Deposit(2)))  # behind the scheduled one
    await send(node, command(kate, Open("k")))  # another lane: not held
    first, scheduled, behind = await receipts.take(3)
    assert first.aggregate_id == kate
    assert scheduled.aggregate_id == behind.aggregate_id == jack
    assert (scheduled.version, behind.version) == (2, 3)
    assert now_ms() >= due


# -- checkpoints and handover --------------------------------------------------------------


async def test_a_restart_executes_again_only_what_was_in_flight_and_the_sender_drops_the_copy(
    broker: InMemoryBroker, store: FlakyStore, receipts: Receipts
) -> None:
    class LostReceipts(InMemoryTransport):
        async def send(self, message: TransportMessage) -> None:
            if message.topic == RECEIPTS and "lost" in message.payload:
                raise ConnectionError("broker unreachable")
            await super().send(message)

    old = Node(broker, store, options=IntakeOptions(retries=1000, retry_backoff=0.01, max_retry_backoff=0.01))
    old.transport = LostReceipts(broker=broker)
    old.intake.transport = old.transport
    await old.intake.start()
    settled = [command(account(f"done-{n}"), Open("x")) for n in range(5)]
    for message in settled:
        await send(old, message)
    got = await receipts.take(5)
    in_flight = command(account("lost"), Open("lost"))  # decided, its receipt never acknowledged
    await send(old, in_flight)

    async def retrying() -> bool:
        return old.intake.retried >= 2

    await eventually(retrying, WAIT, "the lost receipt to be retried")
    assert old.intake.executed == 6
    await old.intake.stop(0.1)
    await old.transport.close()

    new = Node(broker, store)
    await new.intake.start()
    try:
        receipt = await receipts.next()
        assert receipt.command_id == in_flight.id
        assert receipt.duplicate
        assert receipt.version == 1
        assert new.intake.executed == 1
        assert new.intake.duplicates == 1
        dedup = ReceiptDeduplicator()
        assert [dedup.first(r) for r in (*got, receipt, receipt)] == [True] * 6 + [False]
    finally:
        await new.intake.stop(5)
        await new.transport.close()


async def test_an_envelope_nobody_can_be_answered_for_is_dead_lettered(
    node: Node, receipts: Receipts
) -> None:
    dlq = node.transport.open("ops", [f"{TOPIC}.dlq"])
    dlq.open_processing()
    await send_raw(node, "k", "{not json")
    record = await asyncio.wait_for(anext(aiter(dlq)), WAIT)
    assert record.payload == "{not json"
    await send(node, command(account("after"), Open("a")))
    assert (await receipts.next()).committed  # the intake goes on


# -- the runtime runs the intakes when enabled --------------------------------------------


async def test_the_runtime_starts_an_intake_per_context_when_enabled_and_stops_it() -> None:
    from wow_core import WowApp, WowSettings

    app = WowApp("bank-service", aggregates=[Account])
    settings = WowSettings(cluster={"intake": {"enabled": True, "in_flight": 3}})
    runtime = app.runtime(settings)
    [intake] = runtime.intakes
    assert intake.name == "bank.intake"
    assert intake.topic == "wow.bank.commands"
    assert intake.limit.intakes == 3
    assert intake.journal is None  # in_memory: one process, the node's own ledger
    transport = runtime.transport
    assert isinstance(transport, InMemoryTransport)
    async with runtime:
        reader = Receipts(InMemoryTransport(broker=transport.broker))
        message = command(account("rt"), Open("rt"))
        payload = CommandWire(message, COMMITTED).encode(intake.registry)
        await transport.send(TransportMessage(TOPIC, message.aggregate_id.id, payload, now_ms()))
        receipt = await reader.next()
        assert receipt.committed
        assert receipt.version == 1
        await reader.close()
    assert intake._receiver is None  # closed with the runtime


def test_the_intake_is_off_unless_enabled() -> None:
    from wow_core import WowApp, WowSettings

    assert WowApp("bank-service", aggregates=[Account]).runtime(WowSettings()).intakes == []


# -- the ledger's system commands and wow ledger -------------------------------------------


async def test_a_store_outage_parks_aggregates_and_the_ledgers_retry_command_drains_them(
    node: Node, receipts: Receipts, store: FlakyStore, broker: InMemoryBroker
) -> None:
    from wow_core.cluster.ops import ledger_request

    ops = InMemoryTransport(broker=broker)
    lena, mike = account("lena"), account("mike")
    for aggregate_id in (lena, mike):
        await send(node, command(aggregate_id, Open(aggregate_id.id)))
    await receipts.take(2)
    store.down = True
    for aggregate_id in (lena, mike):
        await send(node, command(aggregate_id, Deposit(7)))

    async def both_parked() -> bool:
        return len(node.intake.parked()) == 2

    await eventually(both_parked, WAIT, "both aggregates to be parked")
    listed = await ledger_request(ops, "list", lena, timeout=WAIT)
    assert listed.committed
    assert sorted(e["aggregate"] for e in listed.result["parked"]) == [
        "bank.account@lena",
        "bank.account@mike",
    ]
    store.down = False
    for aggregate_id in (lena, mike):
        retried = await ledger_request(ops, "retry", aggregate_id, timeout=WAIT)
        assert retried.committed
        assert retried.result["parked"][0]["aggregate"] == f"bank.account@{aggregate_id.id}"
    drained = await receipts.take(2)
    assert sorted((r.aggregate_id.id, r.version) for r in drained if r.aggregate_id) == [
        ("lena", 2),
        ("mike", 2),
    ]
    assert node.intake.parked() == []
    missing = await ledger_request(ops, "skip", lena, timeout=WAIT)
    assert (missing.committed, missing.error_code) == (False, "LEDGER_ENTRY_NOT_FOUND")
    other = await ledger_request(ops, "list", lena, name="bank.other", timeout=WAIT)
    assert other.error_code == "LEDGER_UNKNOWN_SUBSCRIPTION"
    await ops.close()


async def test_a_ledger_command_is_not_held_behind_the_parked_aggregate_it_names(
    node: Node, receipts: Receipts, store: FlakyStore, broker: InMemoryBroker
) -> None:
    from wow_core.cluster.ops import ledger_request

    nina = account("nina")
    await send(node, command(nina, Open("n")))
    await receipts.next()
    store.down = True
    await send(node, command(nina, Deposit(1)))
    await _parked(node)
    store.down = False
    await send(node, command(nina, Deposit(2)))  # behind the parked one
    ops = InMemoryTransport(broker=broker)
    skipped = await ledger_request(ops, "skip", nina, timeout=WAIT)
    assert skipped.committed
    assert (await receipts.next()).error_code == "COMMAND_SKIPPED"  # the skipped command's answer
    after = await receipts.next()
    assert after.result == {"balance": 2}
    await ops.close()


async def test_wow_ledger_sends_the_command_and_prints_the_receipt(
    node: Node, store: FlakyStore, broker: InMemoryBroker
) -> None:
    import io

    from dependency_injector import providers

    from wow_core.plugins import load_plugins
    from wow_core.runtime.cli import Invocation, build_parser
    from wow_core.runtime.container import WowContainer, create_container
    from wow_core.runtime.ledger_cli import ledger_main
    from wow_core.runtime.settings import WowSettings

    olga = account("olga")
    await send(node, command(olga, Open("o")), reply_to=None)
    store.down = True
    await send(node, command(olga, Deposit(3)), reply_to=None)
    await _parked(node)
    store.down = False
    plugins = load_plugins()

    class Here(Invocation):
        def container(self) -> WowContainer:
            container = create_container(WowSettings(), plugins=plugins)
            container.transport.override(providers.Object(InMemoryTransport(broker=broker)))
            return container

    async def wow_ledger(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        args = build_parser(plugins).parse_args(["ledger", *argv, "--timeout", str(WAIT)])
        return await ledger_main(Here(args, plugins, out)), out.getvalue()

    status, printed = await wow_ledger("list", "bank.account@olga")
    assert status == 0, printed
    assert printed.startswith("parked: bank.account@olga ((0)) under bank.intake at ")
    assert f"{FAST.retries + 1} attempts" in printed
    status, printed = await wow_ledger("retry", "bank.account@olga")
    assert (status, printed.split(":")[0]) == (0, "retried")
    status, printed = await wow_ledger("retry", "bank.account@olga")
    assert status == 1
    assert printed.startswith("refused: LEDGER_ENTRY_NOT_FOUND")
    status, printed = await wow_ledger("list", "not-an-aggregate")
    assert (status, printed) == (2, "wow ledger: expected context.aggregate@id, got 'not-an-aggregate'\n")


async def test_a_receiver_without_revocations_keeps_the_spi_default() -> None:
    class Plain:
        pass

    assert set_revocation_listener(Plain(), None) is False  # type: ignore[arg-type]

    class Listening:
        listener: Any = "unset"

        def set_revocation_listener(self, listener: Any) -> None:
            self.listener = listener

    receiver = Listening()
    assert set_revocation_listener(receiver, print) is True  # type: ignore[arg-type]
    assert receiver.listener is print


async def test_a_revocation_drops_the_queued_and_parked_commands_of_its_partitions_and_awaits_the_running(
    node: Node, store: FlakyStore
) -> None:
    Gate.release = asyncio.Event()
    Gate.entered = asyncio.Queue()
    gate = AggregateId(NamedAggregate("bank", "gate"), "g1")
    await send(node, command(gate, Hold("first")))
    await send(node, command(gate, Hold("second")))
    assert await asyncio.wait_for(Gate.entered.get(), WAIT) == "first"
    store.down = True
    sick = account("sick")
    await send(node, command(sick, Open("s")))

    async def parked() -> bool:
        return len(node.intake.parked()) == 1

    await eventually(parked, WAIT, "the aggregate to be parked")
    partitions = {
        (TOPIC, int(entry.record.position.split(":")[0]))
        for lane in node.intake._lanes.values()
        for entry in lane.queue
    }
    revocation = asyncio.create_task(node.intake._on_revoked(sorted(partitions)))
    await asyncio.sleep(0.05)
    assert not revocation.done(), "the revocation must wait for the running command"
    store.down = False
    Gate.release.set()
    await asyncio.wait_for(revocation, WAIT)
    assert node.intake.parked() == []
    assert node.ledger.entries() == []
    assert node.intake.in_flight == 0
    assert node.intake.revoked_dropped == 2  # the second Hold and the parked Open
    await asyncio.sleep(0.05)
    assert Gate.entered.empty(), "a dropped command ran"
    assert await store.last_version(gate) == 1


async def test_the_intakes_counters_go_to_the_metrics_facade(
    broker: InMemoryBroker, store: FlakyStore, receipts: Receipts
) -> None:
    class BusyOnce(CommandKernel):
        refusals = 2

        async def process(self, command: CommandMessage[Any]) -> Any:
            if self.refusals:
                self.refusals -= 1
                raise CommandBusyError("node busy")
            return await super().process(command)

    node = Node(broker, store, kernel_type=BusyOnce)
    metrics = InMemoryMetrics()
    node.intake.metrics = metrics
    await node.intake.start()
    try:
        rich = account("rich")
        await send(node, command(rich, Open("r")))
        deposit = command(rich, Deposit(5))
        await send(node, deposit)
        await send(node, command(rich, Deposit(5), request_id=deposit.request_id))
        await send(node, command(rich, Withdraw(100)))
        await receipts.take(4)
        assert metrics.gauge_value("wow.intake.lane_depth", intake="bank.intake") == 0
        store.down = True
        await send(node, command(account("down"), Open("d")))

        async def parked() -> bool:
            return metrics.counter_value("wow.intake.parked", intake="bank.intake") == 1

        await eventually(parked, WAIT, "the aggregate to be parked")
        assert metrics.gauge_value("wow.intake.lane_depth", intake="bank.intake") == 1
        await node.intake.skip(account("down"))
    finally:
        await node.intake.stop(5)
        await node.transport.close()

    def settled(outcome: str) -> float:
        return metrics.counter_value("wow.intake.settled", intake="bank.intake", outcome=outcome)

    assert metrics.counter_value("wow.intake.received", intake="bank.intake") == 5
    assert (settled("committed"), settled("duplicate"), settled("rejected"), settled("skipped")) == (
        2,
        1,
        1,
        1,
    )
    assert metrics.counter_value("wow.intake.busy_retries", intake="bank.intake") == 2
    assert metrics.counter_value("wow.intake.retries", intake="bank.intake") == FAST.retries
    assert metrics.gauge_value("wow.intake.lane_depth", intake="bank.intake") == 0


async def test_a_scheduled_command_waiting_for_its_due_time_is_dropped_by_a_revocation(
    node: Node, receipts: Receipts, store: FlakyStore
) -> None:
    late = account("late")
    await send(node, command(late, Open("l")), due_at=now_ms() + 300)

    async def queued() -> bool:
        return node.intake.in_flight == 1

    await eventually(queued, WAIT, "the scheduled command to wait in its lane")
    [entry] = [entry for lane in node.intake._lanes.values() for entry in lane.queue]
    await node.intake._on_revoked([(TOPIC, int(entry.record.position.split(":")[0]))])
    assert node.intake.revoked_dropped == 1
    await asyncio.sleep(0.5)  # past its due time: it must not run here
    assert await store.last_version(late) == 0
    assert receipts.pending() == 0
