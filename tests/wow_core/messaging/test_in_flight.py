"""Quiescence waits for exactly the exchanges that were handed out and not settled."""

from __future__ import annotations

import asyncio

from wow_core.messaging.in_flight import InFlight


async def test_settled_at_once_when_nothing_is_in_flight() -> None:
    assert await InFlight().settled(0.01)


async def test_settled_waits_for_the_last_leave() -> None:
    in_flight = InFlight()
    in_flight.enter()
    in_flight.enter()
    waiting = asyncio.create_task(in_flight.settled(5))
    await asyncio.sleep(0)
    in_flight.leave()
    await asyncio.sleep(0)
    assert not waiting.done()
    in_flight.leave()
    assert await waiting


async def test_settled_reports_false_after_its_timeout() -> None:
    in_flight = InFlight()
    in_flight.enter()
    assert not await in_flight.settled(0.01)
    assert in_flight.count == 1
