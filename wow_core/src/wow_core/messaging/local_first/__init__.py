"""Local-first dual-copy admission for commands, domain events and state events.

See :mod:`wow_core.messaging.local_first.bus` for the send rules and
``docs/messaging/local-first.md`` for the trade-offs.
"""

from wow_core.messaging.local_first.aggregates import (
    LocalAggregates,
    every_aggregate_is_local,
    local_aggregates,
)
from wow_core.messaging.local_first.bus import (
    LocalFirstCommandBus,
    LocalFirstDomainEventBus,
    LocalFirstMessageBus,
    LocalFirstStateEventBus,
)
from wow_core.messaging.local_first.copies import (
    CopyCancelledError,
    FlushResult,
    LocalFirstDistributedCopies,
    QueuedCopy,
)
from wow_core.messaging.local_first.observer import (
    LocalFirstObserver,
    LocalFirstObservers,
    SendRoute,
    combine_observers,
)
from wow_core.messaging.local_first.receiver import LocalFirstReceiver

__all__ = [
    "CopyCancelledError",
    "FlushResult",
    "LocalAggregates",
    "LocalFirstCommandBus",
    "LocalFirstDistributedCopies",
    "LocalFirstDomainEventBus",
    "LocalFirstMessageBus",
    "LocalFirstObserver",
    "LocalFirstObservers",
    "LocalFirstReceiver",
    "LocalFirstStateEventBus",
    "QueuedCopy",
    "SendRoute",
    "combine_observers",
    "every_aggregate_is_local",
    "local_aggregates",
]
