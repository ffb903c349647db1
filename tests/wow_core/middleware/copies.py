"""Make the embedded runtime send every local-first copy, for tests that observe them."""

from __future__ import annotations

from wow_core.middleware import undecorated
from wow_core.model import NamedAggregate
from wow_core.runtime.runtime import WowRuntime
from wow_core.transport.in_memory import InMemoryTransport


def keep_every_copy(runtime: WowRuntime, aggregate: str = "bank.account") -> None:
    """Open a raw transport receiver (group ``audit``) on the command, event and state
    topics of ``aggregate`` on the runtime's in-memory transport.

    Over the in-memory transport a local-first bus does not send a copy nobody could
    process (no group on its topic, or only receivers that drop copies handled locally).
    This receiver would process every copy, so every copy goes out, as over a broker, and
    the runtime's own receivers get it back and filter it: what these tests observe.
    """
    transport = runtime.transport
    assert isinstance(transport, InMemoryTransport)
    named = NamedAggregate.parse(aggregate)
    topics = [
        undecorated(bus).distributed_bus.topic(named)
        for bus in (runtime.command_bus, runtime.domain_event_bus, runtime.state_event_bus)
    ]
    transport.open("audit", topics)
