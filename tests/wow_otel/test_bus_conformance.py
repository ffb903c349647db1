"""Buses decorated by the otel middleware (metrics and tracing) keep the MessageBus
contract: the conformance suite on each layer, readiness, admission, quiescence and
close exactly the decorated bus's."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from tests.wow_core.middleware.test_decorated_bus_conformance import DecoratedBuses
from wow_core.middleware import BusLayer
from wow_core.testing import MessageBusConformance, Rig
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport
from wow_otel.middleware import OtelMiddleware

TRACER = TracerProvider().get_tracer("conformance")
METER = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("conformance")


class OtelDecoratedBuses(DecoratedBuses):
    def middleware(self, rig: Rig) -> list[Any]:
        return [OtelMiddleware(tracer=TRACER, meter=METER)]


@pytest.fixture
def wow_transport_factory() -> object:
    broker = InMemoryBroker()
    return lambda: InMemoryTransport(broker=broker)


class TestOtelTransportBuses(MessageBusConformance):
    @pytest.fixture
    def wow_bus_factory(self) -> OtelDecoratedBuses:
        return OtelDecoratedBuses(BusLayer.TRANSPORT)


class TestOtelLocalBuses(MessageBusConformance):
    @pytest.fixture
    def wow_bus_factory(self) -> OtelDecoratedBuses:
        return OtelDecoratedBuses(BusLayer.LOCAL)


class TestOtelLocalFirstBuses(MessageBusConformance):
    @pytest.fixture
    def wow_bus_factory(self) -> OtelDecoratedBuses:
        return OtelDecoratedBuses(BusLayer.LOCAL_FIRST)
