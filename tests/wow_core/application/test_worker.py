"""CommandWorker: type check, transport check, reserved attributes, attribute precedence,
the rejection policies, concurrency and a graceful stop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.wow_core.application.commands import Audit, ChargeCard, SendReceipt
from tests.wow_core.application.support import FakeRecord, RecordingTransport
from wow_core.application import (
    ApplicationCommandBus,
    CommandEnvelope,
    CommandMetadata,
    CommandWorker,
    ExecutionMode,
    JsonCommandSerializer,
    JsonOperationContextSerializer,
    Operation,
    OperationStatus,
    Outcome,
    RejectionAction,
    RejectionPolicy,
    TransportMiddleware,
    TransportRegistry,
    class_name,
)
from wow_core.model import DecodeFailureKind
from wow_core.transport import (
    DecodeFailure,
    DecodeFailureAction,
    DecodeFailureDefault,
    DefaultDecodeFailureHandler,
    InMemoryTransport,
)

TOPIC = "wow.application.payments"


class Handled:
    def __init__(self) -> None:
        self.operations: list[Operation] = []
        self.failures_left = 0

    async def __call__(self, command: object, operation: Operation) -> str:
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("transient")
        self.operations.append(operation)
        return "ok"


def worker(
    handled: Handled,
    *,
    transport: Any = None,
    context: Any = None,
    policy: RejectionPolicy | None = None,
    serializer: Any = None,
    attributes: dict[str, Any] | None = None,
    concurrency: int = 1,
) -> CommandWorker:
    transport = transport or RecordingTransport()
    registry = TransportRegistry({"payments": transport})
    serializer = serializer or JsonCommandSerializer()
    context = context or JsonOperationContextSerializer(["tenant_id", "locale"])
    bus = ApplicationCommandBus([TransportMiddleware(registry, serializer, context)])
    for command_type in (ChargeCard, SendReceipt, Audit):
        bus.register(command_type, handled)
    return CommandWorker(
        bus=bus,
        serializer=serializer,
        context_serializer=context,
        transport=transport,
        transport_name="payments",
        topic=TOPIC,
        group="g",
        attributes=attributes,
        policy=policy or RejectionPolicy(RejectionAction.DROP),
        concurrency=concurrency,
    )


def envelope(
    command: object, context: dict[str, Any] | None = None, operation_id: str = "producer-op"
) -> str:
    return CommandEnvelope(
        operation_id=operation_id,
        command_class=class_name(type(command)),
        payload=JsonCommandSerializer().serialize(command),
        context=json.dumps(context or {}),
    ).encode()


async def test_a_queued_command_is_dispatched_in_sync_mode_with_the_producers_operation_id() -> None:
    handled = Handled()
    record = FakeRecord(envelope(ChargeCard("c", 5), {"tenant_id": "t1"}))
    assert await worker(handled).handle(record) is Outcome.HANDLED
    assert record.acks == 1
    [operation] = handled.operations
    assert operation.command == ChargeCard("c", 5)
    assert operation.execution_mode is ExecutionMode.SYNC
    assert operation.operation_id != "producer-op", "the worker's execution is an operation of its own"
    assert operation.attributes == {
        "tenant_id": "t1",
        CommandWorker.ATTR_ORIGINAL_OPERATION_ID: "producer-op",
        CommandWorker.ATTR_EXECUTION_MODE: "sync",
    }


async def test_attribute_precedence_is_context_then_trusted_worker_attributes_then_runtime_state() -> None:
    handled = Handled()
    trusted = {"tenant_id": "from-worker", CommandWorker.ATTR_ORIGINAL_OPERATION_ID: "worker-cannot-forge-it"}
    await worker(handled, attributes=trusted).handle(
        FakeRecord(envelope(ChargeCard("c", 5), {"tenant_id": "queued", "locale": "fr"}))
    )
    attributes = handled.operations[0].attributes
    assert attributes["tenant_id"] == "from-worker", "trusted worker attributes win over queued data"
    assert attributes["locale"] == "fr", "queued context fills what the worker does not set"
    assert attributes[CommandWorker.ATTR_ORIGINAL_OPERATION_ID] == "producer-op"


class PermissiveContext:
    """A custom context serializer that lets anything through, reserved names included."""

    def serialize(self, operation: Operation) -> str:
        return json.dumps(operation.attributes)

    def deserialize(self, payload: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(payload)
        return result


@pytest.mark.parametrize(
    "forged", [{"__original_operation_id": "forged"}, {"__execution_mode": "default"}, {"__admin": True}]
)
async def test_queued_reserved_attributes_are_rejected_even_with_a_custom_context_serializer(
    forged: dict[str, Any],
) -> None:
    handled = Handled()
    record = FakeRecord(envelope(ChargeCard("c", 5), forged))
    assert await worker(handled, context=PermissiveContext()).handle(record) is Outcome.DROPPED
    assert handled.operations == []


@pytest.mark.parametrize(
    "command",
    [SendReceipt("a@b.c"), Audit("x")],
    ids=["marked for another transport", "not marked"],
)
async def test_a_command_not_marked_for_this_transport_is_rejected_whatever_handlers_exist(
    command: object,
) -> None:
    handled = Handled()
    record = FakeRecord(envelope(command))
    assert await worker(handled).handle(record) is Outcome.DROPPED
    assert handled.operations == [], "a handler exists for it, and still it is not dispatched"


class Substituting(JsonCommandSerializer):
    """Returns an object of another class than the one asked for."""

    def deserialize(self, payload: str, command_class: type[Any]) -> object:
        return Audit("substituted")


async def test_the_restored_object_must_be_of_the_requested_class() -> None:
    handled = Handled()
    record = FakeRecord(envelope(ChargeCard("c", 5)))
    assert await worker(handled, serializer=Substituting()).handle(record) is Outcome.DROPPED
    assert handled.operations == []


NOT_ENVELOPES = pytest.mark.parametrize(
    "payload",
    [
        "not json",
        '{"v":1}',
        json.dumps({"v": 2, "operation_id": "o", "command_class": "x:Y", "payload": "{}", "context": "{}"}),
    ],
    ids=["not json", "not an envelope", "another version"],
)


@pytest.mark.parametrize(
    "payload",
    [
        json.dumps(
            {"v": 1, "operation_id": "o", "command_class": "os:system", "payload": "{}", "context": "{}"}
        ),
        envelope(ChargeCard("c", 5)).replace('\\"amount\\":5', '\\"amount\\":true'),
        envelope(ChargeCard("c", 5), {"role": "admin"}),
    ],
    ids=["a class it does not know", "bad payload", "context"],
)
async def test_a_record_that_cannot_be_restored_is_not_acknowledged_as_handled(payload: str) -> None:
    handled = Handled()
    record = FakeRecord(payload)
    assert await worker(handled).handle(record) is Outcome.DROPPED
    assert handled.operations == []


class LeavesPending(RecordingTransport):
    """A transport whose decode-failure default is to leave a record pending (as Redis),
    and that hears what became of it (a ``DecodeFailureObserver``)."""

    decode_failure_default = DecodeFailureDefault.LEAVE_PENDING

    def __init__(self) -> None:
        super().__init__()
        self.heard: list[tuple[DecodeFailure, DecodeFailureAction]] = []

    def decode_failure_handled(self, failure: DecodeFailure, action: DecodeFailureAction) -> None:
        self.heard.append((failure, action))


SLOW_RETRY = RejectionPolicy(RejectionAction.RETRY, attempts=5, backoff=30.0, max_backoff=30.0)
"""A retry would sleep 30 s: a test that finishes within its 5 s timeout did not retry."""


@NOT_ENVELOPES
@pytest.mark.parametrize("policy", [SLOW_RETRY, RejectionPolicy(RejectionAction.DROP)], ids=["retry", "drop"])
async def test_a_record_that_is_not_an_envelope_is_dead_lettered_at_once_by_default(
    payload: str, policy: RejectionPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    handled = Handled()
    transport = RecordingTransport()
    record = FakeRecord(payload, key="producer-op", position="wow.application.payments/1-0")
    command_worker = worker(handled, transport=transport, policy=policy)
    assert await asyncio.wait_for(command_worker.handle(record), 5) is Outcome.DEAD_LETTERED
    [dead] = transport.sent
    assert (dead.topic, dead.key, dead.payload) == (TOPIC + ".dlq", "producer-op", payload)
    assert record.acks == 1
    assert handled.operations == []
    assert not [r for r in caplog.records if "attempt" in r.getMessage()], "it was not retried"
    [line] = [r.getMessage() for r in caplog.records if r.name == "wow.application.worker"]
    assert line.startswith("record wow.application.payments/1-0 is not a command envelope, dead-lettered: ")
    assert line.count("wow.application.payments") == 1, "the topic is named once"


@NOT_ENVELOPES
async def test_a_record_that_is_not_an_envelope_is_left_pending_where_the_transport_asks_for_it(
    payload: str,
) -> None:
    transport = LeavesPending()
    record = FakeRecord(payload)
    command_worker = worker(Handled(), transport=transport, policy=SLOW_RETRY)
    assert await asyncio.wait_for(command_worker.handle(record), 5) is Outcome.LEFT_PENDING
    assert record.acks == 0
    assert transport.sent == []
    [(failure, action)] = transport.heard
    assert action is DecodeFailureAction.LEAVE_PENDING
    assert (failure.group, failure.record) == ("g", record)
    expected = DecodeFailureKind.NOT_JSON if payload == "not json" else DecodeFailureKind.WRONG_SHAPE
    assert failure.error.kind is expected


async def test_the_decode_failure_handler_of_the_worker_decides_for_a_record_that_is_not_an_envelope() -> (
    None
):
    transport = LeavesPending()
    record = FakeRecord("not json")
    command_worker = worker(Handled(), transport=transport, policy=SLOW_RETRY)
    command_worker.decode_failure_handler = DefaultDecodeFailureHandler(DecodeFailureDefault.DEAD_LETTER)
    assert await asyncio.wait_for(command_worker.handle(record), 5) is Outcome.DEAD_LETTERED
    assert [m.topic for m in transport.sent] == [TOPIC + ".dlq"]
    assert record.acks == 1


async def test_a_decode_failure_handler_answering_something_else_leaves_the_record_pending() -> None:
    # the same reading of the answer as on the aggregate bus: never acknowledged unsaid
    class Answering:
        async def handle(self, failure: DecodeFailure, transport: Any) -> Any:
            return None

    transport = LeavesPending()
    record = FakeRecord("not json")
    command_worker = worker(Handled(), transport=transport, policy=SLOW_RETRY)
    command_worker.decode_failure_handler = Answering()
    assert await asyncio.wait_for(command_worker.handle(record), 5) is Outcome.LEFT_PENDING
    assert record.acks == 0


async def test_a_retried_failure_names_the_record_once_in_its_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handled = Handled()
    handled.failures_left = 10
    policy = RejectionPolicy(RejectionAction.RETRY, attempts=2, backoff=0.001, max_backoff=0.002)
    for position, shown in [
        ("wow.application.payments/1-0", "record wow.application.payments/1-0 "),  # Redis: the stream
        ("3:17", "record wow.application.payments at 3:17 "),  # Kafka: partition and offset
    ]:
        caplog.clear()
        record = FakeRecord(envelope(ChargeCard("c", 5)), position=position)
        assert await worker(handled, policy=policy).handle(record) is Outcome.LEFT_PENDING
        lines = [r.getMessage() for r in caplog.records if r.name == "wow.application.worker"]
        assert len(lines) == 2
        for line in lines:
            assert line.startswith(shown)
            assert line.count("wow.application.payments") == 1


async def test_retry_tries_again_with_backoff_and_acknowledges_once_it_succeeds() -> None:
    handled = Handled()
    handled.failures_left = 2
    record = FakeRecord(envelope(ChargeCard("c", 5)))
    policy = RejectionPolicy(RejectionAction.RETRY, attempts=3, backoff=0.001, max_backoff=0.002)
    assert await worker(handled, policy=policy).handle(record) is Outcome.HANDLED
    assert record.acks == 1
    assert len(handled.operations) == 1


async def test_retry_exhausted_leaves_the_record_unacknowledged_for_a_later_delivery() -> None:
    handled = Handled()
    handled.failures_left = 10
    record = FakeRecord(envelope(ChargeCard("c", 5)))
    policy = RejectionPolicy(RejectionAction.RETRY, attempts=3, backoff=0.001, max_backoff=0.002)
    assert await worker(handled, policy=policy).handle(record) is Outcome.LEFT_PENDING
    assert record.acks == 0
    assert handled.failures_left == 7


def test_the_backoff_doubles_up_to_its_bound() -> None:
    policy = RejectionPolicy(RejectionAction.RETRY, attempts=10, backoff=0.1, max_backoff=0.5)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.5]
    with pytest.raises(ValueError, match="attempts"):
        RejectionPolicy(attempts=0)


async def test_dead_letter_moves_the_record_unchanged_to_the_dlq_topic_then_acknowledges() -> None:
    handled = Handled()
    transport = RecordingTransport()
    record = FakeRecord(envelope(Audit("x")), key="producer-op")
    outcome = await worker(
        handled, transport=transport, policy=RejectionPolicy(RejectionAction.DEAD_LETTER)
    ).handle(record)
    assert outcome is Outcome.DEAD_LETTERED
    assert record.acks == 1
    [dead] = transport.sent
    assert (dead.topic, dead.key, dead.payload) == (TOPIC + ".dlq", "producer-op", record.payload)


async def test_a_dead_letter_that_cannot_be_sent_leaves_the_record_unacknowledged() -> None:
    transport = RecordingTransport(fail_with=ConnectionError("down"))
    record = FakeRecord(envelope(Audit("x")))
    policy = RejectionPolicy(RejectionAction.DEAD_LETTER)
    assert await worker(Handled(), transport=transport, policy=policy).handle(record) is Outcome.LEFT_PENDING
    assert record.acks == 0


async def test_drop_acknowledges_a_rejected_record_without_dispatching_it() -> None:
    record = FakeRecord(envelope(Audit("x")))
    assert await worker(Handled()).handle(record) is Outcome.DROPPED
    assert record.acks == 1


class Gate:
    """A handler that holds every command until released, and counts how many it holds."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = 0
        self.most = 0
        self.done: list[str] = []
        self.entered = asyncio.Condition()
        self.finished = asyncio.Condition()

    async def __call__(self, command: Any, operation: Operation) -> None:
        async with self.entered:
            self.holding += 1
            self.most = max(self.most, self.holding)
            self.entered.notify_all()
        await self.release.wait()
        self.holding -= 1
        async with self.finished:
            self.done.append(operation.attributes[CommandWorker.ATTR_ORIGINAL_OPERATION_ID])
            self.finished.notify_all()

    async def wait_holding(self, count: int) -> None:
        async with self.entered:
            await asyncio.wait_for(self.entered.wait_for(lambda: self.holding >= count), 10)

    async def wait_done(self, count: int) -> None:
        async with self.finished:
            await asyncio.wait_for(self.finished.wait_for(lambda: len(self.done) >= count), 10)


async def test_run_executes_at_most_concurrency_commands_at_once_and_a_stop_finishes_them() -> None:
    transport = InMemoryTransport()
    gate = Gate()
    registry = TransportRegistry({"payments": transport})
    serializer = JsonCommandSerializer()
    bus = ApplicationCommandBus([TransportMiddleware(registry, serializer)])
    bus.register(ChargeCard, gate)
    command_worker = CommandWorker(
        bus=bus,
        serializer=serializer,
        context_serializer=JsonOperationContextSerializer(),
        transport=transport,
        transport_name="payments",
        topic=registry.topic("payments"),
        group="g",
        concurrency=3,
        shutdown_timeout=10,
    )
    stop, ready, draining = asyncio.Event(), asyncio.Event(), asyncio.Event()
    running = asyncio.ensure_future(command_worker.run(stop, ready, draining))
    await asyncio.wait_for(ready.wait(), 10)
    ids = [(await bus.dispatch(ChargeCard("c", n))).operation_id for n in range(5)]
    await gate.wait_holding(3)
    stop.set()  # what SIGTERM does: no new record, the three in flight finish
    await asyncio.wait_for(draining.wait(), 10)
    gate.release.set()
    await asyncio.wait_for(running, 10)
    assert gate.most == 3
    assert len(gate.done) == 3
    assert set(gate.done) <= set(ids)

    # the two not taken are still there for the group, and nothing was acknowledged twice
    again = asyncio.Event()
    rest = asyncio.ensure_future(command_worker.run(again))
    await gate.wait_done(5)
    again.set()
    await asyncio.wait_for(rest, 10)
    assert sorted(gate.done) == sorted(ids)
    await transport.close()


class FailingReceiver:
    """Yields one record, then fails as a broker connection would."""

    def __init__(self, record: FakeRecord) -> None:
        self.record = record
        self.closed = False

    def __aiter__(self) -> FailingReceiver:
        return self

    async def __anext__(self) -> FakeRecord:
        if self.record.delivery_count:
            self.record.delivery_count = 0
            return self.record
        raise ConnectionError("the broker went away")

    async def ready(self) -> None:
        return None

    def open_processing(self) -> None:
        return None

    async def close(self) -> None:
        self.closed = True


async def test_a_failing_receiver_ends_run_with_its_error_after_the_command_in_flight_finished() -> None:
    handled = Handled()
    record = FakeRecord(envelope(ChargeCard("c", 5)))
    receiver = FailingReceiver(record)
    transport = RecordingTransport()
    transport.open = lambda group, topics: receiver  # type: ignore[method-assign, assignment, return-value]
    with pytest.raises(ConnectionError, match="went away"):
        await asyncio.wait_for(worker(handled, transport=transport).run(asyncio.Event()), 10)
    assert record.acks == 1
    assert receiver.closed


class TableMetadata:
    """A custom metadata provider: asynchronous by a table, not by decorators."""

    def metadata_of(self, command_class: type[Any]) -> CommandMetadata:
        return CommandMetadata("payments" if command_class is Audit else None)


async def test_a_custom_metadata_provider_decides_for_the_producer_and_the_worker_alike() -> None:
    transport = RecordingTransport()
    registry = TransportRegistry({"payments": transport})
    serializer = JsonCommandSerializer()
    context = JsonOperationContextSerializer()
    bus = ApplicationCommandBus(
        [TransportMiddleware(registry, serializer, context, metadata=TableMetadata())]
    )
    handled = Handled()
    bus.register(Audit, handled)
    bus.register(ChargeCard, handled)
    queued = await bus.dispatch(Audit("x"))
    assert queued.status is OperationStatus.QUEUED, "not decorated, but the table says payments"
    charged = await bus.dispatch(ChargeCard("c", 1))
    assert charged.status is OperationStatus.COMPLETED, "decorated, but the table says synchronous"
    command_worker = CommandWorker(
        bus=bus,
        serializer=serializer,
        context_serializer=context,
        transport=transport,
        transport_name="payments",
        topic=TOPIC,
        group="g",
        metadata=TableMetadata(),
        policy=RejectionPolicy(RejectionAction.DROP),
    )
    [message] = transport.sent
    assert await command_worker.handle(FakeRecord(message.payload)) is Outcome.HANDLED
    assert [operation.command for operation in handled.operations] == [ChargeCard("c", 1), Audit("x")]
    assert await command_worker.handle(FakeRecord(envelope(ChargeCard("c", 2)))) is Outcome.DROPPED
