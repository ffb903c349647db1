"""RedisStreamTransport runs the whole conformance suite of wow_core.testing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from wow_core.testing import MessageBusConformance, TransportConformance
from wow_redis import RedisSettings, RedisStreamTransport

pytestmark = pytest.mark.redis


class TestRedisStreamTransport(TransportConformance, MessageBusConformance):
    keeps_key_order_across_hand_over = False  # members share a stream: no keyed ownership (issue 18)

    @pytest.fixture
    def wow_transport_factory(
        self, settings_for: Callable[..., RedisSettings], redis: Redis
    ) -> Callable[[], RedisStreamTransport]:
        # every stream of the test is under the test's key prefix; `redis` deletes them
        settings = settings_for()
        return lambda: RedisStreamTransport(settings)
