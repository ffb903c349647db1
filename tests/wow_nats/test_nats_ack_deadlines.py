"""The publish-ack deadlines of the NATS transport: one timer for every publish in flight,
and a publish whose ack never comes still fails at its deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats.errors
import pytest

from tests.wow_nats.conftest import MakeTransport, Names
from tests.wow_nats.support import message
from wow_core.testing import eventually
from wow_nats.transport import AckDeadlines

pytestmark = pytest.mark.nats

WAIT = 10.0


def pending_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


async def test_a_future_not_acked_by_its_deadline_fails_with_a_timeout() -> None:
    deadlines = AckDeadlines(0.05)
    future = pending_future()
    started = time.monotonic()
    deadlines.add(future)
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(future, WAIT)
    assert time.monotonic() - started >= 0.04
    assert len(deadlines) == 0


async def test_acked_futures_are_left_alone_and_dropped_as_new_ones_arrive() -> None:
    deadlines = AckDeadlines(0.05)
    acked = [pending_future() for _ in range(100)]
    for future in acked:
        deadlines.add(future)
        future.set_result("ack")
    last = pending_future()
    deadlines.add(last)
    assert len(deadlines) == 1, "the acked ones at the head were dropped"
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(last, WAIT)
    assert all(future.result() == "ack" for future in acked)


async def test_one_timer_serves_deadlines_that_come_later() -> None:
    deadlines = AckDeadlines(0.1)
    first = pending_future()
    deadlines.add(first)
    await asyncio.sleep(0.05)
    second = pending_future()
    deadlines.add(second)
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(first, WAIT)
    expired_first = time.monotonic()
    assert not second.done(), "the second deadline is later than the first"
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(second, WAIT)
    assert time.monotonic() - expired_first >= 0.02


async def test_a_future_acked_between_two_deadlines_keeps_its_ack() -> None:
    deadlines = AckDeadlines(0.05)
    waiting, acked = pending_future(), pending_future()
    deadlines.add(acked)
    deadlines.add(waiting)
    acked.set_result("ack")
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(waiting, WAIT)
    assert acked.result() == "ack"


async def test_cancel_drops_the_timer() -> None:
    deadlines = AckDeadlines(0.05)
    future = pending_future()
    deadlines.add(future)
    deadlines.cancel()
    await asyncio.sleep(0.15)
    assert not future.done()
    future.cancel()


async def test_a_send_whose_ack_never_comes_fails_after_the_publish_timeout(
    make_transport: MakeTransport, names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = make_transport(publish_timeout=0.2, reconnect_time_wait=0.05)
    topic = names.topic()
    await transport.send(message(topic, "k0"))  # the stream exists, the connection is up
    js = await transport.jetstream()
    never: list[asyncio.Future[Any]] = []

    async def publish_async(*args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        future = pending_future()
        never.append(future)
        return future

    monkeypatch.setattr(js, "publish_async", publish_async)
    started = time.monotonic()
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(transport.send(message(topic, "k1")), WAIT)
    assert time.monotonic() - started >= 3 * 0.2 - 0.05, "three attempts, each waited for its ack"

    async def all_expired() -> bool:
        return len(never) == 3 and all(future.done() for future in never)

    await eventually(all_expired, WAIT, "every attempt expired")
