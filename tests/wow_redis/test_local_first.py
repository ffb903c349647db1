"""The local-first scenarios of wow_core, with Redis Streams as the distributed transport."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from tests.wow_core.messaging.local_first.test_integration import (  # noqa: F401 (collected here)
    TransportClients,
    kind,
    named,
    processes,
    test_a_handed_off_message_is_handled_once_and_its_copy_filtered,
    test_a_handed_off_message_released_unacknowledged_stays_pending_on_the_transport,
    test_a_marker_the_message_came_with_never_suppresses_delivery_to_the_owner,
    test_a_replica_filters_copies_handled_locally_and_processes_refused_ones,
    test_a_send_refused_by_a_quiescing_receiver_never_waits_for_its_demand,
    test_a_void_command_carries_local_first_false_whatever_it_came_with,
    test_closing_a_local_receiver_rejects_pending_admissions_and_copies_go_out_unmarked,
    test_one_aggregate_type_whose_receiver_never_pulls_does_not_delay_another,
    test_per_aggregate_order_on_the_transport_with_refusals_in_between,
)
from wow_core.transport.spi import Transport
from wow_redis import RedisSettings, RedisStreamTransport

pytestmark = pytest.mark.redis


@pytest.fixture
def distributed_transport(settings_for: Callable[..., RedisSettings], redis: Redis) -> TransportClients:
    """A fresh client of the shared server per process; streams under the test's prefix."""
    settings = settings_for()

    async def client() -> Transport:
        return RedisStreamTransport(settings)

    return client
