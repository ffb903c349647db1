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

Each node reads in a consumer group of its own (``<context>.ledger-<node>``), from the
topic's first record. The topic's records must be retained as long as an entry may stay
parked: on Kafka give ``<prefix><context>.ledger`` an unlimited retention
(``retention.ms=-1``); it stays small (parks and settles are rare, markers one per
assignment). A write is acknowledged by the broker before the park or settle counts. A node
applies its own writes when it makes them and skips them when it reads them back (a
lagging read must not bring back an entry this node settled since).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any

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


class LedgerJournal:
    """The durable ledger of the context ``context_name`` (module doc), applied to ``ledger``."""

    def __init__(
        self,
        transport: Transport,
        context_name: str,
        ledger: FailureLedger,
        *,
        prefix: str = "wow.",
        node_id: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.transport = transport
        self.topic = ledger_topic(context_name, prefix)
        self.ledger = ledger
        self.group = f"{context_name}.ledger-{node_id or uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self._receiver: TransportReceiver | None = None
        self._tail: asyncio.Task[None] | None = None
        self._markers: dict[str, asyncio.Future[None]] = {}
        self._write = asyncio.Lock()  # one write at a time: the topic's order is the writes' order
        self.applied = 0

    async def start(self) -> None:
        """Read the ledger topic from its start and keep reading; returns once caught up."""
        if self._receiver is not None:
            return
        receiver = self.transport.open(self.group, [self.topic])
        self._receiver = receiver
        await receiver.ready()
        receiver.open_processing()
        self._tail = asyncio.get_running_loop().create_task(self._read(receiver), name=self.group)
        await self.caught_up()

    async def close(self) -> None:
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

    async def park(self, entry: ParkedAggregate) -> None:
        """Write the park of ``entry`` (broker-acknowledged when this returns)."""
        self.ledger.park(entry)
        await self._send({"op": "park", **parked_to_json(entry)})

    async def settle(self, entry: ParkedAggregate, how: str) -> None:
        """Write that ``entry`` left the ledger (``how``: ``retry``, ``skip``)."""
        self.ledger.discard_at(entry.name, entry.aggregate_id, entry.from_position)
        data = parked_to_json(entry)
        await self._send(
            {
                "op": "settle",
                "how": how,
                "name": data["name"],
                "aggregate": data["aggregate"],
                "tenant": data["tenant"],
                "from_position": data["from_position"],
            }
        )

    async def caught_up(self) -> None:
        """Return once every write the broker acknowledged before this call was read here.
        ``TimeoutError`` after ``timeout`` seconds (the journal cannot be read)."""
        marker = uuid.uuid4().hex
        seen: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._markers[marker] = seen
        try:
            await self._send({"op": "marker", "id": marker})
            async with asyncio.timeout(self.timeout):
                await seen
        finally:
            self._markers.pop(marker, None)

    async def _send(self, record: dict[str, Any]) -> None:
        payload = json.dumps({**record, "node": self.group}, separators=(",", ":"))
        async with self._write:
            await self.transport.send(TransportMessage(self.topic, LEDGER_KEY, payload, now_ms()))

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
        if data.get("node") == self.group:
            return  # this node's own write: applied when it was written
        self.applied += 1
        if op == "park":
            self.ledger.park(parked_from_json(data))
        elif op == "settle":
            self.ledger.discard_at(str(data["name"]), aggregate_from_json(data), str(data["from_position"]))
        else:
            raise ValueError(f"unknown op {op!r}")
