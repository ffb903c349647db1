"""PostgresTransport runs the whole transport and message-bus conformance suites of
wow_core.testing, as any plugin would, including the group hand-over cases with per-key
order kept (a key is held by one member of a group at a time)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from wow_core.testing import MessageBusConformance, TransportConformance
from wow_postgres import PostgresSettings, PostgresTransport

pytestmark = pytest.mark.postgres


class TestPostgresTransport(TransportConformance, MessageBusConformance):  # type: ignore[misc]
    keeps_key_order_across_hand_over = True

    @pytest.fixture
    def wow_transport_factory(
        self, settings_for: Callable[..., PostgresSettings]
    ) -> Callable[[], PostgresTransport]:
        settings = settings_for(pool_max_size=3, poll_interval=0.5, lease_time=10.0)
        return lambda: PostgresTransport(settings)
