"""The in-memory transport and buses pass the conformance suites every transport runs."""

from __future__ import annotations

import pytest

from wow_core.testing import InMemoryBusFactory, MessageBusConformance, TransportConformance
from wow_core.transport import DecodeFailureDefault
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport


class TestInMemoryTransport(TransportConformance, MessageBusConformance):
    @pytest.fixture
    def wow_transport_factory(self) -> object:
        broker = InMemoryBroker()
        return lambda: InMemoryTransport(broker=broker)


class TestInMemoryBuses(MessageBusConformance):
    @pytest.fixture
    def wow_transport_factory(self) -> object:
        return InMemoryTransport

    @pytest.fixture
    def wow_bus_factory(self) -> InMemoryBusFactory:
        return InMemoryBusFactory()


class TestInMemoryTransportLeavingFailuresPending(TransportConformance):
    """The LEAVE_PENDING decode-failure default (as the Redis transport uses) on the same suite."""

    @pytest.fixture
    def wow_transport_factory(self) -> object:
        broker = InMemoryBroker(partitions=3)
        return lambda: InMemoryTransport(
            broker=broker, decode_failure_default=DecodeFailureDefault.LEAVE_PENDING
        )
