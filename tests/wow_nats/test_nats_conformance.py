"""NatsTransport runs the whole conformance suite of wow_core.testing, as any plugin would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from tests.wow_nats.conftest import delete_streams
from wow_core.testing import MessageBusConformance, TransportConformance
from wow_nats import NatsSettings, NatsTransport

pytestmark = pytest.mark.nats


class TestNatsTransport(TransportConformance, MessageBusConformance):  # type: ignore[misc]
    keeps_key_order_across_hand_over = False  # members share a stream: no keyed ownership (issue 18)

    @pytest.fixture
    async def wow_transport_factory(
        self, nats_url: str, wow_conformance_context: str
    ) -> AsyncIterator[Callable[[], NatsTransport]]:
        settings = NatsSettings(servers=[nats_url], fetch_timeout=0.5)
        yield lambda: NatsTransport(settings)
        # every topic of the test is under its bounded context, and so is every stream
        await delete_streams(nats_url, wow_conformance_context)
