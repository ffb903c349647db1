"""The decode-failure policy SPI (``TransportDecodeFailureHandler``).

A record that is not a message (not JSON, wrong shape, unknown body type, a key or
topic that does not match the message inside) is never a crash of the consumer loop
and never a silent drop: it goes to the configured handler, stays retrievable, is
counted (by the metrics middleware, which decorates every transport bus's handler:
``wow.transport.decode_failures``), and the receiver goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from wow_core.model import DecodeError
from wow_core.transport.defaults import DecodeFailureDefault, decode_failure_default_of
from wow_core.transport.spi import Transport, TransportMessage, TransportRecord

_log = logging.getLogger(__name__)


class DecodeFailureAction(StrEnum):
    ACK = "ack"
    """The raw record was kept elsewhere (a dead-letter topic): acknowledge it."""
    LEAVE_PENDING = "leave_pending"
    """Leave the record unacknowledged; the backend keeps it visible."""


@dataclass(frozen=True, slots=True)
class DecodeFailure:
    """A record a receiver of ``group`` could not decode, and why."""

    group: str
    record: TransportRecord
    error: DecodeError

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def key(self) -> str:
        return self.record.key

    @property
    def position(self) -> str:
        return self.record.position


@dataclass(frozen=True, slots=True)
class DeadLetterReason:
    """Why a record went to its dead-letter topic: what a :class:`DeadLetterSender` writes
    beside the record's own bytes, so that whoever reads ``<topic>.dlq`` can tell."""

    reason: str
    """``undecodable`` (a decode failure) or the transport's delivery limit (``max_deliveries``)."""
    group: str
    """The receiver group that gave up on the record."""
    position: str
    """The record's position in its topic (``TransportRecord.position``)."""
    deliveries: int
    """Its deliveries to that group so far (``TransportRecord.delivery_count``)."""
    error: str | None = None
    """The decode error, or the last processing error where the transport knows it."""


@runtime_checkable
class DeadLetterSender(Protocol):
    """A transport that sends a dead letter with its :class:`DeadLetterReason` (record
    headers, say) beside the record's bytes.

    Optional, like ``send_many``: :class:`DefaultDecodeFailureHandler` calls it where the
    transport has it, else ``Transport.send`` with the bytes alone. The record's key,
    payload and timestamp are the original's either way.
    """

    async def send_dead_letter(self, message: TransportMessage, reason: DeadLetterReason) -> None: ...


@runtime_checkable
class DecodeFailureObserver(Protocol):
    """A transport that hears what became of each undecodable record of its receivers.

    Optional: ``TransportMessageBus`` calls it after the policy decided (and when the
    policy itself failed, with ``LEAVE_PENDING``), so a backend can report a record left
    pending where it keeps it (the Redis transport's ``RedisMessageBusObserver``).
    """

    def decode_failure_handled(self, failure: DecodeFailure, action: DecodeFailureAction) -> None: ...


@runtime_checkable
class TransportDecodeFailureHandler(Protocol):
    """Decides what happens to an undecodable record."""

    async def handle(self, failure: DecodeFailure, transport: Transport) -> DecodeFailureAction: ...


class DefaultDecodeFailureHandler:
    """Log, keep the raw record retrievable, and let the receiver go on.

    Every failure is logged at warning with the group, topic, key, position and error.
    It counts nothing itself: the metrics middleware decorates the policy of every
    transport bus and counts each failure once the policy returned its action
    (:class:`~wow_core.middleware.MetricDecodeFailureHandler`). The action is
    ``policy`` when given, else the one the transport asks for
    (:func:`~wow_core.transport.defaults.decode_failure_default_of`: its
    ``decode_failure_default``, ``DEAD_LETTER`` when it has none):

    * ``DEAD_LETTER``: publish the raw record (same key, payload and timestamp) to
      ``<topic>.dlq`` on the same transport, then acknowledge it; a transport that is a
      :class:`DeadLetterSender` writes why beside it (reason ``undecodable``, the group,
      position, deliveries and the error). If that publish fails, the record is left
      pending instead, so nothing is lost.
    * ``LEAVE_PENDING``: leave the record unacknowledged where the backend keeps it.

    It does not repair or retry the record: a dead letter is for a human or a tool.
    :class:`~wow_core.transport.bus.TransportBusReceiver` runs :meth:`handle` and the
    acknowledgement as one unit that a cancellation of the receiver does not split.
    """

    __slots__ = ("policy",)

    DEAD_LETTER_SUFFIX = ".dlq"

    def __init__(self, policy: DecodeFailureDefault | None = None) -> None:
        self.policy = policy

    async def handle(self, failure: DecodeFailure, transport: Transport) -> DecodeFailureAction:
        policy = self.policy or decode_failure_default_of(transport)
        _log.warning(
            "undecodable record on %s (group %s, key %r, position %s): %s; policy %s",
            failure.topic,
            failure.group,
            failure.key,
            failure.position,
            failure.error,
            policy.value,
        )
        if policy is DecodeFailureDefault.LEAVE_PENDING:
            return DecodeFailureAction.LEAVE_PENDING
        record = failure.record
        dead_letter = TransportMessage(
            topic=record.topic + self.DEAD_LETTER_SUFFIX,
            key=record.key,
            payload=record.payload,
            timestamp=record.timestamp,
        )
        try:
            if isinstance(transport, DeadLetterSender):
                reason = DeadLetterReason(
                    "undecodable", failure.group, failure.position, record.delivery_count, str(failure.error)
                )
                await transport.send_dead_letter(dead_letter, reason)
            else:
                await transport.send(dead_letter)
        except Exception:
            _log.exception(
                "could not dead-letter the record at %s of %s; leaving it pending",
                failure.position,
                failure.topic,
            )
            return DecodeFailureAction.LEAVE_PENDING
        return DecodeFailureAction.ACK


async def decide_decode_failure(
    handler: TransportDecodeFailureHandler, failure: DecodeFailure, transport: Transport
) -> DecodeFailureAction:
    """What becomes of an undecodable record: ``handler``'s action, read by its value
    (``"ack"`` is ``ACK``); a handler that raises, or answers anything else, leaves the
    record pending, logged as an error (kept, never dropped unsaid). The transport hears
    the action when it is a :class:`DecodeFailureObserver`. The aggregate buses' receivers
    and the application worker decide through it; acknowledging is the caller's."""
    try:
        answered: object = await handler.handle(failure, transport)
    except Exception:
        _log.exception(
            "decode-failure handler failed for %s at %s; leaving the record pending",
            failure.topic,
            failure.position,
        )
        answered = DecodeFailureAction.LEAVE_PENDING
    action = _action_of(answered, handler, failure)
    if isinstance(transport, DecodeFailureObserver):
        try:
            transport.decode_failure_handled(failure, action)
        except Exception:
            _log.exception("the transport's decode-failure observer failed for %s", failure.position)
    return action


def _action_of(answered: object, handler: object, failure: DecodeFailure) -> DecodeFailureAction:
    if isinstance(answered, DecodeFailureAction):
        return answered
    if isinstance(answered, str):
        try:
            return DecodeFailureAction(answered)
        except ValueError:
            pass
    _log.error(
        "the decode-failure handler %s answered %r for %s at %s, not a DecodeFailureAction "
        "(ACK or LEAVE_PENDING); leaving the record pending",
        type(handler).__qualname__,
        answered,
        failure.topic,
        failure.position,
    )
    return DecodeFailureAction.LEAVE_PENDING
