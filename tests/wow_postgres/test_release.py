"""A released record (its consumer did not finish it) goes back to its group after a delay
that grows with its delivery count, counted, while its live receiver goes on; the key's
later records do not overtake it. Against the shared PostgreSQL server.

Before ``PostgresRecord.release()``, a record released by a live receiver stayed leased to
it (every lease renewal renewed it) and came back only when the receiver closed or died,
while the key's later records went on past it
(``test_a_record_released_by_a_live_receiver_comes_back_to_the_group_after_the_delay``
failed: no redelivery within three lease times, the key's next record first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.release_outage import TallyAggregate, processed_after_two_failed_appends
from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings
from wow_core.testing.support import eventually
from wow_core.transport import ReleasingRecord, TransportMessage
from wow_postgres import (
    PostgresEventStore,
    PostgresReceiver,
    PostgresRecord,
    PostgresSettings,
    PostgresTransport,
)
from wow_postgres.settings import SECTION
from wow_postgres.transport import RELEASED

pytestmark = pytest.mark.postgres

TIMEOUT = 60
"""The bound of every wait for a record that must come (a loaded machine is slow, not stuck)."""

Make = Callable[..., PostgresTransport]


@pytest.fixture
async def make_transport(settings_for: Callable[..., PostgresSettings]) -> AsyncIterator[Make]:
    made: list[PostgresTransport] = []

    def make(**overrides: object) -> PostgresTransport:
        values: dict[str, object] = {"pool_max_size": 2, "poll_interval": 0.2}
        values.update(overrides)
        transport = PostgresTransport(settings_for(**values))
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await asyncio.wait_for(transport.close(), TIMEOUT)


def _topic() -> str:
    return f"wow.release{uuid.uuid4().hex[:6]}.note.command"


async def _opened(transport: PostgresTransport, topic: str, group: str = "g") -> PostgresReceiver:
    receiver = transport.open(group, [topic])
    await asyncio.wait_for(receiver.ready(), TIMEOUT)
    receiver.open_processing()
    return receiver


async def _send(transport: PostgresTransport, topic: str, key: str, payload: str) -> None:
    await transport.send(TransportMessage(topic, key, payload, 1))


async def _take(receiver: PostgresReceiver, count: int, timeout: float = TIMEOUT) -> list[PostgresRecord]:
    got: list[PostgresRecord] = []

    async def take() -> None:
        async for record in receiver:
            got.append(record)
            if len(got) == count:
                return

    await asyncio.wait_for(take(), timeout)
    return got


async def _nothing_within(receiver: PostgresReceiver, seconds: float) -> None:
    """Nothing is delivered to ``receiver`` for ``seconds`` (a cancelled wait takes nothing)."""
    coming = asyncio.ensure_future(anext(aiter(receiver)))
    done, _ = await asyncio.wait({coming}, timeout=seconds)
    coming.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await coming
    assert not done, f"delivered: {coming.result() if done else None}"


async def _row(transport: PostgresTransport, row_id: int) -> dict[str, Any] | None:
    pool = await transport.pool()
    row = await pool.fetchrow(
        f"SELECT owner, lease_until > clock_timestamp() AS waiting, delivery_count, last_error "
        f"FROM {transport.names.queue} WHERE id = $1",
        row_id,
    )
    return None if row is None else dict(row)


async def _handed_back(transport: PostgresTransport, row_id: int) -> None:
    """Wait until the release of ``row_id`` committed: unleased, waiting for its delay."""

    async def waiting() -> bool:
        row = await _row(transport, row_id)
        return row is not None and row["owner"] is None and bool(row["waiting"])

    await eventually(waiting, TIMEOUT, "the released row to be handed back", every=0.02)


# -- the delay ----------------------------------------------------------------------------


def test_the_delay_doubles_per_delivery_up_to_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PostgresSettings().release_delay == 1.0
    settings = PostgresSettings(release_delay=0.5)
    assert [settings.release_delay_for(n) for n in (1, 2, 3, 4, 5, 6, 7, 8, 100, 10**6)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        32.0,
        60.0,
        60.0,
        60.0,
    ]
    assert PostgresSettings(release_delay=90).release_delay_for(3) == 90.0, "a longer delay is its own cap"
    assert PostgresSettings(release_delay="").release_delay_for(1) is None, "unset: release() does nothing"
    with pytest.raises(ValueError, match="release_delay"):
        PostgresSettings(release_delay=0)
    monkeypatch.setenv("WOW_POSTGRES__RELEASE_DELAY", "2.5")
    assert WowSettings.load().section(SECTION, PostgresSettings).release_delay == 2.5
    monkeypatch.setenv("WOW_POSTGRES__RELEASE_DELAY", "")
    assert WowSettings.load().section(SECTION, PostgresSettings).release_delay is None


# -- a live receiver ----------------------------------------------------------------------


async def test_a_record_released_by_a_live_receiver_comes_back_to_the_group_after_the_delay(
    make_transport: Make,
) -> None:
    """The defect: the released row stayed leased to its live receiver (renewed with the
    others) and the key's next record went first. Now it comes back after ``release_delay``,
    well within three lease times, counted, before the key's next record."""
    lease = 3.0
    transport = make_transport(lease_time=lease, release_delay=0.3)
    topic = _topic()
    receiver = await _opened(transport, topic)
    await _send(transport, topic, "k", "one")
    [first] = await _take(receiver, 1)
    assert isinstance(first, ReleasingRecord)
    released = time.monotonic()
    first.release()
    await _send(transport, topic, "k", "two")
    [again] = await _take(receiver, 1, timeout=3 * lease)
    waited = time.monotonic() - released
    assert (again.payload, again.position, again.delivery_count) == ("one", first.position, 2)
    assert again.last_error == RELEASED
    assert waited >= 0.3, f"not before the release delay: {waited:.2f}s"
    [two] = await _take(receiver, 1)
    assert (two.payload, two.delivery_count) == ("two", 1)
    await again.ack()
    await two.ack()


async def test_each_release_of_a_record_waits_longer_than_the_last(make_transport: Make) -> None:
    transport = make_transport(release_delay=0.2, lease_time=30)
    topic = _topic()
    receiver = await _opened(transport, topic)
    await _send(transport, topic, "k", "again")
    [record] = await _take(receiver, 1)
    waits: list[float] = []
    for _ in range(3):
        released = time.monotonic()
        record.release()
        [record] = await _take(receiver, 1)
        waits.append(time.monotonic() - released)
        assert record.payload == "again"
    assert record.delivery_count == 4, "each redelivery counted"
    for wait, delay in zip(waits, (0.2, 0.4, 0.8), strict=True):
        assert wait >= delay, f"delays 0.2, 0.4, 0.8 s: waited {waits}"
    assert max(waits) < 20, f"seconds, not the 30 s lease: {waits}"
    await record.ack()


async def test_a_record_released_past_max_deliveries_ends_in_the_dead_letter_topic(
    make_transport: Make,
) -> None:
    """Released at every delivery: after the third (``max_deliveries``) it goes to
    ``<topic>.dlq`` with its deliveries and the release as its last error, and the key's
    next record follows in the group."""
    transport = make_transport(release_delay=0.05, max_deliveries=3, lease_time=1.5)  # renewals: 0.5 s
    topic = _topic()
    dead = await _opened(transport, topic + ".dlq", "d")
    receiver = await _opened(transport, topic)
    await _send(transport, topic, "k", "poison")
    await _send(transport, topic, "k", "next")
    for delivery in (1, 2, 3):
        [record] = await _take(receiver, 1)
        assert (record.payload, record.delivery_count) == ("poison", delivery)
        record.release()
    [following] = await _take(receiver, 1)
    assert (following.payload, following.delivery_count) == ("next", 1)
    [letter] = await _take(dead, 1)
    assert (letter.topic, letter.key, letter.payload) == (topic + ".dlq", "k", "poison")
    assert (letter.failed_deliveries, letter.last_error) == (3, RELEASED)
    await letter.ack()
    await following.ack()
    await _nothing_within(receiver, 1.0)


@pytest.mark.parametrize("when", ["at_once", "after_the_hand_back"])
async def test_an_ack_after_the_release_cancels_it(make_transport: Make, when: str) -> None:
    transport = make_transport(release_delay=0.3, ack_confirmed=True)
    topic = _topic()
    receiver = await _opened(transport, topic)
    await _send(transport, topic, "k", "done")
    [record] = await _take(receiver, 1)
    record.release()
    if when == "after_the_hand_back":
        await _handed_back(transport, record.row_id)
    await record.ack()
    assert await _row(transport, record.row_id) is None, "acknowledged: deleted, waiting or not"
    await _nothing_within(receiver, 1.5)
    await _send(transport, topic, "k", "after")  # the key goes on
    [after] = await _take(receiver, 1)
    assert (after.payload, after.delivery_count) == ("after", 1)


async def test_a_release_after_the_ack_does_nothing(
    make_transport: Make, caplog: pytest.LogCaptureFixture
) -> None:
    transport = make_transport(release_delay=0.1, ack_confirmed=True)
    topic = _topic()
    receiver = await _opened(transport, topic)
    await _send(transport, topic, "k", "done")
    [record] = await _take(receiver, 1)
    await record.ack()
    with caplog.at_level(logging.WARNING, logger="wow_postgres"):
        record.release()
        record.release()
        await _nothing_within(receiver, 1.0)
    assert await _row(transport, record.row_id) is None
    assert not [r for r in caplog.records if r.name == "wow_postgres"], caplog.text


async def test_a_release_without_a_release_delay_leaves_the_record_with_its_receiver(
    make_transport: Make,
) -> None:
    """``WOW_POSTGRES__RELEASE_DELAY`` unset: as without ``release()``, the record stays
    leased to its receiver until it closes (hand-back) or dies (lease expiry)."""
    transport = make_transport(release_delay=None)
    topic = _topic()
    receiver = await _opened(transport, topic)
    await _send(transport, topic, "k", "kept")
    [record] = await _take(receiver, 1)
    record.release()
    await _nothing_within(receiver, 1.0)
    row = await _row(transport, record.row_id)
    assert row is not None
    assert row["owner"] == receiver.owner, "still leased to its receiver"


@pytest.mark.parametrize("when", ["queued", "handed_back"])
async def test_a_receiver_that_closes_hands_its_released_record_back_to_the_group_at_once(
    make_transport: Make, when: str
) -> None:
    transport = make_transport(release_delay=30, lease_time=30)
    topic = _topic()
    receiver = await _opened(transport, topic)
    await _send(transport, topic, "k", "x")
    [record] = await _take(receiver, 1)
    record.release()
    if when == "handed_back":
        await _handed_back(transport, record.row_id)
    began = time.monotonic()
    await asyncio.wait_for(receiver.close(), TIMEOUT)
    assert time.monotonic() - began < 10, "the close does not wait for the release delay"
    again = await _opened(make_transport(), topic)
    [back] = await _take(again, 1, timeout=20)  # not the 30 s release delay
    assert (back.payload, back.position, back.delivery_count) == ("x", record.position, 2)
    await back.ack()


# -- the key's order ----------------------------------------------------------------------


async def test_the_key_s_later_records_do_not_overtake_the_released_one(make_transport: Make) -> None:
    """``k|1`` was read ahead (claimed, not handed to the consumer yet) and ``k|2`` is sent
    after the release: both come after ``k|0``'s redelivery, ``k|1`` uncounted. The other
    key is not held back, and the key stays with the member that released it through the
    lease renewals of the wait (the group's other member gets none of it)."""
    transport = make_transport(release_delay=4.5, lease_time=6.0)  # two renewals meanwhile
    topic = _topic()
    member = await _opened(transport, topic)
    for key, n in (("k", 0), ("k", 1), ("j", 0)):
        await _send(transport, topic, key, f"{key}|{n}")
    [first] = await _take(member, 1)
    assert first.payload == "k|0"

    async def read_ahead() -> bool:
        return len(member._buffer) == 2  # k|1 and j|0 claimed behind it

    await eventually(read_ahead, TIMEOUT, "the key's next record to be read ahead")
    other = await _opened(make_transport(lease_time=6.0), topic)
    first.release()
    await _send(transport, topic, "k", "k|2")
    await _send(transport, topic, "j", "j|1")
    got = await _take(member, 5)
    assert got[0].payload == "j|0", "another key is not held back"
    ks = [(r.payload, r.delivery_count) for r in got if r.key == "k"]
    assert ks == [("k|0", 2), ("k|1", 1), ("k|2", 1)], "in order, the read-ahead one uncounted"
    assert [r.payload for r in got if r.key == "j"] == ["j|0", "j|1"]
    await _nothing_within(other, 0.5)
    for record in got:
        await record.ack()


class _ReleasingDuringAClaim(PostgresTransport):
    """Runs ``during_claim`` once, inside the next claim: after the receiver looked at what
    it had to hand back, before the claim's statements."""

    during_claim: Callable[[], Awaitable[None]] | None = None

    async def run(self, what: str, operation: Any) -> Any:
        hook = self.during_claim
        if what != "claim" or hook is None:
            return await super().run(what, operation)
        self.during_claim = None

        async def claiming(connection: Any) -> Any:
            await hook()
            return await operation(connection)

        return await super().run(what, claiming)


async def test_a_record_claimed_while_its_key_s_release_was_on_its_way_waits_behind_it(
    settings_for: Callable[..., PostgresSettings], make_transport: Make
) -> None:
    """``k|0`` is released while a claim runs, and that claim takes ``k|1`` (the release is
    not in the database yet): ``k|1`` is handed back with it, and comes after it."""
    transport = _ReleasingDuringAClaim(settings_for(pool_max_size=2, poll_interval=0.2, release_delay=0.5))
    try:
        sender = make_transport()
        topic = _topic()
        receiver = await _opened(transport, topic)
        await _send(sender, topic, "k", "k|0")
        [first] = await _take(receiver, 1)

        async def release_then_send() -> None:
            first.release()
            await _send(sender, topic, "k", "k|1")  # committed before this claim's statements

        transport.during_claim = release_then_send
        got = await _take(receiver, 2)
        assert transport.during_claim is None
        assert [(r.payload, r.delivery_count) for r in got] == [("k|0", 2), ("k|1", 1)]
        for record in got:
            await record.ack()
    finally:
        await asyncio.wait_for(transport.close(), TIMEOUT)


async def test_a_key_whose_member_died_goes_on_with_the_released_record_after_its_delay(
    make_transport: Make,
) -> None:
    """The wait is in the row: the member that released ``k|0`` stops (no renewal, no
    hand-back) and its leases expire; the other member takes the key, and delivers ``k|0``
    (counted) before ``k|1``, not before the delay."""
    transport = make_transport(release_delay=2.0, lease_time=30)
    topic = _topic()
    dying = await _opened(transport, topic)
    await _send(transport, topic, "k", "k|0")
    [first] = await _take(dying, 1)
    first.release()
    released = time.monotonic()
    await _handed_back(transport, first.row_id)
    for task in dying._tasks:  # it hangs: no claim, no renewal, no hand-back
        task.cancel()
    pool = await transport.pool()
    await pool.execute(
        f"UPDATE {transport.names.keys} SET lease_until = clock_timestamp() - interval '1 second'"
    )
    survivor = await _opened(make_transport(lease_time=30), topic)
    await _send(transport, topic, "k", "k|1")
    got = await _take(survivor, 2)
    assert time.monotonic() - released >= 2.0, "not before the release delay"
    assert [(r.payload, r.delivery_count) for r in got] == [("k|0", 2), ("k|1", 1)]
    for record in got:
        await record.ack()


# -- a command whose processing failed, end to end ----------------------------------------


@pytest.fixture
async def service(schema: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[WowRuntime]:
    for name in [k for k in os.environ if k.startswith("WOW_")]:
        monkeypatch.delenv(name)
    for name, value in {
        "WOW_TRANSPORT": "postgres",
        "WOW_EVENTSOURCING__STORE": "postgres",
        "WOW_POSTGRES__DSN": POSTGRES_DSN,
        "WOW_POSTGRES__SCHEMA_NAME": schema,
        "WOW_POSTGRES__POLL_INTERVAL": "0.2",
        "WOW_POSTGRES__RELEASE_DELAY": "0.2",
        "WOW_POSTGRES__LEASE_TIME": "60",
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": "false",
    }.items():
        monkeypatch.setenv(name, value)
    made = WowApp("postgres-release", aggregates=[TallyAggregate]).runtime(WowSettings())
    async with made:
        yield made


async def test_a_command_whose_append_failed_in_an_outage_is_processed_seconds_later(
    service: WowRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the core's ``TransportCommandBus``: the command's processing fails twice (the
    event store unreachable), the exchange releases the record each time, and it is
    processed within seconds, not after the 60 s lease (nor never, as before)."""
    await processed_after_two_failed_appends(
        service,
        monkeypatch,
        PostgresEventStore,
        30,
        "within seconds, not after the lease",
    )
