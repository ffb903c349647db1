"""Waits across processes, in one process: the wait context in the header, the routing of
signals by endpoint, the signal's wire form, and what is dropped and counted."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest

from tests.accounts import Deposit
from wow_core.command import CommandGateway, CommandStage, CommandWait, WaitCoordinator, WaitSignal
from wow_core.command.deadline import deadlines
from wow_core.command.endpoint import (
    WAIT_CONTEXT,
    WAIT_ENDPOINT,
    WAIT_FUNCTION,
    WAIT_PROCESSOR,
    WAIT_STAGE,
    InvalidWaitEndpointError,
    WaitEndpoint,
)
from wow_core.command.notifier import RemoteSignals, WaitNotifierService, WaitSignalSink
from wow_core.command.signal_wire import MAX_SIGNAL_BYTES, SignalDecodeError, decode_signal, encode_signal
from wow_core.command.stages import Violation
from wow_core.metrics import InMemoryMetrics
from wow_core.model import AggregateId, CommandMessage, Header, NamedAggregate, TopicKind

AGG = AggregateId(NamedAggregate("bank", "account"), "a-1")
OTHER = "redis:wow:wait:" + "b" * 32


class RecordingBus:
    """A command bus that records each command and calls ``on_send`` with it."""

    topic_kind = TopicKind.COMMAND

    def __init__(self) -> None:
        self.sent: list[CommandMessage[Any]] = []
        self.on_send: Any = None

    async def send(self, message: CommandMessage[Any]) -> None:
        self.sent.append(message)
        if self.on_send is not None:
            self.on_send(message)

    def receiver(self, subscription: Any) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        pass


def command(**header: str) -> CommandMessage[Any]:
    return CommandMessage(AGG, Deposit(5), "deposit", header=Header(header))


@dataclass
class FakeNotifier:
    """A notifier that records what it was asked to send, or fails."""

    kind: str = "redis"
    error: Exception | None = None

    def __post_init__(self) -> None:
        self.sent: list[tuple[WaitEndpoint, WaitSignal]] = []
        self.sink: WaitSignalSink | None = None
        self.closed = False

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        self.sink = sink
        return WaitEndpoint(self.kind, "wow:wait:" + "a" * 32)

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append((endpoint, signal))

    async def close(self) -> None:
        self.closed = True


# -- the wait context in the header --------------------------------------------------


async def test_a_plan_past_sent_writes_this_processes_endpoint_and_what_it_waits_for() -> None:
    bus = RecordingBus()
    coordinator = WaitCoordinator()
    gateway = CommandGateway(bus, coordinator, default_timeout=5)
    bus.on_send = lambda sent: coordinator.signal(
        WaitSignal(
            sent.id,
            CommandStage.PROJECTED,
            AGG,
            context_name="bank",
            processor_name="summary",
            function_name="on_deposited",
        )
    )
    await gateway.send_and_wait(command(), CommandWait.projected("bank", "summary", "on_deposited"))
    [sent] = bus.sent
    assert sent.header[WAIT_ENDPOINT] == coordinator.endpoint
    assert WaitEndpoint.parse(coordinator.endpoint).kind == "in_memory"
    assert (sent.header[WAIT_STAGE], sent.header[WAIT_CONTEXT]) == ("PROJECTED", "bank")
    assert (sent.header[WAIT_PROCESSOR], sent.header[WAIT_FUNCTION]) == ("summary", "on_deposited")


async def test_a_sent_plan_writes_nothing_into_the_header() -> None:
    bus = RecordingBus()
    gateway = CommandGateway(bus, WaitCoordinator(), default_timeout=5)
    await gateway.send(command())
    [sent] = bus.sent
    assert WAIT_ENDPOINT not in sent.header
    assert WAIT_STAGE not in sent.header


async def test_a_read_only_header_is_not_written_the_command_is_copied() -> None:
    bus = RecordingBus()
    coordinator = WaitCoordinator()
    gateway = CommandGateway(bus, coordinator, default_timeout=5)
    bus.on_send = lambda sent: coordinator.signal(WaitSignal(sent.id, CommandStage.PROCESSED, AGG))
    original = command().with_read_only()
    await gateway.send_and_wait(original, CommandWait.processed())
    [sent] = bus.sent
    assert sent.id == original.id
    assert WAIT_ENDPOINT not in original.header
    assert sent.header[WAIT_ENDPOINT] == coordinator.endpoint


def test_two_coordinators_never_share_an_endpoint() -> None:
    assert WaitCoordinator().endpoint != WaitCoordinator().endpoint


@pytest.mark.parametrize("text", ["", "redis", ":x", "redis:", "x" * 2000])
def test_an_endpoint_that_is_not_kind_colon_address_is_refused(text: str) -> None:
    with pytest.raises(InvalidWaitEndpointError):
        WaitEndpoint.parse(text)


# -- routing by endpoint -------------------------------------------------------------


async def test_a_signal_for_this_process_goes_straight_to_the_coordinator_unserialized() -> None:
    coordinator = WaitCoordinator()
    notifier = FakeNotifier()
    coordinator.remote = RemoteSignals(notifier)
    waiter = coordinator.register(command(), CommandWait.processed())
    result = {"object": object()}  # not JSON: proves nothing was encoded
    signal = WaitSignal(waiter.command.id, CommandStage.PROCESSED, result=result)
    coordinator.route(Header({WAIT_ENDPOINT: coordinator.endpoint}), signal)
    assert (await waiter.future).result["object"] is result["object"]
    assert notifier.sent == []


async def test_a_signal_for_another_process_goes_through_the_notifier() -> None:
    coordinator = WaitCoordinator()
    notifier = FakeNotifier()
    coordinator.remote = RemoteSignals(notifier)
    signal = WaitSignal("c-1", CommandStage.PROCESSED, AGG, 1)
    coordinator.route(Header({WAIT_ENDPOINT: OTHER, WAIT_STAGE: "PROCESSED"}), signal)
    await coordinator.remote.drain(5)
    assert notifier.sent == [(WaitEndpoint.parse(OTHER), signal)]


async def test_only_signals_the_remote_wait_can_use_are_sent() -> None:
    coordinator = WaitCoordinator()
    notifier = FakeNotifier()
    coordinator.remote = RemoteSignals(notifier)
    header = Header({WAIT_ENDPOINT: OTHER, WAIT_STAGE: "PROJECTED", WAIT_PROCESSOR: "summary"})
    wanted = WaitSignal("c", CommandStage.PROJECTED, processor_name="summary")
    processed = WaitSignal("c", CommandStage.PROCESSED)
    failed_snapshot = WaitSignal("c", CommandStage.SNAPSHOT, error_code="PROCESSING_ERROR")
    for signal in (
        WaitSignal("c", CommandStage.SNAPSHOT),  # same rank, succeeded: useless to that wait
        WaitSignal("c", CommandStage.PROJECTED, processor_name="other"),
        WaitSignal("c", CommandStage.SAGA_HANDLED),
        wanted,
        processed,
        failed_snapshot,  # same rank: a failure there does not end a PROJECTED wait either
    ):
        coordinator.route(header, signal)
    await coordinator.remote.drain(5)
    assert [s for _, s in notifier.sent] == [wanted, processed]


async def test_a_failed_notification_is_counted_and_never_raised() -> None:
    metrics = InMemoryMetrics()
    remote = RemoteSignals(FakeNotifier(error=ConnectionError("broker down")), metrics)
    remote.send(OTHER, WaitSignal("c", CommandStage.PROCESSED))
    await remote.drain(5)
    assert remote.failed == 1
    assert metrics.counter_value("wow.command.wait.notify_failed", notifier="redis") == 1


async def test_an_endpoint_of_another_kind_or_malformed_is_dropped_and_counted() -> None:
    notifier = FakeNotifier()
    remote = RemoteSignals(notifier)
    remote.send("nats:wow.wait." + "c" * 32, WaitSignal("c", CommandStage.PROCESSED))
    remote.send("no colon", WaitSignal("c", CommandStage.PROCESSED))
    await remote.drain(5)
    assert (remote.dropped, notifier.sent) == (2, [])


async def test_notifications_in_flight_are_bounded() -> None:
    gate = asyncio.Event()

    class Stalled(FakeNotifier):
        async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
            await gate.wait()

    remote = RemoteSignals(Stalled(), max_pending=3)
    for n in range(5):
        remote.send(OTHER, WaitSignal(f"c-{n}", CommandStage.PROCESSED))
    assert (remote.pending, remote.dropped) == (3, 2)
    gate.set()
    assert await remote.drain(5)


async def test_the_service_gives_the_coordinator_the_notifiers_endpoint_and_closes_it() -> None:
    coordinator = WaitCoordinator()
    notifier = FakeNotifier()
    service = WaitNotifierService(notifier, coordinator)
    await service.start()
    assert coordinator.endpoint == "redis:wow:wait:" + "a" * 32
    assert coordinator.remote is service.remote
    await service.close()
    assert notifier.closed
    assert coordinator.remote is None


# -- the receiving half ----------------------------------------------------------------


async def test_a_received_signal_completes_the_wait() -> None:
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive)
    waiter = coordinator.register(command(), CommandWait.processed())
    sink(encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 3, {"n": 1})).encode())
    result = await waiter.future
    assert (result.aggregate_id, result.aggregate_version, result.result) == (AGG, 3, {"n": 1})


async def test_a_signal_for_an_unknown_or_finished_wait_is_dropped_and_counted() -> None:
    metrics = InMemoryMetrics()
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive, metrics)
    waiter = coordinator.register(command(), CommandWait.processed())
    payload = encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED))
    sink(payload)
    coordinator.unregister(waiter)
    sink(payload)  # finished
    sink(encode_signal(WaitSignal("never-waited", CommandStage.PROCESSED)))
    assert sink.unmatched == 2
    assert coordinator.unmatched == 2
    assert metrics.counter_value("wow.command.wait.signal_unmatched") == 2


def test_the_wire_form_round_trips_every_field() -> None:
    signal = WaitSignal(
        "c-1",
        CommandStage.PROJECTED,
        AGG,
        7,
        {"total": 12, "names": ["a"]},
        "SOME_ERROR",
        "it failed",
        (Violation("amount", "must be > 0"),),
        duplicate=True,
        final=True,
        context_name="bank",
        processor_name="summary",
        function_name="on_deposited",
        signal_time=1_700_000_000_000,
        is_last=False,
    )
    text = encode_signal(signal)
    assert json.loads(text)["v"] == 1
    assert decode_signal(text) == signal


HOSTILE = [
    b"",
    b"\xff\xfe",
    b"[]",
    b'"text"',
    b"{}",
    b'{"v": 2, "command_id": "c", "stage": "PROCESSED", "signal_time": 1}',
    b'{"v": 1, "command_id": "c", "stage": "NOPE", "signal_time": 1}',
    b'{"v": 1, "command_id": "", "stage": "PROCESSED", "signal_time": 1}',
    b'{"v": 1, "command_id": "c", "stage": "PROCESSED", "signal_time": "1"}',
    b'{"v": 1, "command_id": "c", "stage": "PROCESSED", "signal_time": 1, "evil": true}',
    b'{"v": 1, "command_id": "c", "stage": "PROCESSED", "signal_time": 1, "aggregate": {"id": 1}}',
    b"[" * 100_000,
    b'{"v": 1, "pad": "' + b"x" * MAX_SIGNAL_BYTES + b'"}',
]


@pytest.mark.parametrize("payload", HOSTILE, ids=range(len(HOSTILE)))
def test_a_malformed_signal_is_refused_by_the_decoder(payload: bytes) -> None:
    with pytest.raises(SignalDecodeError):
        decode_signal(payload)


async def test_a_malformed_signal_is_dropped_and_counted_never_raised_by_the_sink() -> None:
    metrics = InMemoryMetrics()
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive, metrics)
    waiter = coordinator.register(command(), CommandWait.processed())
    for payload in HOSTILE:
        sink(payload)
    assert sink.malformed == len(HOSTILE)
    assert metrics.counter_value("wow.command.wait.signal_malformed") == len(HOSTILE)
    sink(encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED)))  # still receives
    assert (await waiter.future).stage is CommandStage.PROCESSED


# -- no leaks ----------------------------------------------------------------------------


async def test_the_coordinator_is_empty_after_ten_thousand_timed_out_waits() -> None:
    bus = RecordingBus()
    coordinator = WaitCoordinator()
    gateway = CommandGateway(bus, coordinator, default_timeout=0.05)
    outcomes = await asyncio.gather(
        *(gateway.send_and_wait(command(), CommandWait.processed()) for _ in range(10_000)),
        return_exceptions=True,
    )
    assert all(isinstance(outcome, TimeoutError) for outcome in outcomes)
    assert len(coordinator) == 0
    assert len(deadlines()) == 0
    # late signals of those waits are dropped and counted, nothing is kept for them
    sink = WaitSignalSink(coordinator.receive)
    for sent in bus.sent[:100]:
        sink(encode_signal(WaitSignal(sent.id, CommandStage.PROCESSED)))
    assert sink.unmatched == 100
    assert len(coordinator) == 0
