"""A stateless saga of the bank: a customer notice for every transfer that ended.

The saga reacts to ``TransferCompleted`` and ``TransferFailed`` and returns the command
that records a notice; the dispatcher sends it through the ``CommandGateway``. The
notice is an aggregate of its own (``bank.notice``) whose id is the transfer id, and the
command's request id is derived from the event id, so a redelivered event records no
second notice.

``send_and_wait(..., wait=CommandWait.saga_handled())`` returns once the saga handled the
command's events, which proves the notice command was *sent*, not that it was processed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wow_core import (
    AggregateId,
    CommandMessage,
    DomainEvent,
    NamedAggregate,
    aggregate,
    on_command,
    on_event,
    on_sourcing,
    stateless_saga,
)

from .domain import TransferCompleted, TransferFailed

NOTICE = NamedAggregate("bank", "notice")


@dataclass(frozen=True)
class NoticeState:
    transfer_id: str = ""
    text: str = ""


@dataclass(frozen=True)
class RecordNotice:
    text: str


@dataclass(frozen=True)
class NoticeRecorded:
    text: str


@aggregate("bank", "notice", state=NoticeState)
class Notice:
    @on_command(create=True)
    def record(self, state: NoticeState, body: RecordNotice) -> NoticeRecorded:
        return NoticeRecorded(body.text)

    @on_sourcing
    def recorded(self, state: NoticeState, event: NoticeRecorded) -> NoticeState:
        return replace(state, text=event.text)


@stateless_saga
class TransferNoticeSaga:
    """Transfer ended -> record a notice for it."""

    @on_event
    def completed(self, event: DomainEvent[TransferCompleted]) -> CommandMessage[RecordNotice]:
        return _notice(event.aggregate_id.id, "your transfer was completed")

    @on_event
    def failed(self, event: DomainEvent[TransferFailed]) -> CommandMessage[RecordNotice]:
        return _notice(event.aggregate_id.id, f"your transfer failed: {event.body.reason}")


def _notice(transfer_id: str, text: str) -> CommandMessage[RecordNotice]:
    return CommandMessage(
        AggregateId(NOTICE, transfer_id), RecordNotice(text), "RecordNotice", is_create=True
    )
