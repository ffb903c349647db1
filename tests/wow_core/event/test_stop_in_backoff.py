"""A stop does not wait for a retry backoff: the message in it is released at once.

``RetryableFilter`` sleeps its backoff (2 s at least, growing) inside the handler; the
stop used to wait for the sleep, up to the shutdown budget. Now a message waiting in a
backoff is released when its dispatcher stops: not acknowledged, not recorded as failed
(spec 003: the filter keeps no durable state and cannot recover after the process
exits, so the backend's redelivery is what carries it on), and the next runtime on the
same transport handles it. On the in-memory transport (records not acknowledged when
their receiver closes are delivered again) and on Redis, with and without local-first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from examples.bank.domain import Account, AccountOpened, Deposit, MoneyDeposited, OpenAccount

from tests.wow_core.event.support import ScriptedRecorder, wait_until
from tests.wow_core.event.test_end_to_end import (
    TransportKit,
    _in_memory_kit,
    _redis_kit,
    _Shared,
    transport_runtime,
)
from wow_core.command import CommandWait
from wow_core.event import EventDispatchOptions, on_event, projection
from wow_core.event.settings import RetrySettings
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware.metrics import PROCESSING_OUTCOMES
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime
from wow_core.runtime.settings import EventSettings
from wow_core.testing import eventually


@projection(context="bank", aggregates=["bank.account"])
@dataclass
class FlakySummary:
    """Fails its first deposit with a recoverable error (a retry backoff follows)."""

    calls: int = 0
    deposited: list[str] = field(default_factory=list)

    @on_event
    def on_opened(self, event: AccountOpened) -> None:
        return None

    @on_event
    def on_deposited(self, event: MoneyDeposited) -> None:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("the read model's database is restarting")
        self.deposited.append(event.reference)


@pytest.fixture(params=["in_memory_transport", "redis"])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[TransportKit]:
    factory = {"in_memory_transport": _in_memory_kit, "redis": _redis_kit}[request.param]
    async for made in factory():
        yield made


# a backoff of a minute: only a stop that does not wait for it is prompt
SLOW_RETRY = EventSettings(retry=RetrySettings(max_retries=3, min_backoff=60.0))


def _outcomes(runtime: WowRuntime, outcome: str) -> float:
    metrics = runtime.metrics
    assert isinstance(metrics, InMemoryMetrics)
    return metrics.counter_value(
        PROCESSING_OUTCOMES, processor="FlakySummary", message="MoneyDeposited", outcome=outcome
    )


@pytest.mark.parametrize("local_first", [False, True], ids=["transport", "local-first"])
async def test_a_message_in_a_retry_backoff_is_released_on_stop_and_delivered_again(
    kit: TransportKit, local_first: bool
) -> None:
    service = f"backoff{uuid.uuid4().hex[:8]}"
    summary = FlakySummary()
    app = WowApp(
        service, aggregates=[Account], components=[summary], events=EventDispatchOptions(snapshots=False)
    )
    store = _Shared()
    recorder = ScriptedRecorder()
    first_transport = kit.make()
    runtime = transport_runtime(
        app, first_transport, service, recorder, True, store, local_first=local_first, event=SLOW_RETRY
    )
    await runtime.start()
    try:
        build = runtime.aggregates.command
        opened = await runtime.gateway.send_and_wait(
            build(OpenAccount("ann", 0)), CommandWait.projected(), timeout=30
        )
        assert opened.succeeded
        deposit = await runtime.gateway.send_and_wait(
            build(Deposit(5, "dep-1"), opened.aggregate_id.id), CommandWait.processed(), timeout=30
        )
        assert deposit.succeeded
        # the first attempt failed: the filter now sleeps its backoff of a minute
        await wait_until(lambda: summary.calls == 1, 20)
    except BaseException:
        await runtime.stop()
        raise
    started = time.monotonic()
    clean = await runtime.stop()
    took = time.monotonic() - started
    assert took < 5, f"the stop took {took:.1f}s (budget {runtime.shutdown_timeout}s)"
    assert clean
    assert summary.calls == 1  # not retried during the stop
    # released: neither acknowledged nor recorded as failed
    assert recorder.failures == []
    assert _outcomes(runtime, "RELEASED") == 1
    assert _outcomes(runtime, "FAILURE_RECORDED") == 0
    await first_transport.close()

    second_transport = kit.make()
    restarted = transport_runtime(
        app, second_transport, service, recorder, True, store, local_first=local_first, event=SLOW_RETRY
    )
    async with restarted:
        # delivered again, handled at the next attempt, acknowledged
        await wait_until(lambda: summary.deposited == ["dep-1"], 30)
        await eventually(lambda: _handled(restarted), 20, "the redelivered deposit HANDLED")
    await second_transport.close()
    assert summary.calls == 2
    assert recorder.failures == []


async def _handled(runtime: WowRuntime) -> bool:
    return _outcomes(runtime, "HANDLED") >= 1
