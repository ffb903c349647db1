"""The shared test helpers: eventually and opened."""

from __future__ import annotations

import pytest

from wow_core.testing.support import ConformanceTimeout, eventually, opened
from wow_core.transport import InMemoryTransport, TransportMessage


async def test_eventually_returns_once_the_check_holds() -> None:
    calls = 0

    async def third_time() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 3

    await eventually(third_time, timeout=5, every=0)
    assert calls == 3


async def test_eventually_fails_naming_what_did_not_happen() -> None:
    async def never() -> bool:
        return False

    with pytest.raises(ConformanceTimeout, match="the moon to rise"):
        await eventually(never, timeout=0.05, what="the moon to rise", every=0.01)


async def test_opened_is_ready_and_processing() -> None:
    transport = InMemoryTransport()
    try:
        receiver = await opened(transport, "g", ["wow.a.b.command"])
        assert receiver.processing_open
        await transport.send(TransportMessage("wow.a.b.command", "k", "{}", 1))
        assert (await anext(receiver)).payload == "{}"
    finally:
        await transport.close()
