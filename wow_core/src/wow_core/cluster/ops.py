"""The ops side of the failure ledger: send a ``wow.ledger.*`` system command to an
intake and await its receipt (what ``wow ledger list | retry | skip`` does).

The command is addressed to the parked aggregate and keyed by its id, so it lands on the
partition of that aggregate, at the node that owns it and holds its parked entry. A
``list`` answers with the parked aggregates of every partition when the intake keeps its
ledger in the ledger topic (:class:`~wow_core.cluster.journal.LedgerJournal`, the default
but on the in-memory transport), else with those of that node. The receipt comes back on
``<prefix><reply_context>.receipts``, read in a group of its own for this request.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Literal

from wow_core.cluster.wire import (
    LEDGER_BODIES,
    CommandReceipt,
    CommandWire,
    LedgerList,
    LedgerRetry,
    LedgerSkip,
    ReplyTo,
    WireError,
    commands_topic,
    receipts_topic,
    register_ledger_bodies,
)
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, now_ms
from wow_core.transport.spi import Transport, TransportMessage

log = logging.getLogger(__name__)

LedgerAction = Literal["list", "retry", "skip"]
_BODIES: dict[str, type[Any]] = {"list": LedgerList, "retry": LedgerRetry, "skip": LedgerSkip}


async def ledger_request(
    transport: Transport,
    action: LedgerAction,
    aggregate_id: AggregateId,
    *,
    name: str = "",
    reply_context: str = "ops",
    prefix: str = "wow.",
    timeout: float = 30.0,
    registry: BodyTypeRegistry | None = None,
) -> CommandReceipt:
    """Send ``wow.ledger.<action>`` for ``aggregate_id`` to its context's intake and return
    the receipt. ``TimeoutError`` when none came within ``timeout`` seconds (no node owns
    the partition, or the intake is not running)."""
    body_type = _BODIES.get(action)
    if body_type is None:
        raise ValueError(f"not a ledger action: {action!r} (list, retry or skip)")
    bodies = register_ledger_bodies(registry if registry is not None else BodyTypeRegistry())
    body = body_type(name)
    command: CommandMessage[Any] = CommandMessage(aggregate_id, body, LEDGER_BODIES[body_type])
    wire = CommandWire(command, ReplyTo(reply_context, committed=True))
    receiver = transport.open(
        f"{reply_context}.ledger-{uuid.uuid4().hex[:12]}", [receipts_topic(reply_context, prefix)]
    )
    try:
        await receiver.ready()
        receiver.open_processing()
        await transport.send(
            TransportMessage(
                commands_topic(aggregate_id.named_aggregate.context_name, prefix),
                wire.key,
                wire.encode(bodies),
                now_ms(),
            )
        )
        async with asyncio.timeout(timeout):
            async for record in receiver:
                await record.ack()
                try:
                    receipt = CommandReceipt.decode(record.payload)
                except WireError as error:
                    log.warning("not a receipt at %s: %s", record.position, error)
                    continue
                if receipt.command_id == command.id:
                    return receipt
        raise TimeoutError("the receipts receiver closed before the receipt came")  # pragma: no cover
    finally:
        await receiver.close()
