"""``all_or_none`` and ``together``: awaitables run at once; the first failure cancels the
others.

Start-up uses it to make receivers ready concurrently: each consumer group join waits for
its broker's rebalance (tansu holds a joining group for half the session timeout, Kafka
for ``group.initial.rebalance.delay.ms``), so joined one after another they cost one such
wait per group; joined at once, one wait in all.

Guarantees:

- every awaitable is started before the first one is waited on, in the order given;
- when all succeed, their results are returned in that order;
- when one fails (or is cancelled by someone else), the others still running are
  cancelled and awaited, then :class:`TogetherError` is raised with its ``index`` and
  ``error`` (the first to fail, in time; another failure meanwhile is retrieved, not
  raised);
- when the caller is cancelled, every one still running is cancelled and awaited too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any


class TogetherError(Exception):
    """The first failure of :func:`all_or_none`: ``index`` of the awaitable and ``error``."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


async def all_or_none(awaitables: Sequence[Awaitable[Any]]) -> list[Any]:
    """The results of ``awaitables`` run at once; :class:`TogetherError` on the first failure."""
    if not awaitables:
        return []
    futures = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    try:
        pending = set(futures)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for index, future in enumerate(futures):
                if future not in done:
                    continue
                if future.cancelled():  # cancelled by someone else: a failure like any other
                    raise TogetherError(index, asyncio.CancelledError())
                error = future.exception()
                if error is not None:
                    raise TogetherError(index, error)
        return [future.result() for future in futures]
    finally:
        running = [future for future in futures if not future.done()]
        for future in running:
            future.cancel()
        if running:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*running, return_exceptions=True)
        for future in futures:  # retrieved, so that none is reported as never retrieved
            if future.done() and not future.cancelled():
                future.exception()


async def together(awaitables: Iterable[Awaitable[Any]]) -> None:
    """:func:`all_or_none` for callers that need no results nor which one failed: the
    first failure itself is raised (its traceback and cause intact)."""
    failure: TogetherError | None = None
    try:
        await all_or_none(list(awaitables))
    except TogetherError as failed:
        failure = failed
    if failure is not None:  # raised out of the handler: the error's own context kept
        raise failure.error
