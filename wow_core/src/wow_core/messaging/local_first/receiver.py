"""The merged receiver of a local-first bus: local and distributed exchanges in one stream.

A distributed copy marked ``local_first=true`` of an aggregate this service owns was
admitted by this service's local receivers (in this process or in a replica): the merged
receiver acknowledges it and does not hand it to the consumer. A copy marked ``false``
(refused, rejected, timed out, Void) is delivered like any distributed message.

A local exchange confirms its admission when it is acknowledged and rejects it when it is
released unacknowledged (a withheld acknowledgement), so its distributed copy then goes
out unmarked and the transport delivers the message again. The merged receiver pulls the
local side only while its consumer is waiting for the next exchange (a message pulled and
never handed on would hold its copy until the close): a local pull still pending when a
distributed exchange arrives first is cancelled. A local receiver must therefore lose
nothing and take nothing when a pending ``__anext__`` is cancelled (the in-memory
receivers guarantee it). Should a cancelled pull still complete with an exchange, it is
kept for the consumer's next ``__anext__``; when the receiver quiesces or closes first
(or meanwhile) it is released unacknowledged and logged: its admission is rejected, so a
receiver stopping just as its local side took a message sends that message's copy
unmarked, and the transport delivers it. Nothing taken locally is lost by a stop.

The distributed side is pulled by a task of its own, which acknowledges and drops the
copies handled locally without waking the consumer, and holds at most one other exchange
ahead for it; if the receiver closes before delivering that one, it is released
unacknowledged and the backend redelivers it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar

from wow_core.messaging.contract import MessageExchange, MessageReceiver
from wow_core.messaging.local_first.aggregates import LocalAggregates
from wow_core.messaging.local_first.observer import LocalFirstObserver

E = TypeVar("E", bound=MessageExchange[Any])

log = logging.getLogger("wow_core.messaging.local_first")


class _End:
    """The sentinel a pull returns when its source ended."""


_END = _End()


def _resolve(future: asyncio.Future[None], _: object) -> None:
    if not future.done():
        future.set_result(None)


async def _pull(iterator: AsyncIterator[E]) -> E | _End:
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return _END


class LocalFirstReceiver(Generic[E]):
    """A :class:`~wow_core.messaging.contract.MessageReceiver` over a local and a distributed one.

    ``local`` is ``None`` when the subscription names no local aggregate; ``observer``
    (its bus's) hears of every copy dropped as handled locally (``on_filtered``).
    """

    def __init__(
        self,
        local: MessageReceiver[E] | None,
        distributed: MessageReceiver[E],
        *,
        is_local: LocalAggregates,
        observer: LocalFirstObserver | None = None,
    ) -> None:
        self._local = local
        self._distributed = distributed
        self._is_local = is_local
        self._observer = observer
        self._local_it: AsyncIterator[E] | None = None
        self._local_ended = local is None
        self._distributed_ended = False
        self._distributed_error: BaseException | None = None
        self._pump: asyncio.Task[None] | None = None
        self._ahead: E | None = None
        """The distributed exchange the pump pulled for the consumer."""
        self._taken: asyncio.Future[None] | None = None
        """Resolved when the consumer took ``_ahead``: the pump may pull again."""
        self._wake: asyncio.Future[None] | None = None
        """What a waiting consumer waits on."""
        self._held: deque[E] = deque()
        self._closed = False
        self._quiescing = False
        self._watch: Callable[[Callable[[], None]], None] | None = None
        """``call_when_pullable`` of the local receiver, when it has one."""
        self._watching = False
        self._local_pullable = False

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
        """Stop taking new work (the iteration ends), then wait for in-flight exchanges.

        The distributed exchange pulled ahead, if any, is released unacknowledged, and so
        is a local exchange taken but not delivered (its admission is rejected: its
        distributed copy goes out unmarked), now or when a local pull cancelled too late
        completes.
        """
        self._quiescing = True
        self._release_held("quiescing")
        self._wake_consumer()
        await self._stop_pump()
        if self._local is None:
            return await self._distributed.quiesce(timeout)
        results = await asyncio.gather(self._local.quiesce(timeout), self._distributed.quiesce(timeout))
        return all(results)

    async def _stop_pump(self) -> None:
        pump = self._pump
        self._pump = None
        if pump is not None:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
        self._distributed_ended = True
        if self._ahead is not None:
            self._ahead.release()
            self._ahead = None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._stop_pump()
        self._release_held("closed")
        self._wake_consumer()
        closing = [self._distributed.close()]
        if self._local is not None:
            closing.append(self._local.close())
        await asyncio.gather(*closing)

    def _release_held(self, state: str) -> None:
        while self._held:
            self._release_undelivered(self._held.popleft(), state)

    @staticmethod
    def _release_undelivered(exchange: E, state: str) -> None:
        """Release a local exchange the consumer will never get: its admission is rejected."""
        log.warning(
            "local-first receiver %s with %s taken locally but not delivered; released, "
            "so its distributed copy goes out unmarked",
            state,
            exchange,
        )
        exchange.release()

    # -- the distributed side -----------------------------------------------------------

    def _handled_locally(self, exchange: E) -> bool:
        message = exchange.message
        return bool(message.header.local_first and self._is_local(message.aggregate_id.named_aggregate))

    def _wake_consumer(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _pump_distributed(self) -> None:
        """Pull the distributed side: drop copies handled locally, hand the rest over one by one."""
        iterator = self._distributed.__aiter__()
        loop = asyncio.get_running_loop()
        try:
            while True:
                found = await _pull(iterator)
                if isinstance(found, _End):
                    break
                if self._handled_locally(found):
                    try:
                        await found.ack()
                    except Exception as error:
                        log.warning("acknowledging the locally handled copy %s failed: %s", found, error)
                    if self._observer is not None:
                        self._observer.on_filtered(found)
                    continue
                taken = self._taken = loop.create_future()
                self._ahead = found
                self._wake_consumer()
                await taken
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self._distributed_error = error
        finally:
            self._distributed_ended = True
            self._wake_consumer()

    def _take_ahead(self) -> E | None:
        found = self._ahead
        if found is not None:
            self._ahead = None
            taken = self._taken
            if taken is not None and not taken.done():
                taken.set_result(None)
        return found

    # -- iteration ----------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[E]:
        return self

    async def __anext__(self) -> E:
        """The next exchange: a local one, or a distributed one not handled locally."""
        loop = asyncio.get_running_loop()
        while True:
            if self._held:
                return self._held.popleft()
            ahead = self._take_ahead()
            if ahead is not None:
                return ahead
            if self._distributed_error is not None:
                error, self._distributed_error = self._distributed_error, None
                raise error
            if self._closed or self._quiescing or (self._local_ended and self._distributed_ended):
                raise StopAsyncIteration
            if self._pump is None and not self._distributed_ended:
                self._pump = loop.create_task(self._pump_distributed(), name="local-first distributed pump")
            if not self._local_ended:
                if self._local_it is None:
                    assert self._local is not None
                    self._local_it = self._local.__aiter__()
                    self._watch = getattr(self._local, "call_when_pullable", None)
                if self._watch is not None:
                    # The local receiver tells when a pull would not wait: nothing is taken
                    # (admitted) before this consumer asks for it.
                    if not self._local_pullable and not self._watching:
                        self._watching = True
                        self._watch(self._on_local_pullable)
                    if self._local_pullable:
                        self._local_pullable = False
                        found = await _pull(self._local_it)
                        if isinstance(found, _End):
                            self._local_ended = True
                            continue
                        return found
                elif self._local_has_pending():
                    # The local sink holds a message: the pull returns without waiting.
                    found = await _pull(self._local_it)
                    if isinstance(found, _End):
                        self._local_ended = True
                        continue
                    return found
            wake = self._wake = loop.create_future()
            local_next: asyncio.Task[E | _End] | None = None
            if not self._local_ended and self._watch is None:
                assert self._local_it is not None
                local_next = loop.create_task(_pull(self._local_it))
                local_next.add_done_callback(functools.partial(_resolve, wake))
            try:
                await wake
            finally:
                self._wake = None
                if local_next is not None and not local_next.done():
                    local_next.cancel()
                    local_next.add_done_callback(self._keep_late)
            if local_next is not None and local_next.done():
                found = local_next.result()
                if isinstance(found, _End):
                    self._local_ended = True
                    continue
                return found

    def _on_local_pullable(self) -> None:
        self._watching = False
        self._local_pullable = True
        self._wake_consumer()

    def _local_has_pending(self) -> bool:
        """Whether the local receiver can yield at once (receivers that report ``pending``)."""
        local = self._local
        return local is not None and local.processing_open and getattr(local, "pending", 0) > 0

    def _keep_late(self, task: asyncio.Task[E | _End]) -> None:
        """A local pull cancelled too late already took its exchange: keep it for the consumer,
        or release it when this receiver stopped meanwhile (the consumer will never get it)."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("the local receiver failed: %s: %s", type(error).__name__, error)
            return
        found = task.result()
        if isinstance(found, _End):
            self._local_ended = True
        elif self._closed or self._quiescing:
            self._release_undelivered(found, "closed" if self._closed else "quiescing")
        else:
            self._held.append(found)
            self._wake_consumer()
