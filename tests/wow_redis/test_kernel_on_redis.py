"""The command kernel over the Redis event store, assembled as ``wow run`` assembles it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest

from tests.wow_redis.conftest import REDIS_URL
from wow_core.modeling import aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import WowSettings

pytestmark = pytest.mark.redis


@dataclass(frozen=True)
class CounterState:
    label: str = ""


@dataclass(frozen=True)
class Start:
    label: str


@dataclass(frozen=True)
class Started:
    label: str


@dataclass(frozen=True)
class Ring:
    pass


@dataclass(frozen=True)
class Rang:
    """An event no sourcing function names: it changes no state, it is still history."""


@dataclass(frozen=True)
class Relabel:
    label: str


@dataclass(frozen=True)
class Relabelled:
    label: str


@aggregate("redis_kernel", "counter", state=CounterState)
class Counter:
    @on_command(create=True)
    def start(self, state: CounterState, body: Start) -> Started:
        return Started(body.label)

    @on_command
    def ring(self, state: CounterState, body: Ring) -> Rang:
        return Rang()

    @on_command
    def relabel(self, state: CounterState, body: Relabel) -> Relabelled | None:
        return Relabelled(body.label) if body.label != state.label else None

    @on_sourcing
    def started(self, state: CounterState, event: Started) -> CounterState:
        return replace(state, label=event.label)

    @on_sourcing
    def relabelled(self, state: CounterState, event: Relabelled) -> CounterState:
        return replace(state, label=event.label)


@pytest.fixture
async def runtime(prefix: str, monkeypatch: pytest.MonkeyPatch, redis: object) -> AsyncIterator[WowRuntime]:
    monkeypatch.setenv("WOW_EVENTSOURCING__STORE", "redis")
    monkeypatch.setenv("WOW_REDIS__URL", REDIS_URL)
    monkeypatch.setenv("WOW_REDIS__KEY_PREFIX", prefix)
    made = WowApp("redis-kernel", aggregates=[Counter]).runtime(WowSettings())
    async with made:
        yield made


async def started(runtime: WowRuntime) -> str:
    result = await runtime.gateway.send_and_wait(runtime.aggregates.command(Start("a")))
    assert result.succeeded, result
    return result.aggregate_id.id


async def test_an_event_no_sourcing_function_names_is_appended_to_the_redis_store(
    runtime: WowRuntime,
) -> None:
    counter = await started(runtime)
    rung = await runtime.gateway.send_and_wait(runtime.aggregates.command(Ring(), counter))
    assert (rung.error_code, rung.aggregate_version) == ("", 2), rung.error_msg
    [stream] = await runtime.event_store.load(rung.aggregate_id, 2)
    assert [event.body for event in stream.events] == [Rang()]


async def test_a_repeated_request_whose_second_decision_appends_nothing_is_a_duplicate(
    runtime: WowRuntime,
) -> None:
    counter = await started(runtime)
    command = runtime.aggregates.command
    first = await runtime.gateway.send_and_wait(command(Relabel("b"), counter, request_id="relabel-1"))
    second = await runtime.gateway.send_and_wait(command(Relabel("b"), counter, request_id="relabel-1"))
    assert (first.succeeded, first.duplicate, first.aggregate_version) == (True, False, 2)
    assert (second.succeeded, second.duplicate, second.aggregate_version) == (True, True, 2)
    assert await runtime.event_store.last_version(first.aggregate_id) == 2
