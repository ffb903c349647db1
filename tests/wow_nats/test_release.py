"""A released record (its processing failed, or its consumer stops) is nak'd with a delay
growing with its delivery count: JetStream delivers it again to the group in seconds,
not after the consumer's ack wait; against the real server.

Timing asserts are lower bounds the server enforces (the release delay) and upper
bounds far below the ack wait, so a loaded machine does not make them flaky.

Redeliveries are timed to fall in the middle of a pull request, not at its expiry
(``fetch_timeout``, 1 s by default): NATS before 2.10.14 (nats-server #5305) may deliver a
record whose redelivery meets the expiry of the only waiting pull request again later,
with its delivery count going backwards (1 instead of 2). An ack wait of 3.5 s keeps the
ack wait's redelivery half a second from the expiries of the 1 s pull requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

from tests.release_outage import TallyAggregate, processed_after_two_failed_appends
from tests.wow_nats.conftest import MakeTransport, Names, delete_streams
from tests.wow_nats.support import WAIT, eventually, message, next_record, opened
from tests.wow_nats.test_nats_dead_letters import dead_letters
from wow_core.eventsourcing.in_memory import InMemoryEventStore
from wow_core.messaging.contract import MessageSubscription
from wow_core.model import NamedAggregate
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import SettingsError, WowSettings
from wow_core.testing.support import conformance_codec, event_stream
from wow_core.transport import DefaultTopicNaming, ReleasingRecord
from wow_core.transport.bus import TransportDomainEventBus
from wow_nats import NatsRecord, NatsSettings, NatsTransport
from wow_nats.settings import SECTION

needs_nats = pytest.mark.nats


def release_tasks() -> list[asyncio.Task[Any]]:
    """The tasks sending a release's nak, still running."""
    return [task for task in asyncio.all_tasks() if task.get_name().startswith("wow-nats-release:")]


# -- the delay ----------------------------------------------------------------------------


def test_the_delay_doubles_per_delivery_up_to_the_ack_wait() -> None:
    settings = NatsSettings(release_delay=0.5, ack_wait=5)
    assert [settings.release_delay_for(n) for n in (1, 2, 3, 4, 5, 100)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert settings.release_delay_for(0) == 0.5, "a count below 1 is the first delivery"
    assert NatsSettings().release_delay == 1.0, "on by default"
    assert NatsSettings().release_delay_for(3) == 4.0
    assert NatsSettings(release_delay=60, ack_wait=30).release_delay_for(1) == 30.0, "never past the ack wait"
    assert NatsSettings(release_delay=None).release_delay_for(1) is None, "unset: left to the ack wait"
    assert NatsSettings(release_delay="").release_delay is None
    with pytest.raises(ValueError, match="release_delay"):
        NatsSettings(release_delay=0)


def section(monkeypatch: pytest.MonkeyPatch, value: str) -> NatsSettings:
    monkeypatch.setenv("WOW_NATS__RELEASE_DELAY", value)
    return WowSettings.load().section(SECTION, NatsSettings)


@pytest.mark.parametrize(("value", "expected"), [("2.5", 2.5), ("0.01", 0.01), ("", None), ("null", None)])
def test_the_release_delay_is_read_from_its_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: float | None
) -> None:
    assert section(monkeypatch, value).release_delay == expected


@pytest.mark.parametrize("value", ["0", "0.001", "-1", "soon", "inf", "86401"])
def test_a_wrong_release_delay_names_its_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(SettingsError, match="WOW_NATS__RELEASE_DELAY"):
        section(monkeypatch, value)


# -- release never raises -------------------------------------------------------------------


class FailingMsg:
    """A message whose nak fails (a connection that is gone)."""

    naks: list[float | None]

    def __init__(self) -> None:
        self.naks = []

    async def nak(self, delay: float | None = None) -> None:
        self.naks.append(delay)
        raise nats.errors.ConnectionClosedError


class Releases:
    """A releaser keeping the tasks, as a receiver does."""

    def __init__(self, delay: float | None = 0.5, fails: bool = False) -> None:
        self.delay = delay
        self.fails = fails
        self.tasks: list[asyncio.Task[None]] = []

    def release_delay(self, record: NatsRecord) -> float | None:
        if self.fails:
            raise RuntimeError("the receiver is broken")
        return self.delay

    def track(self, task: asyncio.Task[None]) -> None:
        self.tasks.append(task)


def record_of(msg: Any, releaser: Releases) -> NatsRecord:
    return NatsRecord(
        msg,
        topic="t.ctx.agg.command",
        key="k",
        payload="{}",
        timestamp=0,
        position="s:1",
        delivery_count=1,
        sequence=1,
        releaser=releaser,
    )


async def test_a_nak_that_fails_is_logged_and_the_release_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    msg, releases = FailingMsg(), Releases(delay=0.5)
    record = record_of(msg, releases)
    with caplog.at_level(logging.WARNING, logger="wow_nats"):
        record.release()
        assert record.settled, "settled at once, as a nak settles it"
        [task] = releases.tasks
        await asyncio.wait_for(task, 5)
    assert msg.naks == [0.5]
    assert "delivered again after the ack wait" in caplog.text
    record.release()
    assert len(releases.tasks) == 1, "released once"


async def test_a_receiver_that_fails_leaves_the_record_to_the_ack_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    msg, releases = FailingMsg(), Releases(fails=True)
    record = record_of(msg, releases)
    with caplog.at_level(logging.WARNING, logger="wow_nats"):
        record.release()
    assert not record.settled
    assert (msg.naks, releases.tasks) == ([], [])
    assert "releasing" in caplog.text


def test_a_release_outside_a_running_loop_does_not_raise() -> None:
    msg, releases = FailingMsg(), Releases(delay=0.5)
    record = record_of(msg, releases)
    record.release()
    assert not record.settled
    assert releases.tasks == []


# -- against the server -----------------------------------------------------------------


@needs_nats
async def test_a_released_record_comes_back_after_the_release_delay_not_the_ack_wait(
    make_transport: MakeTransport, names: Names
) -> None:
    ack_wait = 10.0
    transport = make_transport(release_delay=0.2, ack_wait=ack_wait)
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "k", "x"))
    records = aiter(receiver)
    first = await next_record(records)
    assert isinstance(first, ReleasingRecord)
    released = time.monotonic()
    first.release()
    assert first.settled, "settled for the receiver as a nak is"
    first.release()
    assert len(release_tasks()) == 1, "a second release does nothing"
    await first.ack()  # a no-op: handed back already
    again = await next_record(records, timeout=ack_wait / 2)
    waited = time.monotonic() - released
    assert (again.position, again.payload, again.delivery_count) == (first.position, "x", 2)
    assert waited >= 0.15, f"after the release delay of 0.2 s, not at once: {waited:.3f}"
    await again.ack()
    assert not release_tasks()


@needs_nats
async def test_a_record_released_again_comes_back_later_each_time(
    make_transport: MakeTransport, names: Names
) -> None:
    ack_wait = 10.0
    transport = make_transport(release_delay=0.2, ack_wait=ack_wait)
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "k"))
    records = aiter(receiver)
    record = await next_record(records)
    waits: list[float] = []
    for _ in range(3):
        released = time.monotonic()
        record.release()
        record = await next_record(records, timeout=ack_wait / 2)
        waits.append(time.monotonic() - released)
    assert record.delivery_count == 4, "each redelivery counted"
    # 0.2 s, then 0.4 s, then 0.8 s (the server holds each back at least that long)
    for waited, delay in zip(waits, (0.2, 0.4, 0.8), strict=True):
        assert waited >= 0.8 * delay, f"doubled per delivery: {waits}"
    await record.ack()


@needs_nats
async def test_a_record_released_past_max_deliver_ends_in_the_dead_letter(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport(release_delay=0.05, ack_wait=10.0, max_deliver=3)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send(message(topic, "poison", '{"never":"passes"}'))
    records = aiter(receiver)
    for delivery in (1, 2, 3):
        record = await next_record(records, timeout=5)
        assert (record.key, record.delivery_count) == ("poison", delivery)
        record.release()
    stream = transport.layout.stream(topic)
    [letter] = await dead_letters(raw_js, stream, topic, 1)
    assert letter.data == b'{"never":"passes"}'
    assert letter.headers is not None
    assert (letter.headers["Wow-Dlq-Reason"], letter.headers["Wow-Dlq-Deliveries"]) == ("max_deliver", "4")

    async def terminated() -> bool:
        info = await raw_js.consumer_info(stream, transport.layout.consumer(group, topic))
        return bool(info.num_ack_pending == 0)

    await eventually(terminated, WAIT, "the poison record terminated for the group")
    with pytest.raises(TimeoutError):
        await next_record(records, timeout=0.5)


@needs_nats
async def test_a_release_after_the_ack_does_nothing(
    make_transport: MakeTransport, names: Names, raw_js: nats.js.JetStreamContext
) -> None:
    transport = make_transport(release_delay=0.05, ack_wait=5.0)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send(message(topic, "k"))
    records = aiter(receiver)
    record = await next_record(records)
    await record.ack()
    record.release()
    assert not release_tasks(), "nothing to send"
    with pytest.raises(TimeoutError):
        await next_record(records, timeout=1.0)  # a release would bring it back after 0.05 s
    stream = transport.layout.stream(topic)

    async def acknowledged() -> bool:
        info = await raw_js.consumer_info(stream, transport.layout.consumer(group, topic))
        return bool(info.num_ack_pending == 0 and info.num_redelivered == 0)

    await eventually(acknowledged, WAIT, "the record acknowledged, never redelivered")


@needs_nats
async def test_without_a_release_delay_a_released_record_waits_for_the_ack_wait(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport(release_delay=None, ack_wait=3.5)
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "k"))
    records = aiter(receiver)
    record = await next_record(records)
    received = time.monotonic()
    record.release()
    assert not record.settled, "left alone"
    assert not release_tasks()
    with pytest.raises(TimeoutError):
        await next_record(records, timeout=1.0)
    again = await next_record(records, timeout=WAIT)
    assert (again.position, again.delivery_count) == (record.position, 2)
    assert time.monotonic() - received >= 2.5, "after the ack wait of 3.5 s"
    await again.ack()


@needs_nats
async def test_the_release_of_a_delivery_a_later_one_superseded_does_nothing(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport(release_delay=0.1, ack_wait=3.5)
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    await transport.send(message(topic, "k"))
    records = aiter(receiver)
    first = await next_record(records)
    second = await next_record(records, timeout=WAIT)  # the ack wait expired meanwhile
    assert (second.position, second.delivery_count) == (first.position, 2)
    first.release()  # a nak now would deliver it a third time while the second is processed
    assert not first.settled
    with pytest.raises(TimeoutError):
        await next_record(records, timeout=0.8)
    await second.ack()


@needs_nats
async def test_a_record_released_while_its_receiver_closes_is_handed_back_at_once(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport(release_delay=30.0, ack_wait=60.0, fetch_timeout=0.5)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send(message(topic, "k", "x"))
    record = await next_record(aiter(receiver))
    closing = asyncio.ensure_future(receiver.close())
    await asyncio.sleep(0)  # the close began
    assert receiver.closed
    record.release()
    assert not record.settled, "left to the close"
    await asyncio.wait_for(closing, WAIT)
    assert record.settled, "handed back by the close"
    successor = await opened(transport, group, [topic])
    again = await next_record(aiter(successor), timeout=WAIT)
    # at once: not after the release delay of 30 s
    assert (again.payload, again.delivery_count) == ("x", 2)
    await again.ack()


@needs_nats
async def test_a_release_just_before_the_close_is_sent_once_with_its_delay(
    make_transport: MakeTransport, names: Names
) -> None:
    # the closing receiver's last pull request (0.5 s) ends before the delay of 1.5 s
    transport = make_transport(release_delay=1.5, ack_wait=30.0, fetch_timeout=0.5)
    topic, group = names.topic(), names.group()
    receiver = await opened(transport, group, [topic])
    await transport.send(message(topic, "k", "x"))
    record = await next_record(aiter(receiver))
    released = time.monotonic()
    record.release()
    assert len(release_tasks()) == 1
    await asyncio.wait_for(receiver.close(), WAIT)  # sends the nak, does not hand it back again
    assert not release_tasks()
    successor = await opened(transport, group, [topic])
    again = await next_record(aiter(successor), timeout=WAIT)
    assert (again.payload, again.position) == ("x", record.position)
    assert time.monotonic() - released >= 1.2, "after the release delay, not the close's hand-back"
    await again.ack()


# -- through the core ---------------------------------------------------------------------


@needs_nats
async def test_a_released_exchange_of_the_bus_comes_back_in_seconds(
    make_transport: MakeTransport, names: Names, nats_url: str
) -> None:
    """``make_transport`` (unused otherwise) deletes the test's streams afterwards."""
    ack_wait = 10.0
    settings = NatsSettings(
        servers=[nats_url],
        stream_prefix=names.stream_prefix,
        release_delay=0.2,
        ack_wait=ack_wait,
        fetch_timeout=0.5,
    )
    transport = NatsTransport(
        settings, naming=DefaultTopicNaming(names.topic_prefix), topic_prefix=names.topic_prefix
    )
    bus = TransportDomainEventBus(transport, conformance_codec())
    named = NamedAggregate("ctx", "note")
    try:
        receiver = bus.receiver(MessageSubscription.of(names.group(), [named]))
        await asyncio.wait_for(receiver.ready(), WAIT)
        receiver.open_processing()
        sent = event_stream(named, "a-1")
        await bus.send(sent)
        exchanges = aiter(receiver)
        first = await asyncio.wait_for(anext(exchanges), WAIT)
        assert isinstance(first.record, ReleasingRecord)
        assert receiver.in_flight == 1
        first.release()
        assert receiver.in_flight == 0
        again = await asyncio.wait_for(anext(exchanges), ack_wait / 2)
        assert again.message.id == sent.id
        assert (again.record.position, again.record.delivery_count) == (first.record.position, 2)
        await again.ack()
    finally:
        await bus.close()
        await transport.close()


ACK_WAIT = 30.0


@pytest.fixture
async def service(nats_url: str, names: Names, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[WowRuntime]:
    for name, value in {
        "WOW_TRANSPORT": "nats",
        "WOW_NATS__SERVERS": nats_url,
        "WOW_NATS__STREAM_PREFIX": names.stream_prefix,
        "WOW_NATS__FETCH_TIMEOUT": "0.5",
        "WOW_NATS__RELEASE_DELAY": "0.2",
        "WOW_NATS__ACK_WAIT": str(ACK_WAIT),
        "WOW_MESSAGING__TOPIC_PREFIX": names.topic_prefix,
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": "false",
    }.items():
        monkeypatch.setenv(name, value)
    try:
        made = WowApp("nats-release", aggregates=[TallyAggregate]).runtime(WowSettings())
        async with made:
            yield made
    finally:
        await delete_streams(nats_url, names.stream_prefix)


@needs_nats
async def test_a_command_whose_append_failed_in_an_outage_is_processed_seconds_later(
    service: WowRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await processed_after_two_failed_appends(
        service,
        monkeypatch,
        InMemoryEventStore,
        ACK_WAIT / 2,
        "in seconds, not after the ack wait",
    )
