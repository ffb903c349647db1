"""The local-first integration scenarios with Kafka as the distributed bus.

Every scenario and fixture of ``tests/wow_core/messaging/local_first/test_integration.py``
is collected here a second time, with ``distributed_transport`` giving Kafka clients (one
per simulated process) on the test broker; scenarios added there run here too.
"""

from __future__ import annotations

import pytest

from tests.wow_core.messaging.local_first import test_integration as scenarios
from tests.wow_kafka.conftest import test_settings
from wow_core.transport.spi import Transport
from wow_kafka import KafkaTransport

globals().update(
    {
        name: value
        for name, value in vars(scenarios).items()
        if not name.startswith("_")
        and name not in {"distributed_transport", "TRANSPORTS"}
        and name not in globals()
    }
)

pytestmark = pytest.mark.kafka


@pytest.fixture
def distributed_transport(kafka_bootstrap: str) -> scenarios.TransportClients:
    settings = test_settings(kafka_bootstrap)

    async def client() -> Transport:
        return KafkaTransport(settings)

    return client
