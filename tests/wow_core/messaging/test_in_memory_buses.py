"""The in-memory buses: routing, single consumer, admission, hand-off receipts, close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest

from tests.accounts import ACCOUNT, Deposit
from wow_core.messaging import (
    BusClosedError,
    LocalMessageBus,
    MessageSubscription,
    ReceiverConflictError,
    ServerCommandExchange,
    opened_messages,
)
from wow_core.messaging.in_memory import (
    InMemoryCommandBus,
    InMemoryDomainEventBus,
    InMemoryReceiver,
    InMemoryStateEventBus,
)
from wow_core.model import (
    AggregateId,
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    NamedAggregate,
    ReadOnlyHeaderError,
)

ORDER = NamedAggregate("shop", "order")
TIMEOUT = 2.0


def command(aggregate_id: str = "a-1", amount: int = 1) -> CommandMessage[Any]:
    return CommandMessage(AggregateId(ACCOUNT, aggregate_id), Deposit(amount), "deposit")


def stream(aggregate_id: str = "a-1", version: int = 1) -> DomainEventStream:
    target = AggregateId(ACCOUNT, aggregate_id)
    event = DomainEvent(target, Deposit(version), "deposited", version)
    return DomainEventStream(target, version, (event,), "c", "r")


def sub(
    group: str = "bank.processor", *named: NamedAggregate, runtime_owned: bool = False
) -> MessageSubscription:
    return MessageSubscription.of(group, named or (ACCOUNT,), runtime_owned=runtime_owned)


async def pull(receiver: InMemoryReceiver[Any]) -> Any:
    async with asyncio.timeout(TIMEOUT):
        return await anext(receiver)


def test_they_are_local_message_buses() -> None:
    assert isinstance(InMemoryCommandBus(), LocalMessageBus)
    assert isinstance(InMemoryDomainEventBus(), LocalMessageBus)
    assert isinstance(InMemoryStateEventBus(), LocalMessageBus)


async def test_command_reaches_its_consumer_read_only() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    await receiver.ready()
    receiver.open_processing()
    message = command()
    await bus.send(message)
    exchange = await pull(receiver)
    assert isinstance(exchange, ServerCommandExchange)
    assert exchange.message is message
    assert exchange.message.header.read_only
    with pytest.raises(ReadOnlyHeaderError):
        exchange.message.header["x"] = "y"
    await bus.close()


async def test_second_concurrent_command_consumer_is_a_clear_error() -> None:
    bus = InMemoryCommandBus()
    first = bus.receiver(sub("bank.one"))
    with pytest.raises(ReceiverConflictError, match=r"bank\.account already has a consuming receiver"):
        bus.receiver(sub("bank.two", ORDER, ACCOUNT))
    # The refused subscription took nothing: ORDER is still free.
    bus.receiver(sub("shop.x", ORDER))
    await first.close()
    bus.receiver(sub("bank.two"))  # free again once the first closed
    await bus.close()


async def test_send_without_subscriber_logs_at_debug_and_completes(caplog: pytest.LogCaptureFixture) -> None:
    bus = InMemoryCommandBus()
    with caplog.at_level(logging.DEBUG, logger="wow_core.messaging.in_memory"):
        await bus.send(command())
    assert "no subscriber for bank.account" in caplog.text
    # Nothing was kept for a later subscriber.
    receiver = bus.receiver(sub())
    receiver.open_processing()
    assert receiver.pending == 0
    await bus.close()


async def test_nothing_reaches_the_consumer_before_processing_opens() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    await bus.send(command("a-1"))
    got: list[Any] = []
    arrived = asyncio.Event()

    async def consume() -> None:
        async for exchange in receiver:
            got.append(exchange)
            arrived.set()

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)  # let the consumer block; not a synchronisation
    assert got == []
    assert receiver.pending == 1
    receiver.open_processing()
    await asyncio.wait_for(arrived.wait(), TIMEOUT)
    await receiver.close()
    await asyncio.wait_for(task, TIMEOUT)
    assert [e.message.aggregate_id.id for e in got] == ["a-1"]


async def test_concurrent_senders_keep_per_aggregate_order() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    receiver.open_processing()

    async def sender(aggregate: str) -> None:
        for index in range(50):
            await bus.send(command(aggregate, amount=index))
            await asyncio.sleep(0)

    await asyncio.gather(*(sender(f"a-{n}") for n in range(4)))
    seen: dict[str, list[int]] = {}
    for _ in range(200):
        exchange = await pull(receiver)
        seen.setdefault(exchange.message.aggregate_id.id, []).append(exchange.message.body.amount)
    assert seen == {f"a-{n}": list(range(50)) for n in range(4)}
    await bus.close()


async def test_event_bus_delivers_to_every_group_and_members_share() -> None:
    bus = InMemoryDomainEventBus()
    one_a = bus.receiver(sub("g1"))
    one_b = bus.receiver(sub("g1"))
    two = bus.receiver(sub("g2"))
    for receiver in (one_a, one_b, two):
        receiver.open_processing()
    ids = [f"id-{n}" for n in range(40)]
    for aggregate in ids:
        await bus.send(stream(aggregate))
    assert two.pending == 40
    assert one_a.pending + one_b.pending == 40
    assert one_a.pending > 0
    assert one_b.pending > 0
    await bus.close()


async def test_event_bus_keeps_nothing_for_aggregates_nobody_subscribes_to() -> None:
    bus = InMemoryDomainEventBus()
    other = bus.receiver(sub("shop.p", ORDER))
    await bus.send(stream("a-1"))
    assert other.pending == 0
    assert bus._routes.keys() == {ORDER}
    receiver = bus.receiver(sub("bank.p"))
    assert receiver.pending == 0
    await bus.close()


async def test_state_event_bus_routes_by_named_aggregate() -> None:
    from wow_core.model import StateEvent

    bus = InMemoryStateEventBus()
    receiver = bus.receiver(sub("bank.snapshot"))
    receiver.open_processing()
    await bus.send(StateEvent(stream("a-1"), {"balance": 1}))
    exchange = await pull(receiver)
    assert exchange.message.state == {"balance": 1}
    await bus.close()


async def test_send_and_receiver_after_close_raise() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    await bus.close()
    with pytest.raises(BusClosedError, match="closed"):
        await bus.send(command())
    with pytest.raises(BusClosedError):
        bus.receiver(sub())
    with pytest.raises(StopAsyncIteration):
        await anext(receiver)


async def test_close_ends_a_blocked_consumer() -> None:
    bus = InMemoryDomainEventBus()
    receiver = bus.receiver(sub())
    receiver.open_processing()
    task = asyncio.create_task(anext(receiver))
    await asyncio.sleep(0)
    await receiver.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(task, TIMEOUT)
    await bus.close()


async def test_quiesce_stops_new_work_and_waits_for_in_flight() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub(runtime_owned=True))
    receiver.open_processing()
    await bus.send(command("a-1"))
    await bus.send(command("a-2"))
    exchange = await pull(receiver)
    assert receiver.in_flight == 1
    assert await receiver.quiesce(timeout=0.01) is False
    assert bus.subscriber_count(ACCOUNT) == 0  # quiescing leaves the local-first routes
    with pytest.raises(StopAsyncIteration):
        await anext(receiver)
    waiting = asyncio.create_task(receiver.quiesce(timeout=TIMEOUT))
    await exchange.ack()
    assert await waiting is True
    assert receiver.in_flight == 0
    await bus.close()


async def test_release_settles_without_ack() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    receiver.open_processing()
    await bus.send(command())
    exchange = await pull(receiver)
    exchange.release()
    exchange.release()
    assert receiver.in_flight == 0
    assert not exchange.acked
    await bus.close()


async def test_opened_messages_is_the_plain_stream() -> None:
    bus = InMemoryDomainEventBus()
    got: list[str] = []

    async def consume() -> None:
        # closed as the loop is left (a generator left early is closed by the event loop's
        # finalizer, some steps later: on Python 3.12+, after wait_for below returns)
        async with contextlib.aclosing(opened_messages(bus)(sub())) as stream:
            async for exchange in stream:
                got.append(exchange.message.aggregate_id.id)
                await exchange.ack()
                if len(got) == 2:
                    return

    task = asyncio.create_task(consume())
    # The stream subscribes when it starts; send once it did (asyncio runs it first).
    await asyncio.sleep(0)
    assert bus._routes.keys() == {ACCOUNT}
    await bus.send(stream("x"))
    await bus.send(stream("y"))
    await asyncio.wait_for(task, TIMEOUT)
    assert got == ["x", "y"]
    assert not bus._routes  # the receiver closed with the iteration
    await bus.close()


# -- local-first: subscriber_count and hand_off -------------------------------------------


async def test_subscriber_count_counts_runtime_owned_processing_open_receivers() -> None:
    bus = InMemoryDomainEventBus()
    plain = bus.receiver(sub("plain"))
    plain.open_processing()
    owned = bus.receiver(sub("owned", runtime_owned=True))
    assert bus.subscriber_count(ACCOUNT) == 0
    owned.open_processing()
    assert bus.subscriber_count(ACCOUNT) == 1
    assert bus.subscriber_count(ORDER) == 0
    await owned.close()
    assert bus.subscriber_count(ACCOUNT) == 0
    await bus.close()


async def test_hand_off_without_routable_receiver_is_refused_and_emits_nothing() -> None:
    bus = InMemoryCommandBus()
    receipt = bus.hand_off(command())
    assert not receipt.accepted
    assert receipt.admission.done()
    assert receipt.admission.result() is False
    receiver = bus.receiver(sub(runtime_owned=True))  # not processing-open yet
    receipt = bus.hand_off(command())
    assert not receipt.accepted
    assert "no processing-open receiver" in receipt.reason
    assert receiver.pending == 0
    await bus.close()


async def test_hand_off_to_plain_receivers_only_is_refused() -> None:
    bus = InMemoryDomainEventBus()
    plain = bus.receiver(sub("plain"))
    plain.open_processing()
    receipt = bus.hand_off(stream())
    assert not receipt.accepted
    assert plain.pending == 0
    await bus.close()


async def test_hand_off_is_accepted_on_sink_entry_and_admitted_when_acknowledged() -> None:
    bus = InMemoryDomainEventBus()
    first = bus.receiver(sub("g1", runtime_owned=True))
    second = bus.receiver(sub("g2", runtime_owned=True))
    plain = bus.receiver(sub("g3"))
    for receiver in (first, second, plain):
        receiver.open_processing()
    message = stream()
    receipt = bus.hand_off(message)
    assert receipt.accepted
    assert receipt.receivers == 2
    assert message.header.read_only
    assert plain.pending == 1  # plain receivers get it, without counting for admission
    assert not receipt.admission.done()  # sink entry alone is not admission
    first_exchange, second_exchange = await pull(first), await pull(second)
    assert not receipt.admission.done()  # a pull alone is not admission either
    await first_exchange.ack()
    assert not receipt.admission.done()
    await second_exchange.ack()
    assert await asyncio.wait_for(receipt.admission, TIMEOUT) is True
    await bus.close()


async def test_a_handed_off_message_released_unacknowledged_is_rejected() -> None:
    """Released without ack (an outcome that withholds it, a failed command): not handled
    here, so the local-first copy must stay eligible on the transport."""
    bus = InMemoryDomainEventBus()
    first = bus.receiver(sub("g1", runtime_owned=True))
    second = bus.receiver(sub("g2", runtime_owned=True))
    first.open_processing()
    second.open_processing()
    receipt = bus.hand_off(stream())
    await (await pull(first)).ack()
    (await pull(second)).release()
    assert receipt.admission.done()
    assert receipt.admission.result() is False
    assert first.in_flight == second.in_flight == 0
    await bus.close()


async def test_closing_a_receiver_rejects_the_admissions_of_exchanges_still_in_flight() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub(runtime_owned=True))
    receiver.open_processing()
    receipt = bus.hand_off(command())
    exchange = await pull(receiver)
    await receiver.close()
    assert receipt.admission.done()
    assert receipt.admission.result() is False
    await exchange.ack()  # too late: changes nothing
    assert receipt.admission.result() is False
    await bus.close()


async def test_hand_off_admission_is_rejected_when_a_receiver_closes() -> None:
    bus = InMemoryDomainEventBus()
    first = bus.receiver(sub("g1", runtime_owned=True))
    second = bus.receiver(sub("g2", runtime_owned=True))
    first.open_processing()
    second.open_processing()
    receipt = bus.hand_off(stream())
    later = bus.hand_off(stream("a-2"))
    await pull(first)
    await second.close()
    assert receipt.admission.result() is False
    assert later.admission.result() is False
    await bus.close()


async def test_quiescing_rejects_the_admissions_it_will_never_yield_and_refuses_new_hand_offs() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub(runtime_owned=True))
    receiver.open_processing()
    receipt = bus.hand_off(command())
    assert await receiver.quiesce(0)
    assert receipt.admission.done()
    assert receipt.admission.result() is False
    assert receiver.pending == 0
    assert not bus.hand_off(command()).accepted
    with pytest.raises(StopAsyncIteration):
        await anext(receiver)
    await bus.close()


async def test_hand_off_needs_every_runtime_owned_group() -> None:
    bus = InMemoryDomainEventBus()
    ready = bus.receiver(sub("g1", runtime_owned=True))
    ready.open_processing()
    bus.receiver(sub("g2", runtime_owned=True))  # routed, but processing not open
    receipt = bus.hand_off(stream())
    assert not receipt.accepted
    assert ready.pending == 0
    await bus.close()


async def test_hand_off_goes_to_one_member_of_a_group() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub(runtime_owned=True))
    receiver.open_processing()
    receipts = [bus.hand_off(command(f"a-{n}")) for n in range(3)]
    assert all(r.accepted and r.receivers == 1 for r in receipts)
    for _ in range(3):
        await (await pull(receiver)).ack()
    assert [r.admission.result() for r in receipts] == [True, True, True]
    await bus.close()


async def test_closing_the_bus_rejects_every_pending_admission_then_refuses() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub(runtime_owned=True))
    receiver.open_processing()
    receipt = bus.hand_off(command())
    await bus.close()
    assert receipt.admission.result() is False
    assert not bus.hand_off(command()).accepted
    with pytest.raises(StopAsyncIteration):
        await anext(receiver)


async def test_a_second_concurrent_pull_is_a_clear_error_and_a_cancelled_pull_loses_nothing() -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub(runtime_owned=True))
    receiver.open_processing()
    first = asyncio.create_task(anext(receiver))
    await asyncio.sleep(0)  # the first pull now waits
    with pytest.raises(RuntimeError, match="already being iterated"):
        await anext(receiver)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    receipt = bus.hand_off(command())
    assert not receipt.admission.done()  # the cancelled pull admitted nothing
    exchange = await pull(receiver)
    await exchange.ack()
    assert receipt.admission.result() is True
    await bus.close()


# -- members of one group that quiesce or close ---------------------------------------------


async def take_all(receiver: InMemoryReceiver[Any]) -> list[tuple[str, int]]:
    """Pull and acknowledge what ``receiver`` holds now: (aggregate id, version), in order."""
    taken: list[tuple[str, int]] = []
    while receiver.pending:
        exchange = await pull(receiver)
        taken.append((exchange.message.aggregate_id.id, exchange.message.version))
        await exchange.ack()
    return taken


async def owners(
    bus: InMemoryDomainEventBus, members: list[InMemoryReceiver[Any]], ids: list[str]
) -> dict[str, InMemoryReceiver[Any]]:
    """Which member each aggregate id goes to now, found by sending (and taking) one stream each."""
    found: dict[str, InMemoryReceiver[Any]] = {}
    for aggregate in ids:
        await bus.send(stream(aggregate, version=PROBE))
        (owner,) = [member for member in members if member.pending]
        assert await take_all(owner) == [(aggregate, PROBE)]
        found[aggregate] = owner
    return found


IDS = [f"id-{n}" for n in range(60)]
PROBE = 99


async def test_a_quiescing_member_is_never_chosen_its_keys_move_to_the_remaining_members() -> None:
    bus = InMemoryDomainEventBus()
    leaving, staying = bus.receiver(sub("g1")), bus.receiver(sub("g1"))
    for member in (leaving, staying):
        member.open_processing()
    before = await owners(bus, [leaving, staying], IDS)
    moved = [aggregate for aggregate in IDS if before[aggregate] is leaving]
    assert moved, "some keys hashed to the leaving member"

    assert await leaving.quiesce(0)
    for aggregate in IDS:
        await bus.send(stream(aggregate, version=1))

    assert leaving.pending == 0  # nothing lands where it would never be yielded
    assert sorted(await take_all(staying)) == sorted((aggregate, 1) for aggregate in IDS)
    with pytest.raises(StopAsyncIteration):
        await anext(leaving)
    await bus.close()


async def test_keys_of_the_other_members_stay_where_they_are_when_one_quiesces() -> None:
    # Sends and hand-offs choose alike, and a member leaving moves only its own keys:
    # another key moving between two running members could be processed out of order.
    bus = InMemoryDomainEventBus()
    members = [bus.receiver(sub("g1", runtime_owned=True)) for _ in range(3)]
    for member in members:
        member.open_processing()
    before = await owners(bus, members, IDS)
    leaving = members[2]
    assert await leaving.quiesce(0)

    after = await owners(bus, members, IDS)
    for aggregate in IDS:
        receipt = bus.hand_off(stream(aggregate, version=1))
        assert receipt.accepted
        (handed_to,) = [member for member in members if member.pending]
        assert handed_to is after[aggregate], f"{aggregate}: send and hand-off choose the same member"
        await take_all(handed_to)
        assert receipt.admission.result() is True
    assert all(after[a] is before[a] for a in IDS if before[a] is not leaving)
    assert all(after[a] is not leaving for a in IDS)
    await bus.close()


@pytest.mark.parametrize("leave", ["quiesce", "close"])
async def test_what_a_leaving_member_did_not_yield_goes_to_the_remaining_members_in_order(leave: str) -> None:
    bus = InMemoryDomainEventBus()
    leaving, staying = bus.receiver(sub("g1")), bus.receiver(sub("g1"))
    for member in (leaving, staying):
        member.open_processing()
    before = await owners(bus, [leaving, staying], IDS)
    moved = [aggregate for aggregate in IDS if before[aggregate] is leaving][:3]
    kept = [aggregate for aggregate in IDS if before[aggregate] is staying][:3]
    for version in (1, 2, 3):
        for aggregate in moved + kept:
            await bus.send(stream(aggregate, version))
    assert leaving.pending == 3 * len(moved)

    if leave == "quiesce":
        assert await leaving.quiesce(0)
    else:
        await leaving.close()
    for aggregate in moved + kept:
        await bus.send(stream(aggregate, version=4))

    assert leaving.pending == 0
    taken = await take_all(staying)
    for aggregate in moved + kept:
        assert [version for key, version in taken if key == aggregate] == [1, 2, 3, 4], aggregate
    await bus.close()


async def test_with_no_member_left_a_send_is_a_send_without_subscriber(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    receiver.open_processing()
    assert await receiver.quiesce(0)
    with caplog.at_level(logging.DEBUG, logger="wow_core.messaging.in_memory"):
        await bus.send(command())
    assert "no subscriber for bank.account" in caplog.text
    assert receiver.pending == 0
    await bus.close()


async def test_a_member_quiescing_with_plain_messages_and_no_member_left_drops_them_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    receiver.open_processing()
    await bus.send(command("a-1"))
    await bus.send(command("a-2"))
    with caplog.at_level(logging.WARNING, logger="wow_core.messaging.in_memory"):
        assert await receiver.quiesce(0)
    assert receiver.pending == 0
    assert "dropped 2 messages" in caplog.text
    await bus.close()


@pytest.mark.parametrize("leave", ["settles", "closes"])
async def test_a_moved_key_waits_until_the_quiescing_member_settled_what_it_still_processes(
    leave: str,
) -> None:
    # The member taking over an aggregate id must not start on its next message while the
    # stopping member still processes an earlier one: the id's messages keep their order.
    bus = InMemoryDomainEventBus()
    leaving, staying = bus.receiver(sub("g1")), bus.receiver(sub("g1"))
    for member in (leaving, staying):
        member.open_processing()
    before = await owners(bus, [leaving, staying], IDS)
    moved = next(aggregate for aggregate in IDS if before[aggregate] is leaving)
    kept = next(aggregate for aggregate in IDS if before[aggregate] is staying)
    await bus.send(stream(moved, 1))
    await bus.send(stream(moved, 2))
    processing = await pull(leaving)  # version 1, in flight
    assert await leaving.quiesce(0) is False  # quiescing now, version 1 still in flight
    await bus.send(stream(moved, 3))
    await bus.send(stream(kept, 1))

    assert leaving.pending == 0
    assert await take_all(staying) == [(kept, 1)]  # other ids go on; the moved one waits
    if leave == "settles":
        await processing.ack()
        assert await leaving.quiesce(TIMEOUT) is True
    else:
        await leaving.close()
    assert await take_all(staying) == [(moved, 2), (moved, 3)]
    await bus.close()


async def test_a_hand_off_for_a_key_the_quiescing_member_still_processes_is_refused() -> None:
    # Refused, its copy goes out in its turn behind the copy of the message in flight.
    bus = InMemoryDomainEventBus()
    leaving, staying = (
        bus.receiver(sub("g1", runtime_owned=True)),
        bus.receiver(sub("g1", runtime_owned=True)),
    )
    for member in (leaving, staying):
        member.open_processing()
    before = await owners(bus, [leaving, staying], IDS)
    moved = next(aggregate for aggregate in IDS if before[aggregate] is leaving)
    kept = next(aggregate for aggregate in IDS if before[aggregate] is staying)
    first = bus.hand_off(stream(moved, 1))
    processing = await pull(leaving)
    assert await leaving.quiesce(0) is False

    assert not bus.hand_off(stream(moved, 2)).accepted
    assert bus.hand_off(stream(kept, 1)).accepted
    await processing.ack()
    assert await leaving.quiesce(TIMEOUT) is True
    assert first.admission.result() is True
    moved_on = bus.hand_off(stream(moved, 3))  # settled: the id has moved
    assert moved_on.accepted
    assert await take_all(staying) == [(kept, 1), (moved, 3)]
    await bus.close()


async def test_admitted_hand_offs_are_counted_by_the_bus_when_asked() -> None:
    """``count_hand_offs``: one counter per bus, the admitted hand-offs per named
    aggregate and message name; a refused hand-off counts nothing."""
    bus = InMemoryCommandBus()
    counts = bus.count_hand_offs()
    assert counts == {}
    assert bus.count_hand_offs() is None, "one counter only"
    assert not bus.hand_off(command("a-1")).accepted  # no receiver yet
    assert counts == {}
    receiver = bus.receiver(sub(runtime_owned=True))
    receiver.open_processing()
    for n in range(3):
        assert bus.hand_off(command(f"a-{n}")).accepted
    assert {key: (c.named_aggregate, c.message_name, c.count) for key, c in counts.items()} == {
        (ACCOUNT.key, "deposit"): (ACCOUNT, "deposit", 3)
    }
    await bus.send(command("a-9"))  # a send is not a hand-off
    assert counts[(ACCOUNT.key, "deposit")].count == 3
    await bus.close()


async def test_a_receiver_counts_what_it_yields_when_asked() -> None:
    """``count_received``: the exchanges yielded per named aggregate, once asked; a
    ``hook_received`` hook is still called."""
    bus = InMemoryCommandBus()
    receiver = bus.receiver(sub())
    hooked: list[str] = []
    assert receiver.hook_received(
        lambda exchange, subscription: hooked.append(exchange.message.aggregate_id.id)
    )
    counts = receiver.count_received()
    assert counts == {}
    assert receiver.count_received() is None
    receiver.open_processing()
    await bus.send(command("a-1"))
    await bus.send(command("a-2"))
    for _ in range(2):
        await (await pull(receiver)).ack()
    assert {key: (c.named_aggregate, c.count) for key, c in counts.items()} == {ACCOUNT.key: (ACCOUNT, 2)}
    assert hooked == ["a-1", "a-2"]
    await bus.close()
