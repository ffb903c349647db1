"""Test support for wow-py and its plugins: given/when/expect specifications of a
service's aggregates, sagas, projections and event processors
(:mod:`wow_core.testing.spec`), and the conformance suites every transport runs.

``TransportConformance``, ``MessageBusConformance`` and ``EventStoreConformance`` are
test classes to subclass (``InMemoryMetrics`` records what a test asserts on); the
fixtures they use come from the pytest plugin :mod:`wow_core.testing.pytest_plugin`
(loaded automatically through the ``pytest11`` entry point). See
``docs/transports/conformance.md``.
"""

from wow_core.metrics import InMemoryMetrics
from wow_core.testing.bus_conformance import MessageBusConformance
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, EventStoreConformance
from wow_core.testing.spec import (
    AggregateExpectation,
    AggregateSpec,
    ComponentExpectation,
    EventProcessorSpec,
    ProjectionSpec,
    SagaExpectation,
    SagaSpec,
    TestRuntime,
    WowTestRuntime,
)
from wow_core.testing.support import (
    BusFactory,
    InMemoryBusFactory,
    Rig,
    TransportBusFactory,
    eventually,
    opened,
    wait_until,
    within,
)
from wow_core.testing.transport_conformance import TransportConformance

__all__ = [
    "AggregateExpectation",
    "AggregateSpec",
    "ComponentExpectation",
    "EventProcessorSpec",
    "ProjectionSpec",
    "SagaExpectation",
    "SagaSpec",
    "TestRuntime",
    "WowTestRuntime",
    "CONFORMANCE_BODY_TYPES",
    "EventStoreConformance",
    "InMemoryMetrics",
    "BusFactory",
    "InMemoryBusFactory",
    "MessageBusConformance",
    "Rig",
    "TransportBusFactory",
    "TransportConformance",
    "eventually",
    "opened",
    "wait_until",
    "within",
]
