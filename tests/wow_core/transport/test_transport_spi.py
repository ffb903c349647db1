"""The Transport SPI is what a transport must do, and nothing the bus does for it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from wow_core.testing import MessageBusConformance, TransportConformance
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport
from wow_core.transport.spi import Transport, TransportMessage, TransportReceiver


class BareTransport:
    """The in-memory transport behind the SPI's members only: no naming, no decode-failure
    default, no batch send. What the bus needs beyond these, it supplies itself."""

    def __init__(self, broker: InMemoryBroker) -> None:
        self._inner = InMemoryTransport(broker=broker)

    @property
    def name(self) -> str:
        return "bare"

    async def start(self) -> None:
        await self._inner.start()

    async def send(self, message: TransportMessage) -> None:
        await self._inner.send(message)

    def open(self, group: str, topics: Sequence[str]) -> TransportReceiver:
        return self._inner.open(group, topics)

    async def close(self) -> None:
        await self._inner.close()


def test_the_spi_is_name_start_send_open_and_close() -> None:
    members = {name for name in vars(Transport) if not name.startswith("_")}
    assert members == {"name", "start", "send", "open", "close"}


def test_a_transport_of_the_spi_members_only_is_a_transport() -> None:
    assert isinstance(BareTransport(InMemoryBroker()), Transport)


class TestBareTransport(TransportConformance, MessageBusConformance):
    """The conformance suites need nothing but the SPI: the bus names the topics
    (``DefaultTopicNaming``) and dead-letters undecodable records by default."""

    @pytest.fixture
    def wow_transport_factory(self) -> object:
        broker = InMemoryBroker()
        return lambda: BareTransport(broker)
