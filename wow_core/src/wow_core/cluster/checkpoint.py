"""The intake's checkpoints: per partition, the contiguous low watermark of settled commands.

The checkpoint of a partition is the offset after the last command whose outcome is
settled, every command received before it settled too. Offsets need not be consecutive
(a broker may leave gaps): contiguity is over the commands *received*. A handover or a
restart resumes from the checkpoint, so it executes again at most what was in flight (not
settled yet) when it happened, which the kernel deduplicates by request id.
"""

from __future__ import annotations

from collections import deque


class LowWatermark:
    """The settled prefix of one partition's received offsets.

    ``track`` each offset as it is received (in increasing order), ``settle`` it when its
    outcome is settled; :attr:`checkpoint` is the offset after the settled prefix (None
    before anything settled).
    """

    __slots__ = ("_pending", "_settled", "checkpoint")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()
        self._settled: set[int] = set()
        self.checkpoint: int | None = None

    def track(self, offset: int) -> None:
        pending = self._pending
        if pending and offset <= pending[-1]:
            if offset in self._settled or offset in pending:
                return  # redelivered while still tracked: one entry is enough
            raise ValueError(f"offset {offset} received after {pending[-1]}: offsets go up")
        if self.checkpoint is not None and offset < self.checkpoint:
            return  # settled before (a redelivery after a handover): nothing new
        pending.append(offset)

    def settle(self, offset: int) -> bool:
        """Mark ``offset`` settled; True when the checkpoint moved."""
        pending = self._pending
        if offset not in pending:
            return False
        self._settled.add(offset)
        moved = False
        while pending and pending[0] in self._settled:
            head = pending.popleft()
            self._settled.discard(head)
            self.checkpoint = head + 1
            moved = True
        return moved

    @property
    def in_flight(self) -> int:
        """Offsets received and not settled."""
        return len(self._pending) - len(self._settled)


def parse_position(position: str) -> tuple[int, int] | None:
    """``(partition, offset)`` of a ``partition:offset`` record position, else None."""
    partition, sep, offset = position.partition(":")
    if not sep or not partition.isdigit() or not offset.isdigit():
        return None
    return int(partition), int(offset)
