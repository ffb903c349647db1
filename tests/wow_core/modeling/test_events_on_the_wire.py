"""Every event a command function returns reaches the wire, sourced or not.

The runtime below sends its domain events through the in-memory transport with
local-first off, so each stream is encoded, carried as text and decoded before the
projection sees it: the path a projection in another process depends on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from wow_core.command import CommandWait
from wow_core.event import on_event, projection
from wow_core.event.declare import owner_lookup
from wow_core.model import DomainEvent
from wow_core.modeling import Emit, aggregate, metadata_of, on_command, on_sourcing
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import (
    BusSettings,
    EventSettings,
    EventSourcingSettings,
    LocalFirstSettings,
    StateSettings,
    WowSettings,
)


@dataclass(frozen=True)
class BellState:
    rings: int = 0


@dataclass(frozen=True)
class Hang:
    pass


@dataclass(frozen=True)
class Hung:
    pass


@dataclass(frozen=True)
class Ring:
    times: int


@dataclass(frozen=True)
class Rang:
    """Sourced: it changes the state."""

    times: int


@dataclass(frozen=True)
class Echoed:
    """Named by no sourcing function: it changes no state, it is still history."""

    times: int


@aggregate("belfry", "bell", state=BellState)
class Bell:
    @on_command(create=True)
    def hang(self, state: BellState, body: Hang) -> Hung:
        return Hung()

    @on_command
    def ring(self, state: BellState, body: Ring) -> Emit[Rang, Echoed]:
        return Emit(Rang(body.times), Echoed(body.times), result={"rings": state.rings + body.times})

    @on_sourcing
    def rang(self, state: BellState, event: Rang) -> BellState:
        return BellState(state.rings + event.times)


@projection(aggregates="belfry.bell")  # as a projection in a process not hosting the bell declares it
@dataclass
class Echoes:
    heard: list[int] = field(default_factory=list)

    @on_event
    def echoed(self, event: DomainEvent[Echoed]) -> None:
        self.heard.append(event.body.times)


def over_the_transport() -> WowSettings:
    off = BusSettings(local_first=LocalFirstSettings(enabled=False))
    return WowSettings(
        service_name="belfry",
        event=EventSettings(bus=off),
        eventsourcing=EventSourcingSettings(state=StateSettings(bus=off)),
    )


@pytest.fixture
async def runtime() -> AsyncIterator[WowRuntime]:
    echoes = Echoes()
    made = WowApp("belfry", aggregates=[Bell], components=[echoes]).runtime(over_the_transport())
    made.echoes = echoes  # type: ignore[attr-defined]
    async with made:
        yield made


async def test_an_event_no_sourcing_function_names_is_encoded_and_projected(runtime: WowRuntime) -> None:
    send, command = runtime.gateway.send_and_wait, runtime.aggregates.command
    hung = await send(command(Hang()), timeout=10)
    bell = hung.aggregate_id.id
    rung = await send(command(Ring(3), bell), CommandWait.projected(function_name="echoed"), timeout=10)
    assert (rung.error_code, rung.aggregate_version, dict(rung.result)) == ("", 2, {"rings": 3})
    assert runtime.echoes.heard == [3]  # type: ignore[attr-defined]


def test_the_aggregate_emitting_an_unsourced_event_is_its_owner() -> None:
    # A projection of Echoed in the process hosting the bell needs no aggregates=.
    assert list(owner_lookup([metadata_of(Bell)])(Echoed)) == [metadata_of(Bell).named_aggregate]
