"""TransportMessageBus specifics: naming and memo, encoding, metrics, the failure policy's edges."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from wow_core.messaging import BusClosedError, MessageSubscription
from wow_core.metrics import InMemoryMetrics, metrics_source
from wow_core.middleware import BusLayer, MetricDecodeFailureHandler, MetricsMiddleware
from wow_core.middleware.metrics import DECODE_FAILURES
from wow_core.model import DecodeFailureKind, NamedAggregate, TopicKind
from wow_core.testing.support import Rig, command, conformance_codec, event_stream, state_event
from wow_core.transport import (
    DecodeFailureDefault,
    DefaultTopicNaming,
    ReleasingRecord,
    Transport,
    TransportMessage,
)
from wow_core.transport.bus import (
    RECEIVED_COUNTER,
    SENT_COUNTER,
    TransportCommandBus,
    TransportDomainEventBus,
    TransportEventStreamExchange,
    TransportServerCommandExchange,
    TransportStateEventBus,
    TransportStateEventExchange,
)
from wow_core.transport.decode_failure import (
    DeadLetterReason,
    DeadLetterSender,
    DecodeFailure,
    DecodeFailureAction,
    DecodeFailureObserver,
    DefaultDecodeFailureHandler,
)
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport, InMemoryTransportReceiver

ACCOUNT = NamedAggregate("bank", "account")
TIMEOUT = 2.0


class CountingNaming(DefaultTopicNaming):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def topic(self, named_aggregate: NamedAggregate, kind: TopicKind) -> str:
        self.calls += 1
        return super().topic(named_aggregate, kind)


@pytest.fixture
async def rig() -> object:
    broker = InMemoryBroker()
    made = Rig(lambda: InMemoryTransport(broker=broker), TIMEOUT, "bank")
    yield made
    await made.aclose()


async def test_topics_come_from_the_transport_naming_and_are_memoised() -> None:
    naming = CountingNaming()
    bus = TransportCommandBus(InMemoryTransport(naming), conformance_codec())
    assert bus.topic(ACCOUNT) == "wow.bank.account.command"
    assert bus.topic(ACCOUNT) == "wow.bank.account.command"
    assert naming.calls == 1
    events = TransportDomainEventBus(InMemoryTransport(naming), conformance_codec())
    assert events.topic(ACCOUNT) == "wow.bank.account.event"
    states = TransportStateEventBus(InMemoryTransport(naming), conformance_codec())
    assert states.topic(ACCOUNT) == "wow.bank.account.state"


def test_encode_marks_read_only_and_keys_by_aggregate_id() -> None:
    bus = TransportCommandBus(InMemoryTransport(), conformance_codec())
    message = command(ACCOUNT, "a-7", 3)
    record = bus.encode(message)
    assert message.header.read_only
    assert (record.topic, record.key, record.timestamp) == (
        "wow.bank.account.command",
        "a-7",
        message.create_time,
    )
    assert json.loads(record.payload)["i"] == message.id


async def test_each_kind_has_its_exchange_whose_ack_acks_the_record(rig: Rig) -> None:
    transport = await rig.transport()
    assert isinstance(transport, InMemoryTransport)
    cases = [
        (TopicKind.COMMAND, command(ACCOUNT, "a-1"), TransportServerCommandExchange),
        (TopicKind.EVENT, event_stream(ACCOUNT, "a-1"), TransportEventStreamExchange),
        (TopicKind.STATE, state_event(ACCOUNT, "a-1"), TransportStateEventExchange),
    ]
    for kind, message, exchange_type in cases:
        bus = rig.transport_bus(transport, kind)
        group = f"bank.{kind.value}"
        receiver = await rig.subscribe(bus, MessageSubscription.of(group, [ACCOUNT]))
        await bus.send(message)
        [exchange] = await rig.take(receiver, 1)
        assert type(exchange) is exchange_type
        assert exchange.record.key == "a-1"
        assert transport.broker.backlog(group, bus.topic(ACCOUNT)) == 1
        await exchange.ack()
        assert transport.broker.backlog(group, bus.topic(ACCOUNT)) == 0


class HandingBackRecord:
    """A record of a transport that redelivers a released record itself."""

    topic, key, payload, timestamp, position, delivery_count = "t", "a-1", "{}", 0, "t/1", 1

    def __init__(self, fails: bool = False) -> None:
        self.acks = 0
        self.releases = 0
        self.fails = fails

    async def ack(self) -> None:
        self.acks += 1

    def release(self) -> None:
        self.releases += 1
        if self.fails:
            raise RuntimeError("the transport is gone")


async def test_a_released_exchange_hands_its_record_back_once_and_never_after_its_ack() -> None:
    settled: list[str] = []
    record = HandingBackRecord()
    assert isinstance(record, ReleasingRecord)
    released = TransportServerCommandExchange(command(ACCOUNT, "a-1"), record, lambda: settled.append("s"))
    released.release()
    released.release()
    assert (record.releases, record.acks, settled) == (1, 0, ["s"]), "once, settled once"
    acked_record = HandingBackRecord()
    acked = TransportServerCommandExchange(command(ACCOUNT, "a-1"), acked_record, lambda: None)
    await acked.ack()
    acked.release()
    assert (acked_record.acks, acked_record.releases) == (1, 0), "acknowledged: nothing to hand back"


async def test_a_record_without_release_and_a_failing_release_leave_it_to_the_backend(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class PlainRecord:
        topic, key, payload, timestamp, position, delivery_count = "t", "a-1", "{}", 0, "t/1", 1

        async def ack(self) -> None: ...

    TransportServerCommandExchange(command(ACCOUNT, "a-1"), PlainRecord(), lambda: None).release()
    failing = HandingBackRecord(fails=True)
    with caplog.at_level(logging.ERROR):
        TransportServerCommandExchange(command(ACCOUNT, "a-1"), failing, lambda: None).release()
    assert failing.releases == 1
    assert "stays unacknowledged" in caplog.text, "logged, not raised into the consumer"


async def test_send_and_receive_are_counted(rig: Rig) -> None:
    transport = await rig.transport()
    bus = MetricsMiddleware(rig.metrics).decorate_bus(
        rig.transport_bus(transport, TopicKind.COMMAND), BusLayer.TRANSPORT
    )
    receiver = await rig.subscribe(bus, MessageSubscription.of("bank.p", [ACCOUNT]))
    token = metrics_source.set("gateway")
    try:
        await bus.send(command(ACCOUNT, "a-1"))
    finally:
        metrics_source.reset(token)
    await rig.take(receiver, 1)
    metrics = rig.metrics
    assert metrics.counter_value(SENT_COUNTER, outcome="ok", source="gateway", aggregate="bank.account") == 1
    assert metrics.counter_value(RECEIVED_COUNTER, group="bank.p", kind="command") == 1
    await transport.close()
    with pytest.raises(BusClosedError):
        await bus.send(command(ACCOUNT, "a-2"))
    assert metrics.counter_value(SENT_COUNTER, outcome="error") == 1


async def test_closing_the_bus_closes_its_receivers_and_refuses(rig: Rig) -> None:
    transport = await rig.transport()
    bus = rig.transport_bus(transport, TopicKind.EVENT)
    receiver = bus.receiver(MessageSubscription.of("bank.p", [ACCOUNT]))
    await bus.close()
    assert not receiver.processing_open
    with pytest.raises(StopAsyncIteration):
        await anext(receiver)
    with pytest.raises(BusClosedError):
        bus.receiver(MessageSubscription.of("bank.p", [ACCOUNT]))
    with pytest.raises(BusClosedError):
        receiver.open_processing()
    await transport.send(TransportMessage("x", "k", "p", 0))  # the transport stays open


class StrayTransport(InMemoryTransport):
    """Hands its receivers a topic they did not ask for."""

    def open(self, group: str, topics: Sequence[str]) -> InMemoryTransportReceiver:
        return super().open(group, [*topics, "stray"])


async def test_a_record_of_a_topic_not_subscribed_is_a_topic_mismatch() -> None:
    transport = StrayTransport()
    handler = Rig(lambda: transport, TIMEOUT, "bank").recording_handler()
    bus = TransportCommandBus(transport, conformance_codec(), decode_failure_handler=handler)
    receiver = bus.receiver(MessageSubscription.of("bank.p", [ACCOUNT]))
    receiver.open_processing()
    valid = bus.encode(command(ACCOUNT, "a-1"))
    await transport.send(TransportMessage("stray", "a-1", valid.payload, 0))
    await bus.send(command(ACCOUNT, "a-2"))
    exchange = await anext(receiver)
    assert exchange.message.aggregate_id.id == "a-2"
    [failure] = handler.failures
    assert failure.error.kind is DecodeFailureKind.TOPIC_MISMATCH
    assert "not subscribed" in str(failure.error)
    await transport.close()


class ExplodingHandler:
    def __init__(self) -> None:
        self.calls = 0

    async def handle(self, failure: DecodeFailure, transport: Transport) -> DecodeFailureAction:
        self.calls += 1
        raise RuntimeError("the policy itself failed")


async def test_a_failing_policy_leaves_the_record_pending_and_the_receiver_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = InMemoryTransport()
    handler = ExplodingHandler()
    bus = TransportCommandBus(transport, conformance_codec(), decode_failure_handler=handler)
    receiver = bus.receiver(MessageSubscription.of("bank.p", [ACCOUNT]))
    receiver.open_processing()
    await transport.send(TransportMessage(bus.topic(ACCOUNT), "a-1", "garbage", 0))
    await bus.send(command(ACCOUNT, "a-2"))
    with caplog.at_level(logging.ERROR):
        exchange = await anext(receiver)
    assert exchange.message.aggregate_id.id == "a-2"
    assert handler.calls == 1
    assert "leaving the record pending" in caplog.text
    assert transport.broker.backlog("bank.p", bus.topic(ACCOUNT)) == 2  # garbage + unacked command
    await transport.close()


class Answering:
    """A policy that answers what it is given (a plugin's mistakes included)."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    async def handle(self, failure: DecodeFailure, transport: Transport) -> Any:
        return self.answer


@pytest.mark.parametrize(("answer", "acknowledged"), [("ack", True), ("leave_pending", False), (None, False)])
async def test_a_policys_answer_is_read_by_its_value_and_a_wrong_one_is_said(
    answer: object, acknowledged: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # "ack" is ACK (a StrEnum's value); None or anything else leaves the record pending, said
    transport = InMemoryTransport()
    bus = TransportCommandBus(transport, conformance_codec(), decode_failure_handler=Answering(answer))
    receiver = bus.receiver(MessageSubscription.of("bank.p", [ACCOUNT]))
    receiver.open_processing()
    await transport.send(TransportMessage(bus.topic(ACCOUNT), "a-1", "garbage", 0))
    await bus.send(command(ACCOUNT, "a-2"))
    with caplog.at_level(logging.ERROR):
        exchange = await anext(receiver)
    await exchange.ack()
    assert transport.broker.backlog("bank.p", bus.topic(ACCOUNT)) == (0 if acknowledged else 1)
    assert ("not a DecodeFailureAction" in caplog.text) is (answer is None)
    await transport.close()


async def test_quiesce_leaves_a_record_pulled_meanwhile_unacknowledged(rig: Rig) -> None:
    transport = await rig.transport()
    bus = rig.transport_bus(transport, TopicKind.COMMAND)
    receiver = await rig.subscribe(bus, MessageSubscription.of("bank.p", [ACCOUNT]))
    pulling = rig.consume(receiver, ack=False)
    await rig.settle()  # the consumer now waits for a record inside the transport
    assert await receiver.quiesce(TIMEOUT) is True
    await bus.send(command(ACCOUNT, "a-1"))
    await pulling.wait_for(lambda _: pulling.task.done(), TIMEOUT, "the iteration to end")
    assert pulling.items == []
    assert transport.broker.backlog("bank.p", bus.topic(ACCOUNT)) == 1


class RefusingTransport(InMemoryTransport):
    async def send(self, message: TransportMessage) -> None:
        raise ConnectionError("broker unreachable")


async def test_a_dead_letter_that_cannot_be_sent_stays_pending(caplog: pytest.LogCaptureFixture) -> None:
    from wow_core.model import DecodeError

    transport = RefusingTransport()
    metrics = InMemoryMetrics()
    handler = MetricDecodeFailureHandler(DefaultDecodeFailureHandler(), metrics)
    broker_record = transport.open("g", ["t"])
    await InMemoryTransport(broker=transport.broker).send(TransportMessage("t", "k", "raw", 5))
    broker_record.open_processing()
    record = await anext(broker_record)
    failure = DecodeFailure("g", record, DecodeError(DecodeFailureKind.NOT_JSON, "nope"))
    with caplog.at_level(logging.WARNING):
        action = await handler.handle(failure, transport)
    assert action is DecodeFailureAction.LEAVE_PENDING
    assert "could not dead-letter" in caplog.text
    assert "key 'k'" in caplog.text
    assert "position 0:0" in caplog.text or "position" in caplog.text
    assert metrics.counter_value(DECODE_FAILURES, transport="in_memory", kind="not_json") == 1


async def test_an_explicit_policy_overrides_the_transport_default() -> None:
    from wow_core.model import DecodeError

    transport = InMemoryTransport()
    receiver = transport.open("g", ["t"])
    await transport.send(TransportMessage("t", "k", "raw", 5))
    receiver.open_processing()
    record = await anext(receiver)
    failure = DecodeFailure("g", record, DecodeError(DecodeFailureKind.NOT_JSON, "nope"))
    handler = DefaultDecodeFailureHandler(DecodeFailureDefault.LEAVE_PENDING)
    assert await handler.handle(failure, transport) is DecodeFailureAction.LEAVE_PENDING
    dead = transport.open("d", ["t.dlq"])
    dead.open_processing()
    assert await DefaultDecodeFailureHandler().handle(failure, transport) is DecodeFailureAction.ACK
    kept = await anext(dead)
    assert (kept.topic, kept.key, kept.payload, kept.timestamp) == ("t.dlq", "k", "raw", 5)
    await transport.close()


class ExplainingTransport(InMemoryTransport):
    """A transport that keeps why each dead letter was sent (a DeadLetterSender)."""

    def __init__(self) -> None:
        super().__init__()
        self.reasons: list[tuple[TransportMessage, DeadLetterReason]] = []

    async def send_dead_letter(self, message: TransportMessage, reason: DeadLetterReason) -> None:
        self.reasons.append((message, reason))
        await self.send(message)


async def test_a_transport_that_sends_dead_letters_itself_is_told_why() -> None:
    from wow_core.model import DecodeError

    transport = ExplainingTransport()
    assert isinstance(transport, DeadLetterSender)
    receiver = transport.open("g", ["t"])
    await transport.send(TransportMessage("t", "k", "raw", 5))
    receiver.open_processing()
    record = await anext(receiver)
    failure = DecodeFailure("g", record, DecodeError(DecodeFailureKind.NOT_JSON, "nope"))
    assert await DefaultDecodeFailureHandler().handle(failure, transport) is DecodeFailureAction.ACK
    [(message, reason)] = transport.reasons
    assert message == TransportMessage("t.dlq", "k", "raw", 5), "the record's own bytes"
    assert reason == DeadLetterReason("undecodable", "g", record.position, 1, "not_json: nope")
    assert not isinstance(InMemoryTransport(), DeadLetterSender), "the others send the bytes alone"
    await transport.close()


async def test_policies_are_selectable_by_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from wow_core.runtime.container import create_container
    from wow_core.runtime.settings import SettingsError, WowSettings

    for name, policy in [
        ("default", None),
        ("dead_letter", DecodeFailureDefault.DEAD_LETTER),
        ("leave_pending", DecodeFailureDefault.LEAVE_PENDING),
    ]:
        monkeypatch.setenv("WOW_MESSAGING__DECODE_FAILURE", name)
        handler = create_container(WowSettings.load()).decode_failure_handler()
        assert isinstance(handler, DefaultDecodeFailureHandler)
        assert handler.policy is policy
    monkeypatch.setenv("WOW_MESSAGING__DECODE_FAILURE", "drop")
    with pytest.raises(SettingsError, match=r"WOW_MESSAGING__DECODE_FAILURE='drop'(.|\n)*leave_pending"):
        create_container(WowSettings.load())


async def test_the_metrics_middleware_counts_the_failures_of_the_policy_it_decorates() -> None:
    from wow_core.model import DecodeError

    metrics = InMemoryMetrics()
    transport = InMemoryTransport()
    policy = DefaultDecodeFailureHandler(DecodeFailureDefault.LEAVE_PENDING)
    counted = MetricsMiddleware(metrics).decorate_decode_failure_handler(policy)
    receiver = transport.open("g", ["t"])
    await transport.send(TransportMessage("t", "k", "raw", 5))
    receiver.open_processing()
    failure = DecodeFailure("g", await anext(receiver), DecodeError(DecodeFailureKind.NOT_JSON, "x"))
    assert await policy.handle(failure, transport) is DecodeFailureAction.LEAVE_PENDING
    assert metrics.counter_value(DECODE_FAILURES) == 0, "the policy itself counts nothing"
    assert await counted.handle(failure, transport) is DecodeFailureAction.LEAVE_PENDING
    assert metrics.counter_value(DECODE_FAILURES, transport="in_memory", kind="not_json") == 1


class ObservingTransport(InMemoryTransport):
    """A transport that implements the optional DecodeFailureObserver."""

    def __init__(self) -> None:
        super().__init__()
        self.observed: list[tuple[DecodeFailureKind, DecodeFailureAction]] = []

    def decode_failure_handled(self, failure: DecodeFailure, action: DecodeFailureAction) -> None:
        self.observed.append((failure.error.kind, action))


@pytest.mark.parametrize(
    ("handler", "action"),
    [
        (DefaultDecodeFailureHandler(DecodeFailureDefault.LEAVE_PENDING), DecodeFailureAction.LEAVE_PENDING),
        (DefaultDecodeFailureHandler(DecodeFailureDefault.DEAD_LETTER), DecodeFailureAction.ACK),
        (ExplodingHandler(), DecodeFailureAction.LEAVE_PENDING),
    ],
)
async def test_a_transport_that_observes_decode_failures_hears_the_action(
    handler: object, action: DecodeFailureAction
) -> None:
    transport = ObservingTransport()
    assert isinstance(transport, DecodeFailureObserver)
    bus = TransportCommandBus(transport, conformance_codec(), decode_failure_handler=handler)  # type: ignore[arg-type]
    receiver = bus.receiver(MessageSubscription.of("bank.p", [ACCOUNT]))
    receiver.open_processing()
    await transport.send(TransportMessage(bus.topic(ACCOUNT), "a-1", "garbage", 0))
    await bus.send(command(ACCOUNT, "a-2"))
    exchange = await anext(receiver)
    assert exchange.message.aggregate_id.id == "a-2"
    assert transport.observed == [(DecodeFailureKind.NOT_JSON, action)]
    await transport.close()


class GatedDeadLetters(InMemoryTransport):
    """Holds every dead-letter send until ``release`` is set: the worst point to cancel."""

    def __init__(self) -> None:
        super().__init__()
        self.sending = asyncio.Event()
        self.release = asyncio.Event()
        self.dead_letters: list[TransportMessage] = []

    async def send(self, message: TransportMessage) -> None:
        if message.topic.endswith(DefaultDecodeFailureHandler.DEAD_LETTER_SUFFIX):
            self.sending.set()
            await self.release.wait()
            self.dead_letters.append(message)
        await super().send(message)


@pytest.mark.parametrize("cancellations", [1, 2])
async def test_a_cancelled_receiver_completes_the_policy_and_its_ack_before_it_ends(
    cancellations: int,
) -> None:
    """Dead letter, count and ack are one unit: a cancellation in the middle waits for it."""
    transport = GatedDeadLetters()
    metrics = InMemoryMetrics()
    counted = MetricDecodeFailureHandler(DefaultDecodeFailureHandler(), metrics)
    bus = TransportCommandBus(transport, conformance_codec(), decode_failure_handler=counted)
    receiver = bus.receiver(MessageSubscription.of("bank.p", [ACCOUNT]))
    receiver.open_processing()
    await transport.send(TransportMessage(bus.topic(ACCOUNT), "a-1", "garbage", 0))
    pulling = asyncio.create_task(anext(receiver))
    await asyncio.wait_for(transport.sending.wait(), TIMEOUT)
    # the dead letter is not written yet: nothing is counted
    assert metrics.counter_value(DECODE_FAILURES) == 0
    for _ in range(cancellations):  # closing, a timeout around the receiver...
        pulling.cancel()
        await asyncio.sleep(0)  # one loop turn: the receiver takes this cancellation before the next
    assert not pulling.done(), "the cancellation split the policy from its ack"
    transport.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(pulling, TIMEOUT)
    assert len(transport.dead_letters) == 1
    assert metrics.counter_value(DECODE_FAILURES) == 1
    assert transport.broker.backlog("bank.p", bus.topic(ACCOUNT)) == 0, "the record was not acknowledged"
    await transport.close()
