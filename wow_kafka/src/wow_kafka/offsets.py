"""Per-partition offset tracking: commit only up to the contiguous low watermark.

Records of one partition reach the consumer in offset order, but they complete out of
order (different aggregates run in parallel). :class:`PartitionOffsets` remembers the
offsets handed out and the ones acknowledged; its :attr:`~PartitionOffsets.watermark`
is the offset to commit: one past the longest prefix of handed-out records that are
all acknowledged. A record handed out and never acknowledged is therefore never
committed past, and offsets skipped by the broker (compaction, transaction markers)
do not block the watermark, because only offsets actually handed out count.

A record its consumer released (:meth:`PartitionOffsets.release`) stays unacknowledged,
so it still holds the watermark, but it is not being processed: a revocation's drain does
not wait for it (the next owner delivers it again from the committed watermark).
"""

from __future__ import annotations

import asyncio
from collections import deque


class PartitionOffsets:
    """The offsets of one partition during one assignment of it to this member.

    ``start`` is where the assignment begins (the committed or anchored offset).
    Once :meth:`retire` was called (the partition was revoked or the receiver
    closed), acknowledgements no longer move the watermark: another member may own
    the partition now, and what it redelivers is the at-least-once part.
    """

    __slots__ = (
        "_acked",
        "_drained",
        "_held",
        "_pending",
        "active",
        "committed",
        "revoking",
        "watermark",
    )

    def __init__(self, start: int) -> None:
        self.watermark = start
        """One past the contiguous acknowledged prefix: the next offset to commit."""
        self.committed = start
        """The last offset committed for this assignment."""
        self.active = True
        self.revoking = False
        self._pending: deque[int] = deque()
        self._acked: set[int] = set()
        self._held: set[int] = set()
        """Offsets released by the consumer, waiting to be delivered again."""
        self._drained: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        """Records handed out and not committable yet: the ones from the first
        unacknowledged on (released ones included)."""
        return len(self._pending)

    @property
    def processing(self) -> int:
        """Records handed out, not acknowledged and not released: what a drain waits for."""
        return len(self._pending) - len(self._acked) - len(self._held)

    def unacknowledged(self, offset: int) -> bool:
        """True when ``offset`` was handed out by this assignment and is not acknowledged."""
        return offset not in self._acked and offset in self._pending

    def release(self, offset: int) -> bool:
        """The consumer released ``offset`` unacknowledged; True when it is to be delivered
        again (handed out by this live assignment and not acknowledged)."""
        if not self.active or self.revoking or not self.unacknowledged(offset):
            return False
        self._held.add(offset)
        self._check_drained()
        return True

    def redelivered(self, offset: int) -> bool:
        """``offset`` is handed to the consumer again; False when that is no longer due
        (acknowledged meanwhile, or the partition was revoked)."""
        if offset not in self._held:
            return False
        self._held.discard(offset)
        return self.active and not self.revoking and self.unacknowledged(offset)

    @property
    def dirty(self) -> bool:
        return self.watermark > self.committed

    def delivered(self, offset: int) -> None:
        """A record at ``offset`` is handed to the consumer (offsets only grow)."""
        if self._pending and offset <= self._pending[-1]:
            raise ValueError(f"offset {offset} handed out after {self._pending[-1]}")
        self._pending.append(offset)

    def ack(self, offset: int) -> bool:
        """Acknowledge ``offset``; True when the watermark moved."""
        if not self.active:
            return False
        pending = self._pending
        if not pending or offset < pending[0]:
            return False  # acknowledged before, or never handed out by this assignment
        self._held.discard(offset)
        if offset != pending[0]:
            self._acked.add(offset)
            self._check_drained()
            return False
        pending.popleft()
        self.watermark = offset + 1
        acked = self._acked
        while pending and pending[0] in acked:
            head = pending.popleft()
            acked.discard(head)
            self.watermark = head + 1
        self._check_drained()
        return True

    def _check_drained(self) -> None:
        if self._drained is not None and self.processing <= 0:
            self._drained.set()

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until nothing is being processed (every record
        handed out acknowledged or released); True if drained."""
        if self.processing <= 0:
            return True
        if timeout <= 0:
            return False
        self._drained = asyncio.Event()
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def retire(self) -> None:
        self.active = False
        if self._drained is not None:
            self._drained.set()
