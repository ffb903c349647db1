"""PostgresTransport beyond the conformance suite: a member killed while holding records,
the lease, records sent before any group, bad input."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.messaging import BusClosedError, MessageSubscription
from wow_core.model import NamedAggregate
from wow_core.testing.support import command, conformance_codec, eventually
from wow_core.transport import TransportMessage
from wow_core.transport.bus import TransportCommandBus
from wow_postgres import PostgresReceiver, PostgresRecord, PostgresSettings, PostgresTransport

pytestmark = pytest.mark.postgres

TIMEOUT = 60


@pytest.fixture
async def make_transport(
    settings_for: Callable[..., PostgresSettings],
) -> AsyncIterator[Callable[..., PostgresTransport]]:
    made: list[PostgresTransport] = []

    def make(**overrides: object) -> PostgresTransport:
        values: dict[str, object] = {"pool_max_size": 2, "poll_interval": 0.2}
        values.update(overrides)
        transport = PostgresTransport(settings_for(**values))
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.close()


async def _take(receiver: PostgresReceiver, count: int) -> list[PostgresRecord]:
    got: list[PostgresRecord] = []

    async def take() -> None:
        async for record in receiver:
            got.append(record)
            if len(got) == count:
                return

    await asyncio.wait_for(take(), TIMEOUT)
    return got


def _message(topic: str, key: str, payload: str) -> TransportMessage:
    return TransportMessage(topic, key, payload, 1)


@pytest.mark.slow
async def test_a_killed_member_s_records_go_to_another_after_its_lease_in_order(
    make_transport: Callable[..., PostgresTransport], schema: str
) -> None:
    """The member is SIGKILLed holding 6 records of 2 keys: nothing hands them back. Its
    lease (2 s) expires and the surviving member takes them, in each key's order, with
    delivery count 2; records sent meanwhile follow them."""
    topic, group = f"wow.crash{uuid.uuid4().hex[:6]}.note.command", "crash.group"
    sender = make_transport()
    await sender.start()
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("crash_consumer.py")),
        POSTGRES_DSN,
        schema,
        group,
        topic,
        "6",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        assert await asyncio.wait_for(worker.stdout.readline(), TIMEOUT) == b"ready\n"
        for n in range(6):
            await sender.send(_message(topic, f"k{n % 2}", f"k{n % 2}|{n}"))
        held = (await asyncio.wait_for(worker.stdout.readline(), TIMEOUT)).decode().split()
        assert held[0] == "held"
        assert len(held) == 7
        survivor = make_transport(lease_time=2.0).open(group, [topic])
        await asyncio.wait_for(survivor.ready(), TIMEOUT)
        survivor.open_processing()
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
        for n in range(6, 8):
            await sender.send(_message(topic, f"k{n % 2}", f"k{n % 2}|{n}"))
        records = await _take(survivor, 8)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    for key in ("k0", "k1"):
        mine = [r for r in records if r.key == key]
        assert [r.payload for r in mine] == [f"{key}|{n}" for n in range(8) if f"k{n % 2}" == key]
        assert [r.delivery_count for r in mine] == [2, 2, 2, 1]
    for record in records:
        await record.ack()


async def test_records_sent_before_any_group_go_to_the_first_group_only(
    make_transport: Callable[..., PostgresTransport],
) -> None:
    transport = make_transport()
    topic = f"wow.early{uuid.uuid4().hex[:6]}.note.command"
    for n in range(3):
        await transport.send(_message(topic, "k", f"early-{n}"))
    first = transport.open("first", [topic])
    await first.ready()
    second = transport.open("second", [topic])
    await second.ready()
    first.open_processing()
    second.open_processing()
    await transport.send(_message(topic, "k", "later"))
    assert [r.payload for r in await _take(first, 4)] == ["early-0", "early-1", "early-2", "later"]
    assert [r.payload for r in await _take(second, 1)] == ["later"]


async def test_an_acknowledged_record_is_gone_and_a_held_key_waits_for_its_holder(
    make_transport: Callable[..., PostgresTransport],
) -> None:
    transport = make_transport()
    topic = f"wow.keys{uuid.uuid4().hex[:6]}.note.command"
    holder = transport.open("g", [topic])
    await holder.ready()
    holder.open_processing()
    await transport.send(_message(topic, "k", "one"))
    [one] = await _take(holder, 1)
    other = make_transport(max_deliveries=1, lease_time=0.9).open("g", [topic])
    await other.ready()
    other.open_processing()
    await transport.send(_message(topic, "k", "two"))  # k is held: it goes to the holder too
    [two] = await _take(holder, 1)
    assert two.payload == "two"
    await one.ack()
    await two.ack()
    await holder.close()
    await transport.send(_message(topic, "k", "three"))
    [three] = await _take(other, 1)
    assert (three.payload, three.delivery_count) == ("three", 1)


async def test_bad_input_is_refused(make_transport: Callable[..., PostgresTransport]) -> None:
    transport = make_transport()
    with pytest.raises(ValueError, match="no topic"):
        transport.open("g", [])
    with pytest.raises(ValueError, match="group name"):
        transport.open("", ["t"])
    await transport.close()
    with pytest.raises(BusClosedError):
        transport.open("g", ["t"])


class _LosingTheFirstClaimAnswer(PostgresTransport):
    """The first claim commits, then its connection breaks before the answer arrives."""

    lost = False

    async def run(self, what: str, operation: Any) -> Any:
        if what != "claim":
            return await super().run(what, operation)

        async def losing(connection: Any) -> Any:
            result = await operation(connection)
            if not self.lost:
                self.lost = True
                raise asyncpg.ConnectionDoesNotExistError("the claim's answer was lost")
            return result

        return await super().run(what, losing)


async def test_a_claim_whose_answer_was_lost_loses_no_record(
    settings_for: Callable[..., PostgresSettings],
) -> None:
    """The retried claim hands back what the lost attempt leased, so it comes next, in order."""
    transport = _LosingTheFirstClaimAnswer(
        settings_for(pool_max_size=2, poll_interval=0.2, retry_backoff=0.01)
    )
    try:
        topic = f"wow.lost{uuid.uuid4().hex[:6]}.note.command"
        receiver = transport.open("g", [topic])
        await receiver.ready()
        for n in range(3):
            await transport.send(_message(topic, "k", f"r{n}"))
        receiver.open_processing()
        records = await _take(receiver, 3)
        assert transport.lost
        assert [(r.payload, r.delivery_count) for r in records] == [("r0", 1), ("r1", 1), ("r2", 1)]
    finally:
        await transport.close()


async def test_key_rows_are_let_go_and_forgotten_once_their_records_are_acknowledged(
    make_transport: Callable[..., PostgresTransport],
) -> None:
    """The key table follows the keys in use: a receiver renewing its leases lets go of the
    keys it holds no record of and deletes those no record needs."""
    transport = make_transport(lease_time=0.6)  # renewals every 0.2 s
    topic = f"wow.forget{uuid.uuid4().hex[:6]}.note.command"
    receiver = transport.open("g", [topic])
    await receiver.ready()
    receiver.open_processing()
    for n in range(5):
        await transport.send(_message(topic, f"k{n}", f"r{n}"))
    for record in await _take(receiver, 5):
        await record.ack()
    pool = await transport.pool()

    async def forgotten() -> bool:
        sql = f"SELECT count(*) FROM {transport.names.keys} WHERE group_name = 'g'"
        return int(await pool.fetchval(sql)) == 0

    await eventually(forgotten, TIMEOUT, "the key rows to be deleted", every=0.1)
    await transport.send(_message(topic, "k0", "again"))  # a forgotten key is taken again
    [again] = await _take(receiver, 1)
    assert (again.payload, again.delivery_count) == ("again", 1)


async def test_a_record_never_acknowledged_goes_to_the_dead_letter_topic_after_max_deliveries(
    make_transport: Callable[..., PostgresTransport],
) -> None:
    """A receiver that fails every time (takes the record, closes without acknowledging):
    after its third delivery the record goes to ``<topic>.dlq`` with its deliveries and last
    error, the group never gets it again, and the key's next record follows."""
    transport = make_transport(max_deliveries=3, lease_time=0.9)  # renewals (which move it) every 0.3 s
    topic = f"wow.poison{uuid.uuid4().hex[:6]}.note.command"
    dead = transport.open("g", [topic + ".dlq"])
    await dead.ready()
    dead.open_processing()
    first = transport.open("g", [topic])
    await first.ready()
    await transport.send(_message(topic, "k", "poison"))
    await transport.send(_message(topic, "k", "next"))
    failing = first
    for delivery in (1, 2, 3):
        failing.open_processing()
        [record] = await _take(failing, 1)
        assert (record.payload, record.delivery_count) == ("poison", delivery)
        await failing.close()  # hands it back unacknowledged
        failing = transport.open("g", [topic])
        await failing.ready()
    failing.open_processing()
    [following] = await _take(failing, 1)
    assert (following.payload, following.delivery_count) == ("next", 1)
    [letter] = await _take(dead, 1)
    assert (letter.topic, letter.key, letter.payload) == (topic + ".dlq", "k", "poison")
    assert letter.failed_deliveries == 3
    assert letter.last_error == "handed back unacknowledged by a closing receiver"
    assert letter.delivery_count == 1
    await letter.ack()
    await following.ack()


async def test_a_record_the_bus_cannot_decode_is_dead_lettered_with_why(
    make_transport: Callable[..., PostgresTransport],
) -> None:
    """The decode-failure policy's dead letter says why, as a poison record's does: its
    failed deliveries and its last error (the reason, the group, the position, the error)."""
    transport = make_transport()
    bus = TransportCommandBus(transport, conformance_codec())
    account = NamedAggregate(f"undecodable{uuid.uuid4().hex[:6]}", "account")
    topic = bus.topic(account)
    dead = transport.open("reader", [topic + ".dlq"])
    await dead.ready()
    dead.open_processing()
    receiver = bus.receiver(MessageSubscription.of("g", [account]))
    await receiver.ready()
    receiver.open_processing()
    await transport.send(_message(topic, "a-1", '{"foreign": "json"}'))
    await bus.send(command(account, "a-1", 1))
    exchange = await asyncio.wait_for(anext(aiter(receiver)), 30)
    await exchange.ack()
    [letter] = await _take(dead, 1)
    assert (letter.key, letter.payload) == ("a-1", '{"foreign": "json"}'), "the record's own bytes"
    assert letter.failed_deliveries == 1
    assert letter.last_error is not None
    assert letter.last_error.startswith("undecodable by group 'g' at ")
    assert ": wrong_shape: " in letter.last_error
    await letter.ack()
    await receiver.close()
    await bus.close()


async def test_a_record_whose_lease_keeps_expiring_is_dead_lettered_with_that_error(
    make_transport: Callable[..., PostgresTransport],
) -> None:
    transport = make_transport(max_deliveries=1, lease_time=0.6)
    topic = f"wow.expiring{uuid.uuid4().hex[:6]}.note.command"
    holder = transport.open("g", [topic])
    await holder.ready()
    await transport.send(_message(topic, "k", "stuck"))
    holder.open_processing()
    [held] = await _take(holder, 1)
    pool = await transport.pool()
    # the holder stops renewing (as if it hung): its lease is made to expire
    holder._tasks[1].cancel()
    await pool.execute(
        f"UPDATE {transport.names.queue} SET lease_until = clock_timestamp() - interval '1 second'"
    )
    await pool.execute(
        f"UPDATE {transport.names.keys} SET lease_until = clock_timestamp() - interval '1 second'"
    )
    other = make_transport(max_deliveries=1, lease_time=0.9).open("g", [topic])
    dead = make_transport().open("d", [topic + ".dlq"])
    await dead.ready()
    dead.open_processing()
    await other.ready()
    other.open_processing()
    [letter] = await _take(dead, 1)
    assert (letter.payload, letter.failed_deliveries) == ("stuck", 1)
    assert letter.last_error == "the lease of a receiver expired"
    assert held.delivery_count == 1
