"""A decorated bus keeps the MessageBus contract: the conformance suite on each kind.

Every bus here is wrapped by decorators that override every hook (``send``,
``received``, ``hand_off``) and by the metrics middleware where it applies; readiness,
admission, quiescence and close must stay exactly the decorated bus's.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.wow_core.middleware.test_middleware import Seeing, Seen
from wow_core.messaging.contract import MessageBus
from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.messaging.local_first.bus import (
    LocalFirstCommandBus,
    LocalFirstDomainEventBus,
    LocalFirstStateEventBus,
)
from wow_core.middleware import BusLayer, MetricsMiddleware, decorate_bus, decorate_local_bus
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


class DecoratedBuses:
    """Buses of one layer, decorated by the metrics middleware and a hook-overriding one."""

    def __init__(self, layer: BusLayer) -> None:
        self.layer = layer
        self.seen: Seen = []

    def middleware(self, rig: Rig) -> list[Any]:
        return [MetricsMiddleware(rig.metrics), Seeing(self.seen)]

    async def bus(self, kind: TopicKind, rig: Rig) -> MessageBus[Any, Any]:
        middleware = self.middleware(rig)
        bus: MessageBus[Any, Any]
        if self.layer is BusLayer.LOCAL:
            bus = decorate_local_bus(middleware, LOCAL[kind]())
        else:
            transport_bus = decorate_bus(
                middleware, rig.transport_bus(await rig.transport(), kind), BusLayer.TRANSPORT
            )
            if self.layer is BusLayer.TRANSPORT:
                bus = transport_bus
            else:
                local = decorate_local_bus(middleware, LOCAL[kind]())
                bus = decorate_bus(middleware, LOCAL_FIRST[kind](local, transport_bus), BusLayer.LOCAL_FIRST)
        rig.buses.append(bus)
        return bus

    async def close(self) -> None:
        pass


@pytest.fixture
def wow_transport_factory() -> object:
    broker = InMemoryBroker()
    return lambda: InMemoryTransport(broker=broker)


class TestDecoratedTransportBuses(MessageBusConformance):
    @pytest.fixture
    def wow_bus_factory(self) -> DecoratedBuses:
        return DecoratedBuses(BusLayer.TRANSPORT)


class TestDecoratedLocalBuses(MessageBusConformance):
    @pytest.fixture
    def wow_bus_factory(self) -> DecoratedBuses:
        return DecoratedBuses(BusLayer.LOCAL)


class TestDecoratedLocalFirstBuses(MessageBusConformance):
    @pytest.fixture
    def wow_bus_factory(self) -> DecoratedBuses:
        return DecoratedBuses(BusLayer.LOCAL_FIRST)
