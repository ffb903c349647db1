"""``LedgerJournal``: the failure ledger of a context made durable and cluster-wide.

Why a topic, not the event store: the ledger is read as a whole by every node (``wow ledger
list`` answers for every partition, a new owner must know what is parked before it runs a
partition's commands) and written rarely (a park, a retry, a skip). The event store offers
neither a scan of keys nor a table that is not an aggregate's stream; a topic of the
context's own transport offers both: every node reads it from its start into its
:class:`~wow_core.cluster.ledger.FailureLedger`, and keeps reading it.

The journal is the topic ``<prefix><context>.ledger``. Every record has the one key
``ledger``, so the records are in one partition, in one order: a ``park`` (the
:class:`~wow_core.cluster.ledger.ParkedAggregate` as :func:`~wow_core.cluster.ledger.parked_to_json`),
a ``settle`` (the entry left the ledger: ``retry``, ``skip``) and ``marker`` records. A
``marker`` is the read barrier: :meth:`LedgerJournal.caught_up` sends one and returns when
this node has read it back, so every park or settle acknowledged by the broker before it
is in this node's ledger. The intake waits for it before it runs the first command of a
partition it was given, so a new owner (after a handover, a crash, a restart) holds a
parked aggregate's commands instead of running them.

**Retention, not compaction.** The topic keeps every record: a transport that can say so
(:class:`RetainedTopics`, Kafka's ``ensure_retained``) creates it with ``retention.ms=-1``
and refuses to start on an existing one whose configuration would delete records (a
finite retention, compaction). Compaction was the other design (a key per entry,
tombstones on settle) and is not used: the read barrier needs every record of the
journal in one partition, in one order, which one key gives and a key per entry does not;
a tombstone is a record without a value, which the Transport SPI (strings) cannot send;
and under compaction the one key ``ledger`` would keep only the last record. The topic
stays small: one record per park, retry and skip, one marker per start and per partition
given to a node.

**Read in no group.** A transport that offers it (:class:`StartReading`, Kafka's
``read_from_start``) reads every partition of the topic from its first record without a
consumer group: nothing is committed (every start reads the whole topic again) and
nothing is left on the broker, however many nodes ever started. Another transport (the
in-memory one, one process) reads in a group of its own per node (``<context>.ledger-<node>``).

**Writes are retried, in order.** A park or settle is applied to this node's ledger at
once and queued; one writer sends the queue in order, retrying a write the broker does not
take with a backoff (``retry_backoff`` doubling up to ``max_retry_backoff``, each failure
logged) until it is acknowledged; :meth:`LedgerJournal.park` and
:meth:`LedgerJournal.settle` return a future done then. Until then the entry is held by
this node only, and the intake settles nothing that depends on the write (the retried
aggregate's commands, the skipped command, the receipt of a ledger command), so a crash
meanwhile loses nothing: the commands are delivered again and the journal still holds the
park. :meth:`LedgerJournal.close` gives the queue ``timeout`` seconds more, then logs
what it did not write (those entries' commands run or are held again after a restart).
A node applies its own writes when it makes them and skips them when it reads them back
(a lagging read must not bring back an entry this node settled since).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from wow_core.cluster.ledger import (
    FailureLedger,
    ParkedAggregate,
    aggregate_from_json,
    parked_from_json,
    parked_to_json,
)
from wow_core.model import now_ms
from wow_core.transport.spi import Transport, TransportMessage, TransportReceiver

log = logging.getLogger(__name__)

LEDGER_KEY = "ledger"


def ledger_topic(context_name: str, prefix: str = "wow.") -> str:
    """``<prefix><context>.ledger``: the durable failure ledger of the context."""
    return f"{prefix}{context_name}.ledger"


@runtime_checkable
class RetainedTopics(Protocol):
    """A transport that can keep a topic's records forever (Kafka).

    ``ensure_retained(topic)`` creates ``topic`` when missing with a configuration under
    which the broker deletes nothing, and raises when the existing topic's configuration
    would delete records, saying what to set."""

    async def ensure_retained(self, topic: str) -> None: ...


@runtime_checkable
class StartReading(Protocol):
    """A transport that reads topics from their first record in no group (Kafka).

    ``read_from_start(topics)`` is a :class:`~wow_core.transport.spi.TransportReceiver` of
    every partition of ``topics`` from the first record; its acknowledgements do nothing
    and it leaves nothing on the broker when it closes."""

    def read_from_start(self, topics: Sequence[str]) -> TransportReceiver: ...


class JournalClosedError(RuntimeError):
    """The journal closed before the broker took this write."""


class _Write:
    __slots__ = ("done", "payload", "what")

    def __init__(self, payload: str, what: str, done: asyncio.Future[None]) -> None:
        self.payload = payload
        self.what = what
        self.done = done


class LedgerJournal:
    """The durable ledger of the context ``context_name`` (module doc), applied to ``ledger``.

    ``timeout`` bounds the read barrier (:meth:`caught_up`) and the last writes at
    :meth:`close`; ``retry_backoff`` and ``max_retry_backoff`` pace the retries of a write
    the broker did not take; ``sleep`` is that wait (a test may pass a faster one)."""

    def __init__(
        self,
        transport: Transport,
        context_name: str,
        ledger: FailureLedger,
        *,
        prefix: str = "wow.",
        node_id: str | None = None,
        timeout: float = 30.0,
        retry_backoff: float = 0.2,
        max_retry_backoff: float = 5.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not retry_backoff > 0 or not max_retry_backoff > 0:
            raise ValueError("the journal's retry backoffs must be > 0")
        self.transport = transport
        self.topic = ledger_topic(context_name, prefix)
        self.ledger = ledger
        self.node = f"{context_name}.ledger-{node_id or uuid.uuid4().hex[:12]}"
        """This node's name in the records it writes (and its group, on a transport that
        cannot read without one)."""
        self.timeout = timeout
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self._sleep = sleep
        self._receiver: TransportReceiver | None = None
        self._tail: asyncio.Task[None] | None = None
        self._markers: dict[str, asyncio.Future[None]] = {}
        self._queue: deque[_Write] = deque()  # the writes not yet acknowledged, in call order
        self._queued = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closed = False
        self.applied = 0
        """Records of other nodes applied to this node's ledger."""
        self.write_failures = 0
        """Writes the broker did not take (each retried)."""

    @property
    def unwritten(self) -> int:
        """Writes queued and not yet acknowledged by the broker."""
        return len(self._queue)

    async def start(self) -> None:
        """Make sure the topic keeps its records, read it from its start and keep reading;
        returns once caught up."""
        if self._receiver is not None:
            return
        self._closed = False
        if isinstance(self.transport, RetainedTopics):
            await self.transport.ensure_retained(self.topic)
        if isinstance(self.transport, StartReading):
            receiver = self.transport.read_from_start([self.topic])
        else:
            receiver = self.transport.open(self.node, [self.topic])
        self._receiver = receiver
        await receiver.ready()
        receiver.open_processing()
        self._tail = asyncio.get_running_loop().create_task(self._read(receiver), name=self.node)
        await self.caught_up()

    async def close(self) -> None:
        """Give the queued writes ``timeout`` seconds, then stop reading and writing."""
        self._closed = True
        if self._queue and self._writer is not None:
            last = self._queue[-1].done
            try:
                async with asyncio.timeout(self.timeout):
                    await asyncio.shield(last)
            except TimeoutError:
                pass
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        for write in self._queue:
            log.error(
                "%s: the broker did not take the %s before the journal closed: held on no node; "
                "after a restart its command runs (a park) or is held (a retry, a skip) again",
                self.topic,
                write.what,
            )
            if not write.done.done():
                write.done.set_exception(JournalClosedError(f"{self.topic}: {write.what} not written"))
                write.done.exception()  # retrieved: nobody need wait for it
        self._queue.clear()
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail
            self._tail = None
        for marker in self._markers.values():
            marker.cancel()
        self._markers.clear()
        if self._receiver is not None:
            await self._receiver.close()
            self._receiver = None

    # -- writing ------------------------------------------------------------------------

    def park(self, entry: ParkedAggregate) -> asyncio.Future[None]:
        """Park ``entry`` in this node's ledger and queue its write; the future is done once
        the broker acknowledged it (retried until then)."""
        self.ledger.park(entry)
        return self._enqueue({"op": "park", **parked_to_json(entry)}, f"park of {entry.aggregate_id}")

    def settle(self, entry: ParkedAggregate, how: str) -> asyncio.Future[None]:
        """Take ``entry`` out of this node's ledger and queue the write that it left
        (``how``: ``retry``, ``skip``); the future is done once the broker acknowledged it."""
        self.ledger.discard_at(entry.name, entry.aggregate_id, entry.from_position)
        data = parked_to_json(entry)
        return self._enqueue(
            {
                "op": "settle",
                "how": how,
                "name": data["name"],
                "aggregate": data["aggregate"],
                "tenant": data["tenant"],
                "from_position": data["from_position"],
            },
            f"{how} of {entry.aggregate_id}",
        )

    async def caught_up(self) -> None:
        """Return once every write the broker acknowledged before this call was read here.
        ``TimeoutError`` after ``timeout`` seconds (the journal cannot be written or read)."""
        marker = uuid.uuid4().hex
        seen: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._markers[marker] = seen
        try:
            async with asyncio.timeout(self.timeout):
                await asyncio.shield(self._enqueue({"op": "marker", "id": marker}, "read barrier"))
                await seen
        finally:
            self._markers.pop(marker, None)

    def _enqueue(self, record: dict[str, Any], what: str) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if self._closed and self._writer is None:
            done.set_exception(JournalClosedError(f"{self.topic} is closed: {what} not written"))
            done.exception()  # retrieved: a caller that does not wait for it is not warned
            return done
        payload = json.dumps({**record, "node": self.node}, separators=(",", ":"))
        self._queue.append(_Write(payload, what, done))
        self._queued.set()
        if self._writer is None:
            self._writer = loop.create_task(self._write_all(), name=f"{self.node}-writer")
        return done

    async def _write_all(self) -> None:
        """Send the queue in order; a write the broker does not take is retried."""
        while True:
            if not self._queue:
                self._queued.clear()
                await self._queued.wait()
                continue
            write = self._queue[0]
            attempt = 0
            while True:
                message = TransportMessage(self.topic, LEDGER_KEY, write.payload, now_ms())
                try:
                    await self.transport.send(message)
                    break
                except Exception as error:
                    attempt += 1
                    self.write_failures += 1
                    backoff = min(self.retry_backoff * 2 ** (attempt - 1), self.max_retry_backoff)
                    log.warning(
                        "%s: the broker did not take the %s (attempt %d), again in %.2f s: %r",
                        self.topic,
                        write.what,
                        attempt,
                        backoff,
                        error,
                    )
                    await self._sleep(backoff)
            self._queue.popleft()
            if not write.done.done():
                write.done.set_result(None)

    # -- reading ------------------------------------------------------------------------

    async def _read(self, receiver: TransportReceiver) -> None:
        async for record in receiver:
            try:
                self._apply(json.loads(record.payload))
            except (KeyError, ValueError, TypeError, AttributeError) as error:
                log.error("%s: not a ledger record at %s (%s); skipped", self.topic, record.position, error)
            await record.ack()

    def _apply(self, data: dict[str, Any]) -> None:
        op = data["op"]
        if op == "marker":
            seen = self._markers.get(data["id"])
            if seen is not None and not seen.done():
                seen.set_result(None)
            return
        if data.get("node") == self.node:
            return  # this node's own write: applied when it was written
        self.applied += 1
        if op == "park":
            self.ledger.park(parked_from_json(data))
        elif op == "settle":
            self.ledger.discard_at(str(data["name"]), aggregate_from_json(data), str(data["from_position"]))
        else:
            raise ValueError(f"unknown op {op!r}")


__all__ = ["JournalClosedError", "LedgerJournal", "RetainedTopics", "StartReading", "ledger_topic"]
