"""What a local-first bus decides, as named hooks: :class:`LocalFirstObserver`.

The decisions of local-first (which route a send took, which distributed copy the merged
receiver dropped, when a hand-off result did not arrive in time, how many copies wait) are
made inside the bus, its copy queues and its merged receiver, where no decorator of the
bus can see them. The bus reports them to one observer instead, given at construction.
The core's metrics (:class:`~wow_core.middleware.MetricsMiddleware`) count them, and a
tracing or metrics plugin observes them the same way, through the ``observe_local_first``
hook of its :class:`~wow_core.middleware.Middleware`.

Without an observer (the default) the bus calls nothing: each hook site costs one test
against ``None``.

What a hook is told is final: the hooks are called after the decision, synchronously, on
the event loop, from the task that made it (a sender, a copy worker, the receiver's pump).
They must be cheap and must not raise: an exception raised by a hook propagates into the
bus at that point (a send fails, a copy counts as failed, the pump stops), so an observer
that might fail must catch its own errors.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from wow_core.messaging.contract import MessageExchange
from wow_core.model import Message, NamedAggregate


class SendRoute(enum.StrEnum):
    """The route one local-first ``send`` took (the ``outcome`` tag of ``wow.local_first.sends``)."""

    HANDED_OFF = "handed_off"
    """Accepted by the local bus; the distributed copy goes out with the admission result."""
    REFUSED = "refused"
    """The local bus refused the hand-off (no routable receiver, a closed route)."""
    ERROR = "error"
    """The hand-off raised; sent distributed like a refused one (the error is logged)."""
    SKIPPED = "skipped"
    """A message that never takes the local route (a Void command, local-first disabled)."""
    REMOTE = "remote"
    """A message of an aggregate this service does not own: sent distributed at once."""


class LocalFirstObserver:
    """The hooks of one local-first bus (module docstring); every hook does nothing here.

    Subclass it and override what you observe. One observer belongs to one bus (the
    ``observe_local_first`` hook of a middleware is called once per bus kind), so the hooks
    are not told which bus they are for.
    """

    def on_send(self, message: Message, route: SendRoute) -> None:
        """``send(message)`` took ``route``; called before the send returns or waits."""

    def on_filtered(self, exchange: MessageExchange[Any]) -> None:
        """The merged receiver acknowledged and dropped ``exchange``, a distributed copy
        marked ``local_first=true`` of an aggregate this service owns (handled locally)."""

    def on_copy_sent(self, message: Message, local_first: bool) -> None:
        """The distributed copy ``message`` was sent, marked ``local_first``."""

    def on_copy_failed(self, message: Message, handed_off: bool, error: BaseException) -> None:
        """Sending the distributed copy ``message`` failed with ``error``; other services
        never receive it. ``handed_off``: the local bus had accepted the message."""

    def on_copies_cancelled(self, named_aggregate: NamedAggregate, count: int) -> None:
        """``count`` queued copies of one aggregate id of ``named_aggregate`` were cancelled
        (a flush timeout, a stopped worker) and never sent."""

    def on_hand_off_timeout(self, message: Message) -> None:
        """No hand-off result for ``message`` within the hand-off timeout: its distributed
        copy goes out unmarked (counted as refused)."""

    def on_backlog(self, named_aggregate: NamedAggregate, backlog: int) -> None:
        """The copies of ``named_aggregate`` waiting to be sent changed to ``backlog``.

        Called on every change (each queued, sent, failed or cancelled copy), so the last
        value per aggregate type is the current backlog: an observable gauge reports the
        last value it was told. Not called by a bus whose observer reads the backlog
        itself (:meth:`reads_backlog`).
        """

    def reads_backlog(self, read: Callable[[], Mapping[NamedAggregate, int]]) -> bool:
        """Whether this observer reads the backlog itself, from ``read()`` (the copies
        waiting per aggregate type, each type met so far, zero included), when it
        needs it (a metrics backend collecting): then the bus calls no
        :meth:`on_backlog`, whose report on every change is work on every message.
        Asked once, when the bus is built; ``read`` may be called from another thread.
        The default: False.
        """
        return False


class LocalFirstObservers(LocalFirstObserver):
    """Several observers of one bus, called in order (the first middleware first)."""

    def __init__(self, observers: Sequence[LocalFirstObserver]) -> None:
        self.observers = tuple(observers)
        self._told = self.observers  # those told each backlog change

    def on_send(self, message: Message, route: SendRoute) -> None:
        for observer in self.observers:
            observer.on_send(message, route)

    def on_filtered(self, exchange: MessageExchange[Any]) -> None:
        for observer in self.observers:
            observer.on_filtered(exchange)

    def on_copy_sent(self, message: Message, local_first: bool) -> None:
        for observer in self.observers:
            observer.on_copy_sent(message, local_first)

    def on_copy_failed(self, message: Message, handed_off: bool, error: BaseException) -> None:
        for observer in self.observers:
            observer.on_copy_failed(message, handed_off, error)

    def on_copies_cancelled(self, named_aggregate: NamedAggregate, count: int) -> None:
        for observer in self.observers:
            observer.on_copies_cancelled(named_aggregate, count)

    def on_hand_off_timeout(self, message: Message) -> None:
        for observer in self.observers:
            observer.on_hand_off_timeout(message)

    def on_backlog(self, named_aggregate: NamedAggregate, backlog: int) -> None:
        for observer in self._told:
            observer.on_backlog(named_aggregate, backlog)

    def reads_backlog(self, read: Callable[[], Mapping[NamedAggregate, int]]) -> bool:
        """True if every observer reads the backlog itself; otherwise those that do
        not are told each change (:meth:`on_backlog`), and those that do read it."""
        reading = [observer.reads_backlog(read) for observer in self.observers]
        self._told = tuple(o for o, r in zip(self.observers, reading, strict=True) if not r)
        return all(reading)


def combine_observers(observers: Sequence[LocalFirstObserver | None]) -> LocalFirstObserver | None:
    """``None`` for no observer (the bus then calls nothing), the one observer itself, or
    a :class:`LocalFirstObservers` calling each in order."""
    found = [observer for observer in observers if observer is not None]
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    return LocalFirstObservers(found)
