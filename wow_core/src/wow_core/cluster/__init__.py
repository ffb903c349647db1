"""The cluster command intake (spec 002): partition-owned lanes, receipts, the failure
ledger, busy backpressure, scheduled commands and low-watermark checkpoints."""

from wow_core.cluster.checkpoint import LowWatermark
from wow_core.cluster.intake import (
    CommandBusyError,
    CommandIntake,
    ContendedOutcomeError,
    InFlightLimit,
    IntakeOptions,
    IntakeUnsupportedError,
)
from wow_core.cluster.journal import LedgerJournal, ledger_topic
from wow_core.cluster.ledger import FailureLedger, ParkedAggregate, ParkedNotFoundError
from wow_core.cluster.wire import (
    CommandReceipt,
    CommandWire,
    CreationIds,
    ReceiptDeduplicator,
    ReceiptOutcome,
    ReplyTo,
    WireError,
    commands_topic,
    decode_command,
    encode_command,
    receipts_topic,
)

__all__ = [
    "CommandBusyError",
    "CommandIntake",
    "CommandReceipt",
    "CommandWire",
    "ContendedOutcomeError",
    "CreationIds",
    "FailureLedger",
    "InFlightLimit",
    "IntakeOptions",
    "IntakeUnsupportedError",
    "LedgerJournal",
    "LowWatermark",
    "ParkedAggregate",
    "ParkedNotFoundError",
    "ReceiptDeduplicator",
    "ReceiptOutcome",
    "ReplyTo",
    "WireError",
    "commands_topic",
    "decode_command",
    "encode_command",
    "ledger_topic",
    "receipts_topic",
]
