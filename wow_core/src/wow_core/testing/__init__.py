"""Test support for wow-py and its plugins: the conformance suites every transport runs.

``TransportConformance`` and ``MessageBusConformance`` are test classes to subclass; the
fixtures they use come from the pytest plugin :mod:`wow_core.testing.pytest_plugin`
(loaded automatically through the ``pytest11`` entry point). See
``docs/transports/conformance.md``.
"""

from wow_core.testing.bus_conformance import MessageBusConformance
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
