"""KafkaTransport passes the conformance suites of ``wow_core.testing`` against a real broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.wow_kafka.conftest import test_settings
from wow_core.testing import MessageBusConformance, TransportConformance
from wow_kafka import KafkaTransport

pytestmark = pytest.mark.kafka


class TestKafkaTransport(TransportConformance, MessageBusConformance):
    counts_deliveries = False  # Kafka does not count deliveries
    large_payload_size = 512 * 1024  # under the 1 MiB default of max_request_size

    @pytest.fixture
    def wow_transport_factory(self, kafka_bootstrap: str) -> Callable[[], KafkaTransport]:
        settings = test_settings(kafka_bootstrap)
        return lambda: KafkaTransport(settings)

    @pytest.fixture
    def wow_conformance_timeout(self) -> float:
        return 30.0  # a join waits half the session timeout on tansu; rebalances take longer
