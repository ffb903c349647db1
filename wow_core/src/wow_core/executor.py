"""The protocol of what the dispatchers run their work on.

The command and event dispatchers submit one piece of work per exchange under a key (an
aggregate id): :class:`Executor` is all they need. The runtime's
:class:`~wow_core.runtime.keyed_executor.KeyedExecutor` (one key's work in order,
different keys in parallel, bounded in total) is the implementation; it lives in
``runtime`` and the dispatchers do not import it. :class:`NowaitExecutor` is the
optional fast path it also offers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol, runtime_checkable


class Executor(Protocol):
    """Runs work serially per key and in parallel across keys."""

    async def submit(self, key: Hashable, work: Callable[[], Awaitable[Any]]) -> None:
        """Queue ``work`` on the lane of ``key``; return once accepted (may wait for capacity)."""
        ...


@runtime_checkable
class NowaitExecutor(Executor, Protocol):
    """An executor that can also admit without awaiting when a slot is free."""

    def submit_nowait(self, key: Hashable, work: Callable[[], Awaitable[Any]]) -> bool:
        """Admit ``work`` now and return True, or return False (then ``submit`` waits)."""
        ...
