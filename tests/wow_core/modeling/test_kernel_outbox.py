"""The kernel's events through a transactional outbox (wow_core.modeling.outbox): the
stream and its state event are written with the append, marked as the local hand-off
decides; the kernel sends a distributed copy itself only when the local admission did
not confirm."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.accounts import Account, Deposit, Open
from wow_core.eventsourcing import InMemoryEventStore
from wow_core.messaging.contract import MessageSubscription
from wow_core.messaging.in_memory import InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.messaging.local_first import LocalFirstDomainEventBus, LocalFirstStateEventBus
from wow_core.model import BodyTypeRegistry, DomainEventStream, Header, MessageCodec, TopicKind
from wow_core.modeling import AggregateRegistry, CommandKernel, metadata_of
from wow_core.modeling.outbox import OutboxPublisher, TransactionalOutbox
from wow_core.transport import InMemoryTransport, TransportMessage
from wow_core.transport.bus import TransportDomainEventBus, TransportStateEventBus


class MemoryOutbox:
    """Appends to an in-memory store and keeps the messages only when the append succeeded."""

    def __init__(self, store: InMemoryEventStore) -> None:
        self.store = store
        self.rows: list[TransportMessage] = []

    async def append(self, stream: DomainEventStream, messages: Sequence[TransportMessage]) -> None:
        await self.store.append(stream)
        self.rows.extend(messages)


class SpyTransport(InMemoryTransport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[TransportMessage] = []

    async def send(self, message: TransportMessage) -> None:
        self.sent.append(message)
        await super().send(message)


@dataclass
class Service:
    registry: AggregateRegistry
    codec: MessageCodec
    transport: SpyTransport
    events: LocalFirstDomainEventBus
    states: LocalFirstStateEventBus
    outbox: MemoryOutbox
    kernel: CommandKernel

    def marker(self, row: TransportMessage) -> str:
        kind = TopicKind.STATE if row.topic.endswith("state") else TopicKind.EVENT
        return str(self.codec.decode(row.payload, kind).header[Header.LOCAL_FIRST])

    async def settle(self) -> None:
        async with asyncio.timeout(10):
            await self.events.copies.join()
            await self.states.copies.join()


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    registry = AggregateRegistry([Account])
    codec = MessageCodec(registry.register_body_types(BodyTypeRegistry()))
    transport = SpyTransport()
    events = LocalFirstDomainEventBus(
        InMemoryDomainEventBus(), TransportDomainEventBus(transport, codec), is_local=registry.owns
    )
    states = LocalFirstStateEventBus(
        InMemoryStateEventBus(), TransportStateEventBus(transport, codec), is_local=registry.owns
    )
    outbox = MemoryOutbox(InMemoryEventStore())
    assert isinstance(outbox, TransactionalOutbox)
    kernel = CommandKernel(
        registry,
        outbox.store,
        domain_event_bus=events,
        state_event_bus=states,
        outbox=OutboxPublisher(outbox, events, states),
    )
    yield Service(registry, codec, transport, events, states, outbox, kernel)
    await events.close(1)
    await states.close(1)
    await transport.close()


async def _opened(service: Service) -> Any:
    named = metadata_of(Account).named_aggregate
    receiver = service.events.receiver(MessageSubscription.of("g", [named], runtime_owned=True))
    async with asyncio.timeout(10):
        await receiver.ready()
    receiver.open_processing()
    return receiver


async def test_without_local_receivers_the_outbox_holds_the_only_copies(service: Service) -> None:
    outcome = await service.kernel.process(service.registry.command(Open("ada", 10)))
    assert outcome.succeeded
    assert [row.topic.rsplit(".", 1)[-1] for row in service.outbox.rows] == ["event", "state"]
    assert [service.marker(row) for row in service.outbox.rows] == ["false", "false"]
    assert [row.key for row in service.outbox.rows] == [outcome.aggregate_id.id] * 2
    await service.settle()
    assert service.transport.sent == [], "the kernel published what the relay publishes"


async def test_an_admitted_hand_off_sends_nothing_more(service: Service) -> None:
    receiver = await _opened(service)
    outcome = await service.kernel.process(service.registry.command(Open("ada", 10)))
    event_row, state_row = service.outbox.rows
    assert (service.marker(event_row), service.marker(state_row)) == ("true", "false")
    async with asyncio.timeout(10):
        local = await receiver.__anext__()
    assert local.message.id == outcome.stream.id  # type: ignore[union-attr]
    await local.ack()
    await service.settle()
    assert service.transport.sent == []
    await receiver.close()


async def test_a_released_hand_off_sends_an_unmarked_copy(service: Service) -> None:
    """A local receiver that withholds its acknowledgement: the owning group must still get
    the message from the transport, as local-first always does."""
    receiver = await _opened(service)
    outcome = await service.kernel.process(service.registry.command(Open("ada", 10)))
    async with asyncio.timeout(10):
        local = await receiver.__anext__()
    local.release()
    await service.settle()
    [sent] = service.transport.sent
    assert sent.topic == service.outbox.rows[0].topic
    assert service.marker(sent) == "false"
    assert service.codec.decode(sent.payload, TopicKind.EVENT).id == outcome.stream.id  # type: ignore[union-attr]
    await receiver.close()


async def test_a_refused_append_writes_no_message(service: Service) -> None:
    opened = await service.kernel.process(service.registry.command(Open("ada", 10)))
    deposit = service.registry.command(Deposit(5), opened.aggregate_id.id)
    assert (await service.kernel.process(deposit)).succeeded
    rows = len(service.outbox.rows)
    again = await service.kernel.process(deposit)  # the same request id
    assert again.duplicate
    assert len(service.outbox.rows) == rows
