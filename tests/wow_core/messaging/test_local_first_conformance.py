"""The local-first buses keep the MessageBus contract: the same suite as every bus.

Local = the in-memory buses, distributed = the transport buses over an in-memory broker.
The suite's receivers are plain (not runtime-owned), so their messages take the refused
route and arrive through the distributed copy; the merged receiver is what is tested.
"""

from __future__ import annotations

from typing import Any

import pytest

from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.messaging.local_first.bus import (
    LocalFirstCommandBus,
    LocalFirstDomainEventBus,
    LocalFirstStateEventBus,
)
from wow_core.model import TopicKind
from wow_core.testing import MessageBusConformance, Rig
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport

LOCAL: dict[TopicKind, type[Any]] = {
    TopicKind.COMMAND: InMemoryCommandBus,
    TopicKind.EVENT: InMemoryDomainEventBus,
    TopicKind.STATE: InMemoryStateEventBus,
}
LOCAL_FIRST: dict[TopicKind, type[Any]] = {
    TopicKind.COMMAND: LocalFirstCommandBus,
    TopicKind.EVENT: LocalFirstDomainEventBus,
    TopicKind.STATE: LocalFirstStateEventBus,
}


class LocalFirstBusFactory:
    async def bus(self, kind: TopicKind, rig: Rig) -> Any:
        bus = LOCAL_FIRST[kind](LOCAL[kind](), rig.transport_bus(await rig.transport(), kind))
        rig.buses.append(bus)
        return bus

    async def close(self) -> None:
        pass


class TestLocalFirstBuses(MessageBusConformance):
    @pytest.fixture
    def wow_transport_factory(self) -> object:
        broker = InMemoryBroker()
        return lambda: InMemoryTransport(broker=broker)

    @pytest.fixture
    def wow_bus_factory(self) -> LocalFirstBusFactory:
        return LocalFirstBusFactory()
