"""The NATS wait notifier on the real server: one subject per caller, kept by a stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import nats
import nats.js.errors
import pytest

from tests.wow_nats.conftest import Names, delete_streams
from wow_core.command import CommandStage, CommandWait, WaitCoordinator, WaitSignal
from wow_core.command.notifier import WaitSignalSink
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.spi import WaitEndpoint, encode_signal
from wow_nats import NatsSettings, StreamSubjectsTakenError
from wow_nats.wait_notifier import NatsWaitNotifier

AGG = AggregateId(NamedAggregate("bank", "account"), "a-1")


def command() -> CommandMessage[Any]:
    return CommandMessage(AGG, {"n": 1}, "deposit")


def notifier(nats_url: str, names: Names, **settings: Any) -> NatsWaitNotifier:
    return NatsWaitNotifier(
        NatsSettings(servers=[nats_url], stream_prefix=names.stream_prefix, **settings),
        topic_prefix=names.topic_prefix,
    )


@pytest.fixture(autouse=True)
async def _streams_deleted(nats_url: str, names: Names) -> AsyncIterator[None]:
    yield
    await delete_streams(nats_url, names.stream_prefix)


async def test_a_signal_notified_to_an_endpoint_completes_the_wait_there(nats_url: str, names: Names) -> None:
    caller, sender = notifier(nats_url, names), notifier(nats_url, names)
    coordinator = WaitCoordinator()
    try:
        endpoint = await caller.start(WaitSignalSink(coordinator.receive))
        assert endpoint == WaitEndpoint("nats", caller.subject)
        waiter = coordinator.register(command(), CommandWait.processed())
        await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, 2))
        result = await waiter.future
        assert (result.stage, result.aggregate_version) == (CommandStage.PROCESSED, 2)
    finally:
        await caller.close()
        await sender.close()


async def test_hostile_payloads_on_the_subject_are_dropped_and_it_keeps_working(
    nats_url: str, names: Names
) -> None:
    caller = notifier(nats_url, names)
    coordinator = WaitCoordinator()
    sink = WaitSignalSink(coordinator.receive)
    raw = await nats.connect(nats_url)
    try:
        endpoint = await caller.start(sink)
        waiter = coordinator.register(command(), CommandWait.processed())
        for payload in (b"\xff", b"{}", b"null", b'{"v": 1, "stage": 3}'):
            await raw.publish(endpoint.address, payload)
        await raw.publish(
            endpoint.address, encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED)).encode()
        )
        assert (await waiter.future).stage is CommandStage.PROCESSED
        assert sink.malformed == 4
    finally:
        await raw.close()
        await caller.close()


async def test_start_returns_only_once_the_server_has_the_subscription(nats_url: str, names: Names) -> None:
    """nats-py's ``flush()`` writes its PING straight to the socket, ahead of a SUB still in
    its write buffer: a PONG proved nothing, and signals another connection published
    right after ``start`` were lost when the SUB was written late (a loaded event loop;
    here its writes are held back 0.5 s)."""
    caller = notifier(nats_url, names)
    coordinator = WaitCoordinator()
    raw = await nats.connect(nats_url)
    client = await caller._connection.client()
    transport: Any = client._transport
    writelines = transport.writelines

    def late(data: Iterable[bytes]) -> None:
        asyncio.get_running_loop().call_later(0.5, writelines, list(data))

    transport.writelines = late
    try:
        endpoint = await caller.start(WaitSignalSink(coordinator.receive))
        transport.writelines = writelines
        waiter = coordinator.register(command(), CommandWait.processed())
        await raw.publish(
            endpoint.address, encode_signal(WaitSignal(waiter.command.id, CommandStage.PROCESSED)).encode()
        )
        assert (await asyncio.wait_for(waiter.future, 5)).stage is CommandStage.PROCESSED
    finally:
        transport.writelines = writelines
        await raw.close()
        await caller.close()


async def test_subjects_of_another_form_are_refused(nats_url: str, names: Names) -> None:
    sender = notifier(nats_url, names)
    try:
        with pytest.raises(ValueError, match="not a wait subject"):
            await sender.notify(WaitEndpoint("nats", "orders.>"), WaitSignal("c", CommandStage.PROCESSED))
    finally:
        await sender.close()


class Received:
    """A sink that records the command id of every signal handed on, then completes its wait."""

    def __init__(self) -> None:
        self.coordinator = WaitCoordinator()
        self.ids: list[str] = []
        self.sink = WaitSignalSink(self._deliver)

    def _deliver(self, signal: WaitSignal) -> bool:
        self.ids.append(signal.command_id)
        return self.coordinator.receive(signal)

    def waits(self, count: int) -> list[Any]:
        return [self.coordinator.register(command(), CommandWait.processed()) for _ in range(count)]


@dataclass
class Pair:
    """A started caller with its sink and endpoint, and a sender of signals to it."""

    caller: NatsWaitNotifier
    sender: NatsWaitNotifier
    received: Received
    endpoint: WaitEndpoint

    async def notify(self, waiters: list[Any]) -> None:
        """One signal per waiter, its aggregate version its index; flushed."""
        for n, waiter in enumerate(waiters):
            await self.sender.notify(
                self.endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, n)
            )
        await (await self.sender._connection.client()).flush()

    async def handed_on(self, count: int) -> list[Any]:
        """``count`` new waits, signalled and completed."""
        waiters = self.received.waits(count)
        await self.notify(waiters)
        await completed(waiters)
        return waiters


Started = Callable[..., Awaitable[Pair]]


@pytest.fixture
async def started(nats_url: str, names: Names) -> AsyncIterator[Started]:
    """Starts a :class:`Pair` (the caller's settings given), closed after the test."""
    made: list[Pair] = []

    async def start(**settings: Any) -> Pair:
        caller, sender, received = (
            notifier(nats_url, names, **settings),
            notifier(nats_url, names),
            Received(),
        )
        try:
            endpoint = await caller.start(received.sink)
        except BaseException:
            await caller.close()
            await sender.close()
            raise
        made.append(Pair(caller, sender, received, endpoint))
        return made[-1]

    yield start
    for pair in made:
        await pair.caller.close()
        await pair.sender.close()


async def completed(waiters: list[Any], timeout: float = 10) -> list[int | None]:
    results = await asyncio.wait_for(asyncio.gather(*(w.future for w in waiters)), timeout)
    return [r.aggregate_version for r in results]


async def test_signals_notified_while_the_callers_connection_is_lost_arrive_once_it_is_back(
    started: Started,
) -> None:
    """A lost connection (a network blip, a proxy's idle timeout): what was notified
    meanwhile is kept by the stream and read when the caller is back, each signal once
    and in order (core pub/sub lost these: the waits timed out)."""
    pair = await started(reconnect_time_wait=1.0)
    client = await pair.caller._connection.client()
    client._transport._io_writer.transport.abort()  # type: ignore[union-attr]
    await eventually_true(lambda: client.is_reconnecting, "the caller to notice its lost connection")
    waiters = pair.received.waits(5)
    await pair.notify(waiters)
    assert client.is_reconnecting, "notified while the caller was away"
    assert await completed(waiters) == [0, 1, 2, 3, 4]
    assert pair.received.ids == [w.command.id for w in waiters], "each once, in order"
    assert (pair.caller.received, pair.caller.recovered) == (5, 0)
    await pair.caller.close()
    assert not pair.caller.reading


async def test_a_signal_read_and_not_acknowledged_comes_again_and_is_handed_on_once(
    started: Started, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal read just as the connection broke was not acknowledged: the server
    delivers it again after the ack wait, and the caller, which remembers the stream
    sequence it handed on last, does not hand it on twice."""
    pair = await started()
    caller = pair.caller
    acked = caller._ack_now

    async def lost() -> None:  # the acknowledgements of the first signals never arrive
        caller._unacked = 0

    monkeypatch.setattr(caller, "_ack_now", lost)
    first = await pair.handed_on(3)
    monkeypatch.setattr(caller, "_ack_now", acked)
    await eventually_true(lambda: caller.duplicates >= 3, "the unacknowledged signals to come again", 10)
    later = await pair.handed_on(2)
    assert pair.received.ids == [w.command.id for w in first + later]
    assert caller.received == 5


async def test_a_consumer_removed_behind_its_back_is_made_again_after_the_last_signal_handed_on(
    started: Started, raw_js: nats.js.JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    pair = await started(fetch_timeout=0.5)
    caller = pair.caller
    first = await pair.handed_on(2)
    await raw_js.delete_consumer(caller.stream, caller.consumer)
    later = pair.received.waits(3)
    await pair.notify(later)  # stored while the consumer is gone
    assert await completed(later) == [0, 1, 2]
    assert pair.received.ids == [w.command.id for w in first + later], "nothing twice, nothing lost"
    assert caller.recovered == 1
    assert "was gone: made again after stream sequence 2" in caplog.text
    assert caller.consumer.endswith("-1"), "under a name of its own"


async def test_a_stream_removed_behind_its_back_is_made_again_with_a_warning(
    started: Started, raw_js: nats.js.JetStreamContext, caplog: pytest.LogCaptureFixture
) -> None:
    pair = await started(fetch_timeout=0.5)
    await pair.handed_on(2)
    await raw_js.delete_stream(pair.caller.stream)
    await eventually_true(lambda: pair.caller.recovered == 1, "the stream to be made again", 10)
    assert "was made again: signals published to" in caplog.text
    later = pair.received.waits(2)
    await pair.notify(later)  # the new stream counts from 1 again
    assert await completed(later) == [0, 1]


async def test_close_removes_the_callers_consumer_and_a_dead_callers_goes_after_max_age(
    nats_url: str, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    caller = notifier(nats_url, names, wait_stream_max_age=30.0, wait_stream_max_per_caller=50)
    await caller.start(Received().sink)
    info = await raw_js.consumer_info(caller.stream, caller.consumer)
    assert info.config.durable_name is None, "ephemeral"
    assert info.config.inactive_threshold == 30.0, "a dead caller's consumer goes after max_age"
    stream = await raw_js.stream_info(caller.stream)
    assert (stream.config.max_age, stream.config.max_msgs_per_subject) == (30.0, 50)
    assert stream.config.subjects == [f"{names.topic_prefix}wait.*"]
    assert stream.config.storage == "file"
    await caller.close()
    with pytest.raises(nats.js.errors.NotFoundError):
        await raw_js.consumer_info(caller.stream, caller.consumer)
    await raw_js.stream_info(caller.stream)  # the stream stays: other callers share it


async def test_a_core_subscriber_of_the_earlier_release_still_receives_its_signals(
    nats_url: str, names: Names
) -> None:
    """Callers of the pub/sub form (same subjects, a core subscription) keep working with
    services of this release: the stream captures the subject and the server still
    delivers to the subscriber."""
    sender, stream_keeper = notifier(nats_url, names), notifier(nats_url, names)
    await stream_keeper.start(Received().sink)  # the wait stream exists
    raw = await nats.connect(nats_url)
    try:
        subject = f"{names.topic_prefix}wait.{'ab' * 16}"
        sub = await raw.subscribe(subject)
        await raw.flush()
        await sender.notify(WaitEndpoint("nats", subject), WaitSignal("c-1", CommandStage.PROCESSED))
        message = await sub.next_msg(timeout=5)
        assert b'"c-1"' in message.data
    finally:
        await raw.close()
        await sender.close()
        await stream_keeper.close()


async def test_a_stream_of_another_shape_under_the_wait_streams_name_is_a_clear_error(
    nats_url: str, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    caller = notifier(nats_url, names)
    await raw_js.add_stream(name=caller.stream, subjects=[f"{names.topic_prefix}other.>"])
    try:
        with pytest.raises(RuntimeError, match="not the wait subjects"):
            await caller.start(Received().sink)
    finally:
        await caller.close()


async def test_a_transport_stream_over_the_wait_subjects_is_a_clear_error(
    nats_url: str, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    """A bounded context named ``wait`` would own ``<prefix>wait.>``: the wait stream cannot
    be made beside it, and start says so instead of timing out later."""
    caller = notifier(nats_url, names)
    holder = f"{names.stream_prefix}ctx_wait"
    await raw_js.add_stream(name=holder, subjects=[f"{names.topic_prefix}wait.>"])
    try:
        with pytest.raises(StreamSubjectsTakenError, match="bounded context named 'wait'") as raised:
            await caller.start(Received().sink)
        assert f"stream {holder!r} holds {names.topic_prefix}wait.*" in str(raised.value)
    finally:
        await caller.close()


async def test_another_application_with_the_same_topic_prefix_is_named_with_the_settings_to_change(
    nats_url: str, names: Names
) -> None:
    """Two applications with one topic prefix and two stream prefixes: the second one's
    wait stream cannot take the wait subjects; the error names the stream holding them and
    the two settings, not a bounded context named 'wait'."""
    first = notifier(nats_url, names)
    second = NatsWaitNotifier(
        NatsSettings(servers=[nats_url], stream_prefix=names.stream_prefix + "other_"),
        topic_prefix=names.topic_prefix,
    )
    try:
        await first.start(Received().sink)
        with pytest.raises(StreamSubjectsTakenError) as raised:
            await second.start(Received().sink)
        text = str(raised.value)
        assert f"cannot create NATS stream {second.stream!r}" in text, text
        assert f"stream {first.stream!r} holds {names.topic_prefix}wait.*" in text, text
        assert f"WOW_MESSAGING__TOPIC_PREFIX (now {names.topic_prefix!r})" in text, text
        assert f"WOW_NATS__STREAM_PREFIX, now {names.stream_prefix + 'other_'!r}" in text, text
        assert "bounded context" not in text, text
    finally:
        await second.close()
        await first.close()


async def eventually_true(condition: Callable[[], bool], what: str, timeout: float = 5) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
