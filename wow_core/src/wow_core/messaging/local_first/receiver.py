"""The merged receiver of a local-first bus: local and distributed exchanges in one stream.

A distributed copy marked ``local_first=true`` of an aggregate this service owns was
admitted by this service's local receivers (in this process or in a replica): the merged
receiver acknowledges it and does not hand it to the consumer. A copy marked ``false``
(refused, rejected, timed out, Void) is delivered like any distributed message.

Pulling from the local receiver is what confirms local admission, so the merged receiver
pulls the local side only while its consumer is waiting for the next exchange: a local
pull still pending when a distributed exchange wins the race is cancelled. A local
receiver must therefore lose nothing and admit nothing when a pending ``__anext__`` is
cancelled (the in-memory receivers guarantee it). One distributed exchange may be pulled
ahead; if the receiver closes before delivering it, it is released unacknowledged and the
backend redelivers it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

from wow_core.messaging.contract import MessageExchange, MessageReceiver
from wow_core.messaging.local_first.aggregates import LocalAggregates
from wow_core.metrics import Metrics, NoopMetrics

E = TypeVar("E", bound=MessageExchange[Any])

log = logging.getLogger("wow_core.messaging.local_first")

FILTERED = "wow.local_first.filtered"


class _End:
    """The sentinel a pull returns when its source ended."""


_END = _End()


async def _pull(iterator: AsyncIterator[E]) -> E | _End:
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return _END


class LocalFirstReceiver(Generic[E]):
    """A :class:`~wow_core.messaging.contract.MessageReceiver` over a local and a distributed one.

    ``local`` is ``None`` when the subscription names no local aggregate.
    """

    def __init__(
        self,
        local: MessageReceiver[E] | None,
        distributed: MessageReceiver[E],
        *,
        is_local: LocalAggregates,
        metrics: Metrics | None = None,
        bus_name: str = "",
    ) -> None:
        self._local = local
        self._distributed = distributed
        self._is_local = is_local
        self._metrics: Metrics = metrics or NoopMetrics()
        self._tags = {"bus": bus_name}
        self._local_it: AsyncIterator[E] | None = None
        self._distributed_it: AsyncIterator[E] | None = None
        self._local_ended = local is None
        self._distributed_ended = False
        self._distributed_next: asyncio.Task[E | _End] | None = None
        self._held: deque[E] = deque()
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------

    async def ready(self) -> None:
        if self._local is None:
            await self._distributed.ready()
        else:
            await asyncio.gather(self._local.ready(), self._distributed.ready())

    @property
    def processing_open(self) -> bool:
        local_open = self._local is None or self._local.processing_open
        return local_open and self._distributed.processing_open

    def open_processing(self) -> None:
        if self._local is not None:
            self._local.open_processing()
        self._distributed.open_processing()

    @property
    def in_flight(self) -> int:
        local = self._local.in_flight if self._local is not None else 0
        return local + self._distributed.in_flight

    async def quiesce(self, timeout: float | None = None) -> bool:
        if self._local is None:
            return await self._distributed.quiesce(timeout)
        results = await asyncio.gather(self._local.quiesce(timeout), self._distributed.quiesce(timeout))
        return all(results)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pending = self._distributed_next
        self._distributed_next = None
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
            if not pending.cancelled() and pending.exception() is None:
                ahead = pending.result()
                if not isinstance(ahead, _End):
                    ahead.release()
        for exchange in self._held:
            log.warning(
                "local-first receiver closed with %s admitted locally but not yet delivered", exchange
            )
            exchange.release()
        self._held.clear()
        closing = [self._distributed.close()]
        if self._local is not None:
            closing.append(self._local.close())
        await asyncio.gather(*closing)

    # -- iteration ----------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[E]:
        return self

    async def __anext__(self) -> E:
        while True:
            exchange, distributed = await self._next()
            if distributed and self._handled_locally(exchange):
                try:
                    await exchange.ack()
                except Exception as error:
                    log.warning("acknowledging the locally handled copy %s failed: %s", exchange, error)
                self._metrics.increment(FILTERED, 1.0, self._tags)
                continue
            return exchange

    def _handled_locally(self, exchange: E) -> bool:
        message = exchange.message
        return bool(message.header.local_first and self._is_local(message.aggregate_id.named_aggregate))

    def _iterators(self) -> tuple[AsyncIterator[E] | None, AsyncIterator[E]]:
        if self._distributed_it is None:
            self._distributed_it = self._distributed.__aiter__()
        if self._local_it is None and self._local is not None:
            self._local_it = self._local.__aiter__()
        return self._local_it, self._distributed_it

    async def _next(self) -> tuple[E, bool]:
        """The next exchange and whether it came from the distributed side."""
        while True:
            if self._held:
                return self._held.popleft(), False
            if self._closed or (self._local_ended and self._distributed_ended):
                raise StopAsyncIteration
            local_it, distributed_it = self._iterators()
            if self._distributed_ended:
                assert local_it is not None
                found = await _pull(local_it)
                if isinstance(found, _End):
                    self._local_ended = True
                    continue
                return found, False
            distributed_next = self._distributed_next
            if distributed_next is None:
                distributed_next = self._distributed_next = asyncio.ensure_future(_pull(distributed_it))
            if self._local_ended:
                # asyncio.wait never cancels what it waits for: a cancelled consumer leaves
                # the pull running for the next call.
                await asyncio.wait((distributed_next,))
            else:
                assert local_it is not None
                local_next = asyncio.ensure_future(_pull(local_it))
                try:
                    await asyncio.wait((local_next, distributed_next), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not local_next.done():
                        local_next.cancel()
                        local_next.add_done_callback(self._keep_late)
                if local_next.done():
                    found = local_next.result()
                    if isinstance(found, _End):
                        self._local_ended = True
                        continue
                    return found, False
            self._distributed_next = None
            found = distributed_next.result()
            if isinstance(found, _End):
                self._distributed_ended = True
                continue
            return found, True

    def _keep_late(self, task: asyncio.Task[E | _End]) -> None:
        """A local pull cancelled too late already took (and admitted) its exchange: keep it."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("the local receiver failed: %s: %s", type(error).__name__, error)
            return
        found = task.result()
        if isinstance(found, _End):
            self._local_ended = True
        else:
            self._held.append(found)
