"""The intake's wire forms (envelope, receipt) and its low-watermark checkpoints."""

from __future__ import annotations

import json

import pytest

from tests.accounts import ACCOUNT, Account, Open
from wow_core.cluster import (
    CommandReceipt,
    CommandWire,
    CreationIds,
    LowWatermark,
    ReceiptDeduplicator,
    ReceiptOutcome,
    ReplyTo,
    WireError,
    commands_topic,
    decode_command,
    encode_command,
    receipts_topic,
)
from wow_core.command import CommandStage, WaitContext
from wow_core.command.stages import Violation, WaitPlan
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, Header
from wow_core.modeling import AggregateRegistry

BODIES = AggregateRegistry([Account]).register_body_types(BodyTypeRegistry())


def test_the_checkpoint_is_the_offset_after_the_settled_prefix_of_what_was_received() -> None:
    mark = LowWatermark()
    for offset in (3, 4, 7, 8):  # a gap between 4 and 7: offsets need not be consecutive
        mark.track(offset)
    assert mark.checkpoint is None
    assert mark.in_flight == 4
    assert not mark.settle(4)  # 3 is not settled: the checkpoint cannot pass it
    assert mark.checkpoint is None
    assert mark.settle(3)
    assert mark.checkpoint == 5
    assert not mark.settle(8)
    assert mark.checkpoint == 5
    assert mark.settle(7)
    assert mark.checkpoint == 9
    assert mark.in_flight == 0
    mark.track(2)  # a redelivery of what was settled before: nothing new
    assert mark.in_flight == 0
    mark.track(10)
    with pytest.raises(ValueError, match="offsets go up"):
        mark.track(9)


def test_an_envelope_round_trips_with_its_reply_to_wait_context_and_due_time() -> None:
    message = CommandMessage(AggregateId(ACCOUNT, "a"), Open("x"), "Open", header=Header({"user": "u"}))
    wait = WaitContext("kafka:wow.wait#p1", WaitPlan(CommandStage.PROJECTED, context_name="bank"))
    wire = CommandWire(message, ReplyTo("orders", committed=True), wait, 1_700_000_000_000)
    decoded = decode_command(encode_command(wire, BODIES), BODIES, CreationIds())
    assert decoded == wire


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(kind="command"), "envelope.kind"),
        (lambda d: d.update(command=[]), "command"),
        (lambda d: d.update(reply_to={"context": "no such"}), "reply_to.context"),
        (lambda d: d.update(reply_to={"context": "orders", "committed": "yes"}), "reply_to.committed"),
        (lambda d: d.update(due_at=-1), "due_at"),
        (lambda d: d.update(due_at=True), "due_at"),
        (lambda d: d["command"].update(id=""), "command.id"),
        (lambda d: d["command"]["aggregate"].update(id=""), "command.aggregate.id"),
        (lambda d: d["command"].update(is_create="x"), "command"),
    ],
)
def test_a_payload_that_is_not_an_envelope_is_refused_naming_the_field(mutate: object, field: str) -> None:
    message = CommandMessage(AggregateId(ACCOUNT, "a"), Open("x"), "Open")
    data = json.loads(encode_command(CommandWire(message), BODIES))
    mutate(data)  # type: ignore[operator]
    with pytest.raises(WireError) as raised:
        decode_command(json.dumps(data), BODIES, CreationIds())
    assert raised.value.field == field
    with pytest.raises(WireError, match="not JSON"):
        decode_command("{", BODIES, CreationIds())


def test_a_receipt_round_trips_and_a_malformed_one_is_refused() -> None:
    receipt = CommandReceipt(
        ReceiptOutcome.REJECTED,
        "c1",
        "r1",
        AggregateId(ACCOUNT, "a"),
        errors=(Violation("body.amount", "must be > 0"),),
        error_code="COMMAND_INVALID",
        position="1:2",
    )
    assert CommandReceipt.decode(receipt.encode()) == receipt
    for bad in ('{"kind":"receipt","outcome":"maybe"}', '{"kind":"x"}', "[]", "nope"):
        with pytest.raises(WireError):
            CommandReceipt.decode(bad)
    data = json.loads(receipt.encode())
    data["version"] = -1
    with pytest.raises(WireError, match=r"receipt\.version"):
        CommandReceipt.decode(json.dumps(data))


def test_topics_and_reply_to_name_a_valid_context() -> None:
    assert commands_topic("bank") == "wow.bank.commands"
    assert receipts_topic("orders", "acme.") == "acme.orders.receipts"
    with pytest.raises(ValueError):
        commands_topic("no such")
    with pytest.raises(WireError, match=r"reply_to\.context"):
        ReplyTo("")


def test_the_sender_drops_copies_of_a_receipt_by_command_id_within_its_memory() -> None:
    dedup = ReceiptDeduplicator(capacity=2)
    one, two, three = (CommandReceipt(ReceiptOutcome.COMMITTED, c, c, None) for c in ("1", "2", "3"))
    assert [dedup.first(r) for r in (one, one, two, three)] == [True, False, True, True]
    assert dedup.dropped == 1
    assert dedup.first(one)  # forgotten: beyond the capacity
    with pytest.raises(ValueError):
        ReceiptDeduplicator(0)
