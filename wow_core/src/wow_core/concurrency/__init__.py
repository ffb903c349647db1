"""Low-level asyncio building blocks shared by the buses and the runtime.

Nothing here imports another part of ``wow_core``, so any package can use it without an
import cycle:

- :class:`LanePool`: a pool of long-lived worker tasks that run the turns of ready lanes
  (the ``KeyedExecutor`` and the local-first copy queues are built on it);
- :func:`start_eagerly`: a task whose first step runs inside the caller (an eager task on
  Python 3.12+, a small backport on 3.11); :func:`start_task`: eager where Python has eager
  tasks (3.12+), an ordinary task on 3.11;
- :func:`all_or_none` / :func:`together`: awaitables run at once, the first failure cancelling the others
  (the runtime makes its receivers ready with it).
"""

from __future__ import annotations

from wow_core.concurrency.eager import start_eagerly, start_task
from wow_core.concurrency.lane_pool import LanePool
from wow_core.concurrency.together import TogetherError, all_or_none, together

__all__ = ["LanePool", "TogetherError", "all_or_none", "start_eagerly", "start_task", "together"]
