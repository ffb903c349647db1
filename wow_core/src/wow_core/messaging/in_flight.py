"""Counting the exchanges a receiver handed out and that are not settled yet."""

from __future__ import annotations

import asyncio


class InFlight:
    """What a receiver's quiescence waits for.

    ``enter()`` when an exchange is handed to the consumer, ``leave()`` when it is acked or
    released; :meth:`settled` waits until the count is back at zero.
    """

    __slots__ = ("_settled", "count")

    def __init__(self) -> None:
        self.count = 0
        self._settled: asyncio.Event | None = None

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0 and self._settled is not None:
            self._settled.set()

    async def settled(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for nothing to be in flight; True when nothing is."""
        if self.count == 0:
            return True
        if self._settled is None:
            self._settled = asyncio.Event()
        try:
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        except TimeoutError:
            return self.count == 0
        return True
