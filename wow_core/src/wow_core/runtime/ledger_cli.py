"""``wow ledger list | retry | skip``: the failure ledger of a cluster intake, from a shell.

Sends the ``wow.ledger.*`` system command (:func:`~wow_core.cluster.ops.ledger_request`)
over the configured transport and prints the receipt: the parked aggregates it names,
or why it was refused. Exit 0 when the intake ran it, 1 when it refused it (nothing
parked there, another subscription), 3 when no receipt came in time.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, cast

from wow_core.model import AggregateId, NamedAggregate
from wow_core.model.aggregate import DEFAULT_TENANT_ID
from wow_core.plugins.commands import Command

if TYPE_CHECKING:
    from wow_core.runtime.cli import Invocation


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "retry", "skip"], help="what to do")
    parser.add_argument(
        "aggregate",
        help="the parked aggregate, context.aggregate@id (for list: any aggregate of the context; "
        "the node that owns its partition answers, for every partition with the ledger topic)",
    )
    parser.add_argument("--tenant", default=DEFAULT_TENANT_ID, help="its tenant id (default: %(default)s)")
    parser.add_argument("--name", default="", help="the intake's subscription name (default: its own)")
    parser.add_argument(
        "--reply-context", default="ops", help="context whose receipts topic gets the answer (default: ops)"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the receipt")


def parse_aggregate(text: str, tenant: str = DEFAULT_TENANT_ID) -> AggregateId:
    """``context.aggregate@id`` as an :class:`AggregateId`; ``ValueError`` naming the form."""
    named, sep, aggregate_id = text.partition("@")
    if not sep or not aggregate_id:
        raise ValueError(f"expected context.aggregate@id, got {text!r}")
    return AggregateId(NamedAggregate.parse(named), aggregate_id, tenant)


def _run(invocation: Invocation) -> int:
    return asyncio.run(ledger_main(invocation))


async def ledger_main(invocation: Invocation) -> int:
    """What ``wow ledger`` does, on the running event loop; returns the exit status."""
    from wow_core.cluster.ops import LedgerAction, ledger_request
    from wow_core.transport.defaults import naming_of

    args = invocation.args
    out = invocation.out
    try:
        aggregate_id = parse_aggregate(args.aggregate, args.tenant)
    except ValueError as error:
        out.write(f"wow ledger: {error}\n")
        return 2
    container = invocation.container()
    settings = container.settings()
    transport = container.transport()
    if transport is None:
        out.write("wow ledger: no transport configured\n")
        return 2
    prefix = getattr(naming_of(transport), "prefix", settings.messaging.topic_prefix)
    try:
        await transport.start()
        receipt = await ledger_request(
            transport,
            cast(LedgerAction, args.action),
            aggregate_id,
            name=args.name,
            reply_context=args.reply_context,
            prefix=prefix,
            timeout=args.timeout,
        )
    except TimeoutError:
        out.write(f"wow ledger: no receipt within {args.timeout:g}s (is an intake running?)\n")
        return 3
    finally:
        await transport.close()
    if not receipt.committed:
        out.write(f"refused: {receipt.error_code}: {receipt.error_msg}\n")
        return 1
    parked = receipt.result.get("parked", [])
    if not parked:
        out.write("nothing parked\n")
        return 0
    verb = {"list": "parked", "retry": "retried", "skip": "skipped"}[args.action]
    for entry in parked:
        out.write(
            f"{verb}: {entry['aggregate']} ({entry['tenant']}) under {entry['name']} "
            f"at {entry['from_position']}, command {entry['command_id']}, "
            f"{entry['attempts']} attempts, {entry['waiting']} waiting: {entry['error']}\n"
        )
    return 0


COMMAND = Command(
    help="list, retry or skip the parked aggregates of a cluster intake",
    description="Sends a wow.ledger.* system command (list, retry, skip) for a parked aggregate to its "
    "context's cluster intake over the configured transport and prints the receipt. The node that owns the "
    "aggregate's partition answers; list shows that node's parked aggregates.",
    run=_run,
    configure=_configure,
)
