"""``NatsRecord``: one JetStream message as a :class:`~wow_core.transport.TransportRecord`.

Besides ``ack()`` a record offers :meth:`~NatsRecord.release`
(:class:`~wow_core.transport.ReleasingRecord`): the consumer did not finish it, and
JetStream delivers it again to the group after ``release_delay_for(delivery_count)``
(``WOW_NATS__RELEASE_DELAY``, doubled per delivery, at most the ack wait) instead of after
the full ack wait; each redelivery is counted, so ``max_deliver`` still ends a failure
that never passes in the dead letter ``<topic>.dlq``. What a release does not do: bring
back a record that was settled already (acknowledged, nak'd, terminated, handed back by
a closing receiver); survive a lost connection (the nak is a plain publish like the ack:
a nak lost with it leaves the record to the ack wait, never lost).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol
from urllib.parse import quote, unquote

from nats.aio.msg import Msg

log = logging.getLogger("wow_nats")

KEY_HEADER = "Wow-Key"
"""The record key (the aggregate id) travels as a header, the payload stays the JSON."""
ENCODED_KEY_HEADER = "Wow-Key-Encoded"
"""A key that a header cannot carry as it is (spaces at its ends, control characters such
as CR/LF that would end the header), percent-encoded."""
TIMESTAMP_HEADER = "Wow-Timestamp"
"""The sender's timestamp (epoch milliseconds)."""


REASON_HEADER = "Wow-Dlq-Reason"
GROUP_HEADER = "Wow-Dlq-Group"
POSITION_HEADER = "Wow-Dlq-Position"
DELIVERIES_HEADER = "Wow-Dlq-Deliveries"
ERROR_HEADER = "Wow-Dlq-Error"
"""The headers of a dead letter: why it is in ``<topic>.dlq`` (``max_deliver``,
``not_utf8``, ``undecodable``), the group that gave up, the record's ``stream:sequence``,
its deliveries to that group and, for ``undecodable``, the decode error."""

DEAD_LETTER_ERROR_CHARS = 1024
"""The most of an error's text a dead letter's header carries (one line)."""


def dead_letter_id(group: str, position: str) -> str:
    """The ``Nats-Msg-Id`` of the dead letter of the record at ``position`` for ``group``:
    one dead letter per group and record, even when its publish is retried or a crash
    between the publish and the acknowledgement delivers the record again."""
    return f"dlq:{group}:{position}"


def header_text(text: str, limit: int = DEAD_LETTER_ERROR_CHARS) -> str:
    """``text`` as one header value: its line breaks and other control characters as
    spaces, at most ``limit`` characters."""
    return "".join(ch if ch.isprintable() else " " for ch in text[:limit]).strip()


def key_headers(key: str) -> dict[str, str]:
    """The header that carries ``key`` unchanged through NATS."""
    if key.isprintable() and key == key.strip():
        return {KEY_HEADER: key}
    return {ENCODED_KEY_HEADER: quote(key, safe="")}


def key_of(headers: dict[str, str]) -> str:
    """The key of a record's headers; empty when it has none (not sent by wow-py)."""
    encoded = headers.get(ENCODED_KEY_HEADER)
    if encoded is not None:
        return unquote(encoded)
    return headers.get(KEY_HEADER, "")


class Releaser(Protocol):
    """What a record's :meth:`~NatsRecord.release` asks its receiver
    (:class:`~wow_nats.receiver.NatsReceiver`)."""

    def release_delay(self, record: NatsRecord) -> float | None:
        """Seconds before ``record``, released now, is delivered again; None: leave it
        alone (the receiver closes and hands it back, no release delay is set, a later
        delivery of it superseded this one)."""
        ...

    def track(self, task: asyncio.Task[None]) -> None:
        """Keep the task sending a release's nak until it is done (the close awaits it)."""
        ...


class NatsRecord:
    """A delivered JetStream message of one group's durable consumer.

    ``position`` is ``<stream>:<stream sequence>``; ``delivery_count`` is JetStream's
    ``num_delivered`` (1 on first delivery). :meth:`ack` acknowledges the message for its
    group: JetStream does not deliver it to that group again. The ack is a plain publish
    (not a confirmed double-ack), so an ack lost with the connection means the record
    is delivered again after the ack wait: at least once, never lost. :meth:`release`
    hands it back to be delivered again soon (see the module docstring).
    """

    __slots__ = (
        "_done",
        "_msg",
        "_releaser",
        "delivery_count",
        "key",
        "on_settle",
        "payload",
        "position",
        "sequence",
        "timestamp",
        "topic",
    )

    def __init__(
        self,
        msg: Msg,
        *,
        topic: str,
        key: str,
        payload: str,
        timestamp: int,
        position: str,
        delivery_count: int,
        sequence: int = 0,
        releaser: Releaser | None = None,
    ) -> None:
        self._msg = msg
        self._done = False
        self._releaser = releaser
        self.on_settle: Callable[[NatsRecord], None] | None = None
        self.sequence = sequence
        """The stream sequence."""
        self.topic = topic
        self.key = key
        self.payload = payload
        self.timestamp = timestamp
        self.position = position
        self.delivery_count = delivery_count

    @property
    def settled(self) -> bool:
        """True once acknowledged, negatively acknowledged or terminated."""
        return self._done

    async def ack(self) -> None:
        """Acknowledge; idempotent. After the receiver closed (and handed it back) a no-op."""
        if self._settle():
            await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        """Ask for redelivery now (or after ``delay`` seconds) instead of after the ack wait."""
        if self._settle():
            await self._msg.nak(delay)

    async def in_progress(self) -> None:
        """Restart the ack wait of a record whose processing takes long."""
        if not self._done:
            await self._msg.in_progress()

    async def term(self) -> None:
        """Tell JetStream never to deliver this record to this group again (not an ack)."""
        if self._settle():
            await self._msg.term()

    def release(self) -> None:
        """Hand the record back unfinished (:class:`~wow_core.transport.ReleasingRecord`).

        JetStream delivers it again to the group after ``release_delay_for(delivery_count)``
        seconds (``WOW_NATS__RELEASE_DELAY`` doubled per delivery after the first, at most
        the ack wait), with ``delivery_count`` one higher: a nak with that delay. The record
        is settled at once, as a nak settles it (an ``ack()`` afterwards is a no-op), and
        the nak is sent by a task of the running loop. Returns at once and never raises.

        Does nothing when the record is settled already (acknowledged, nak'd, terminated),
        while its receiver closes (the close hands it back at once), without a release
        delay (``WOW_NATS__RELEASE_DELAY`` empty: the ack wait brings it back), and for a
        delivery superseded by a later one of the same record that the receiver handed out
        (its ack wait expired meanwhile). A nak that cannot be sent
        (or a release outside a running loop) is logged; the ack wait then brings the
        record back.
        """
        releaser = self._releaser
        if releaser is None or self._done:
            return
        try:
            delay = releaser.release_delay(self)
            if delay is None:
                return
            loop = asyncio.get_running_loop()
            self._settle()  # as a nak settles it: an ack() from now on is a no-op
            releaser.track(
                loop.create_task(self._nak_released(delay), name=f"wow-nats-release:{self.position}")
            )
        except Exception as error:  # never raises (no running loop...): the ack wait brings it back
            log.warning("releasing %r failed: %r; it is delivered again after the ack wait", self, error)

    async def _nak_released(self, delay: float) -> None:
        try:
            await self._msg.nak(delay)
        except Exception as error:
            log.warning(
                "the nak releasing %r (redelivery in %.2f s) failed: %r; it is delivered again after the "
                "ack wait",
                self,
                delay,
                error,
            )

    def _settle(self) -> bool:
        if self._done:
            return False
        self._done = True
        if self.on_settle is not None:
            self.on_settle(self)
        return True

    def __repr__(self) -> str:
        return f"NatsRecord({self.topic} key={self.key!r} at {self.position} #{self.delivery_count})"
