"""``MessageBusConformance``: the MessageBus contract every bus proves.

By default it runs on ``TransportCommandBus`` / ``TransportDomainEventBus`` /
``TransportStateEventBus`` over the transport of ``wow_transport_factory``; override the
``wow_bus_factory`` fixture (a :class:`~wow_core.testing.support.BusFactory`) to run it on
other buses (the in-memory buses do, with
:class:`~wow_core.testing.support.InMemoryBusFactory`). It asks nothing a local bus
cannot give: no redelivery, no durability (those are in ``TransportConformance``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

import pytest

from wow_core.messaging.contract import BusClosedError, MessageBus, MessageSubscription, opened_messages
from wow_core.model import TopicKind
from wow_core.testing.support import BusFactory, Rig, message_of, next_of, note_of, ordinal, within
from wow_core.testing.transport_conformance import UNICODE_TEXT


class MessageBusConformance:
    """The MessageBus contract (spec 000, "CommandBus contract"), for every message kind."""

    pytestmark = pytest.mark.asyncio

    large_body_size: ClassVar[int] = 256 * 1024
    """Characters of the large message body."""
    messages_per_key: ClassVar[int] = 20

    @staticmethod
    async def bus(rig: Rig, factory: BusFactory, kind: TopicKind) -> MessageBus[Any, Any]:
        if factory.close not in rig.finalizers:
            rig.finalizers.append(factory.close)
        return await factory.bus(kind, rig)

    async def test_every_kind_round_trips_read_only(self, wow_rig: Rig, wow_bus_factory: BusFactory) -> None:
        named = wow_rig.named()
        for kind in TopicKind:
            bus = await self.bus(wow_rig, wow_bus_factory, kind)
            assert bus.topic_kind is kind
            receiver = await wow_rig.subscribe(
                bus, MessageSubscription.of(wow_rig.group(kind.value), [named])
            )
            sent = message_of(kind, named, "a-1", 7, header={"trace": "t-1"})
            await within(bus.send(sent), wow_rig.timeout, f"send of a {kind.value}")
            [exchange] = await wow_rig.take(receiver, 1, f"the {kind.value}")
            got = exchange.message
            assert type(got) is type(sent)
            assert (got.id, got.aggregate_id, got.name, got.create_time) == (
                sent.id,
                sent.aggregate_id,
                sent.name,
                sent.create_time,
            )
            # A bus may add headers of its own (local_first, a trace context), never drop one.
            assert got.header.items() >= {"trace": "t-1"}.items()
            assert got.header.read_only, "a received message must be read-only"
            assert note_of(got) == note_of(sent)
            assert receiver.in_flight == 1
            await exchange.ack()
            assert exchange.acked
            assert receiver.in_flight == 0

    async def test_per_key_order_under_concurrent_senders(
        self, wow_rig: Rig, wow_bus_factory: BusFactory
    ) -> None:
        named = wow_rig.named()
        bus = await self.bus(wow_rig, wow_bus_factory, TopicKind.COMMAND)
        receiver = await wow_rig.subscribe(bus, MessageSubscription.of(wow_rig.group(), [named]))
        keys = [f"a-{n}" for n in range(4)]
        per_key = self.messages_per_key

        async def sender(key: str) -> None:
            for n in range(per_key):
                await bus.send(message_of(TopicKind.COMMAND, named, key, n))
                await asyncio.sleep(0)  # interleave with the other senders

        await within(asyncio.gather(*(sender(key) for key in keys)), wow_rig.timeout, "the sends")
        seen: dict[str, list[int]] = {}
        for exchange in await wow_rig.take(receiver, per_key * len(keys), "every command"):
            seen.setdefault(exchange.message.aggregate_id.id, []).append(ordinal(exchange.message))
            await exchange.ack()
        assert seen == {key: list(range(per_key)) for key in keys}

    async def test_ready_then_send_never_misses(self, wow_rig: Rig, wow_bus_factory: BusFactory) -> None:
        named = wow_rig.named()
        bus = await self.bus(wow_rig, wow_bus_factory, TopicKind.EVENT)
        for attempt in range(3):
            receiver = wow_rig.track(
                bus.receiver(MessageSubscription.of(wow_rig.group(f"g{attempt}"), [named]))
            )
            await within(receiver.ready(), wow_rig.timeout, "readiness")
            await bus.send(message_of(TopicKind.EVENT, named, "a-1", attempt))
            receiver.open_processing()
            [exchange] = await wow_rig.take(receiver, 1, f"the event of attempt {attempt}")
            assert ordinal(exchange.message) == attempt + 1
            await exchange.ack()
            await receiver.close()

    async def test_nothing_reaches_the_consumer_before_processing_opens(
        self, wow_rig: Rig, wow_bus_factory: BusFactory
    ) -> None:
        named = wow_rig.named()
        bus = await self.bus(wow_rig, wow_bus_factory, TopicKind.EVENT)
        held = wow_rig.track(bus.receiver(MessageSubscription.of(wow_rig.group("held"), [named])))
        await within(held.ready(), wow_rig.timeout, "readiness")
        assert not held.processing_open
        collector = wow_rig.consume(held)
        witness = await wow_rig.subscribe(bus, MessageSubscription.of(wow_rig.group("witness"), [named]))
        await bus.send(message_of(TopicKind.EVENT, named, "a-1", 0))
        await wow_rig.take(witness, 1, "the witness event")
        await wow_rig.settle()
        assert collector.items == [], "an exchange reached the consumer before processing was opened"
        held.open_processing()
        assert held.processing_open
        await collector.wait_for(lambda items: len(items) == 1, wow_rig.timeout, "the held event")

    async def test_every_group_gets_every_message(self, wow_rig: Rig, wow_bus_factory: BusFactory) -> None:
        named = wow_rig.named()
        bus = await self.bus(wow_rig, wow_bus_factory, TopicKind.STATE)
        first = await wow_rig.subscribe(bus, MessageSubscription.of(wow_rig.group("one"), [named]))
        second = await wow_rig.subscribe(bus, MessageSubscription.of(wow_rig.group("two"), [named]))
        for n in range(10):
            await bus.send(message_of(TopicKind.STATE, named, f"a-{n}", n))
        for receiver in (first, second):
            got = await wow_rig.take(receiver, 10, "every state event")
            assert sorted(ordinal(e.message) for e in got) == list(range(1, 11))

    async def test_quiesce_waits_for_in_flight_and_takes_no_new_work(
        self, wow_rig: Rig, wow_bus_factory: BusFactory
    ) -> None:
        named = wow_rig.named()
        bus = await self.bus(wow_rig, wow_bus_factory, TopicKind.COMMAND)
        receiver = await wow_rig.subscribe(bus, MessageSubscription.of(wow_rig.group(), [named]))
        await bus.send(message_of(TopicKind.COMMAND, named, "a-1", 0))
        [exchange] = await wow_rig.take(receiver, 1, "the command")
        assert receiver.in_flight == 1
        quiescing = asyncio.create_task(receiver.quiesce(wow_rig.timeout))
        await asyncio.sleep(0)
        assert not quiescing.done(), "quiesce returned while an exchange was in flight"
        await exchange.ack()
        assert await within(quiescing, wow_rig.timeout, "quiesce") is True
        assert receiver.in_flight == 0
        with pytest.raises(StopAsyncIteration):
            await within(anext(aiter(receiver)), wow_rig.timeout, "a quiesced receiver to end its iteration")
        assert await within(receiver.quiesce(0.01), wow_rig.timeout, "a second quiesce") is True

    async def test_close_ends_a_blocked_iteration(self, wow_rig: Rig, wow_bus_factory: BusFactory) -> None:
        named = wow_rig.named()
        bus = await self.bus(wow_rig, wow_bus_factory, TopicKind.EVENT)
        receiver = await wow_rig.subscribe(bus, MessageSubscription.of(wow_rig.group(), [named]))
        blocked = asyncio.create_task(next_of(receiver))
        await asyncio.sleep(0)
        await within(receiver.close(), wow_rig.timeout, "close")
        with pytest.raises(StopAsyncIteration):
            await within(blocked, wow_rig.timeout, "the blocked iteration to end")
        await receiver.close()  # idempotent

    async def test_send_after_close_raises(self, wow_rig: Rig, wow_bus_factory: BusFactory) -> None:
        named = wow_rig.named()
        for kind in TopicKind:
            bus = await self.bus(wow_rig, wow_bus_factory, kind)
            await bus.close()
            with pytest.raises(BusClosedError):
                await bus.send(message_of(kind, named, "a-1"))

    async def test_unicode_headers_and_large_bodies(self, wow_rig: Rig, wow_bus_factory: BusFactory) -> None:
        named = wow_rig.named()
        header = {"ключ": "значение 🚀", "emoji-🔑": UNICODE_TEXT, "plain": ""}
        large = ("wow-py " * (self.large_body_size // 7 + 1))[: self.large_body_size] + UNICODE_TEXT
        for kind in TopicKind:
            bus = await self.bus(wow_rig, wow_bus_factory, kind)
            receiver = await wow_rig.subscribe(
                bus, MessageSubscription.of(wow_rig.group(kind.value), [named])
            )
            await bus.send(message_of(kind, named, "идентификатор-✓", 1, text=large, header=header))
            [exchange] = await wow_rig.take(receiver, 1, f"the large {kind.value}")
            assert exchange.message.header.items() >= header.items()
            assert exchange.message.aggregate_id.id == "идентификатор-✓"
            assert note_of(exchange.message).text == large
            await exchange.ack()

    async def test_opened_messages_is_the_plain_stream(
        self, wow_rig: Rig, wow_bus_factory: BusFactory
    ) -> None:
        named = wow_rig.named()
        bus = await self.bus(wow_rig, wow_bus_factory, TopicKind.EVENT)
        witness = await wow_rig.subscribe(bus, MessageSubscription.of(wow_rig.group("witness"), [named]))
        stream = opened_messages(bus)(MessageSubscription.of(wow_rig.group("plain"), [named]))
        assert isinstance(stream, AsyncGenerator)
        first: asyncio.Task[Any] = asyncio.create_task(within(anext(stream), wow_rig.timeout, "first"))
        # The stream subscribes when it is first pulled and exposes no readiness, and a
        # broker's group takes a while to join: send one message per witness round until
        # the stream yields. It must then yield the following messages in order.
        sent = 0
        while not first.done() and sent < 200:
            sent += 1
            await bus.send(message_of(TopicKind.EVENT, named, "a-1", sent - 1))
            await wow_rig.take(witness, 1, "the witness event")
            await asyncio.wait({first}, timeout=0.05)
        exchange = await first
        start = ordinal(exchange.message)
        assert 1 <= start <= sent
        await exchange.ack()
        await bus.send(message_of(TopicKind.EVENT, named, "a-1", sent))
        while True:
            following = await within(anext(stream), wow_rig.timeout, "the following messages")
            await following.ack()
            assert ordinal(following.message) == start + 1, "the plain stream skipped or reordered"
            start += 1
            if start == sent + 1:
                break
        await stream.aclose()  # closes the receiver
