"""A stop does not wait for a saga's compensation that waits for its commands.

A saga that runs as a compensation waits for each of its commands to be ``PROCESSED``
(up to ``WOW_COMMAND__WAIT_TIMEOUT``). A command whose aggregate never answers (its
service stopped, here an aggregate nobody hosts) held the dispatcher's stop until the
shutdown timeout: a member was seen silent after "stopping". The stop now ends the wait
at once; the replay is released (outcome RELEASED), and its record stays PREPARED, so the
scheduler prepares it again once the execution timeout passed: nothing is lost.
"""

from __future__ import annotations

import time

import pytest

from tests.accounts import Account, Deposit, Deposited, Open
from wow_compensation.model import ExecutionFailedStatus
from wow_compensation.recorder import CompensationFailureRecorder
from wow_compensation.store import RecordQuery, query
from wow_core import DomainEvent, WowApp, on_event, stateless_saga
from wow_core.command import CommandWait
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware.metrics import PROCESSING_OUTCOMES
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually

GHOST = NamedAggregate("bank", "ghost")
"""An aggregate no service hosts: a command to it is sent and never processed."""


class Failing(Exception):
    """The saga's first attempt fails (UNKNOWN: compensated, not retried at once)."""


@stateless_saga
class Forward:
    """On a deposit: fails the first time, then (as the compensation) sends a command
    whose PROCESSED never comes."""

    def __init__(self) -> None:
        self.calls = 0

    @on_event
    def forwarded(self, event: DomainEvent[Deposited]) -> list[CommandMessage[object]]:
        self.calls += 1
        if self.calls == 1:
            raise Failing("the first attempt fails")
        return [CommandMessage(AggregateId(GHOST, event.aggregate_id.id), Deposit(1), "Deposit")]


async def test_a_stop_releases_a_saga_compensation_waiting_for_its_commands(
    fast_compensation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOW_RUNTIME__SHUTDOWN_TIMEOUT", "20")
    monkeypatch.setenv("WOW_COMMAND__WAIT_TIMEOUT", "120")
    saga = Forward()
    runtime = WowApp("bank", aggregates=[Account], components=[saga]).runtime(
        WowSettings(service_name="bank", metrics="in_memory")
    )
    assert runtime.event_dispatch is not None
    [recorder] = {
        id(d.handler.recorder): d.handler.recorder
        for d in runtime.event_dispatch.dispatchers
        if isinstance(d.handler.recorder, CompensationFailureRecorder)
    }.values()
    assert isinstance(recorder, CompensationFailureRecorder)
    await runtime.start()
    try:
        opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ann")))
        assert opened.succeeded
        assert opened.aggregate_id is not None
        await runtime.gateway.send_and_wait(
            runtime.aggregates.command(Deposit(5), opened.aggregate_id.id), CommandWait.processed()
        )
        # recorded, prepared by the scheduler, replayed: the saga now waits for its command
        await eventually(lambda: _true(saga.calls == 2), 30, "the compensation of the saga running")

        async def prepared() -> bool:
            found = (await query(recorder.store, RecordQuery(processor="Forward"))).items
            return len(found) == 1 and found[0].state.status is ExecutionFailedStatus.PREPARED

        await eventually(prepared, 30, "the record PREPARED")
    except BaseException:
        await runtime.stop()
        raise
    started = time.monotonic()
    clean = await runtime.stop()
    took = time.monotonic() - started
    # well inside the 20 s budget, and nothing overran it
    assert took < 5, f"the stop took {took:.1f}s"
    assert clean
    metrics = runtime.metrics
    assert isinstance(metrics, InMemoryMetrics)
    assert metrics.counter_value(PROCESSING_OUTCOMES, processor="Forward", outcome="RELEASED") == 1
    # the interrupted attempt recorded nothing: the record is PREPARED, due again once its
    # execution timeout passed (the scheduler of the next instance prepares it again)
    [record] = (await query(recorder.store, RecordQuery(processor="Forward"))).items
    assert record.state.status is ExecutionFailedStatus.PREPARED
    assert record.state.retry_state.retries == 1
    assert record.state.is_due(record.state.retry_state.timeout_at + 1)
    assert saga.calls == 2


async def _true(value: bool) -> bool:
    return value
