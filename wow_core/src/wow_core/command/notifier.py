"""The ``CommandWaitNotifier`` SPI: wait signals between processes.

A notifier has two halves:

- the **receiving half**, :meth:`CommandWaitNotifier.start`: the runtime starts it with
  the process, before any dispatcher, and hands it a :class:`WaitSignalSink`; the
  notifier subscribes to this process's address and feeds every payload it receives to
  the sink, which validates it (:mod:`~wow_core.command.signal_wire`) and delivers it to
  the process's :class:`~wow_core.command.WaitCoordinator`. ``start`` returns the
  process's :class:`~wow_core.command.endpoint.WaitEndpoint`, which the gateway writes
  into the header of every command waited for past ``SENT``;
- the **sending half**, :meth:`CommandWaitNotifier.notify`: whoever reaches a stage of a
  command whose endpoint names another process sends it the signal. Delivery is best
  effort, at most once: a notifier does not retry, queue for, or remember an endpoint
  (a caller that died leaves nothing behind).

:class:`RemoteSignals` is the core's side of sending: fire and forget, a bounded number
of notifications in flight, every failure logged and counted and never raised into the
processing that signalled.

Metrics (counters): ``wow.command.wait.notify_failed``, ``wow.command.wait.notify_dropped``
(too many in flight, or an endpoint of another notifier kind), ``wow.command.wait.signal_malformed``
(a payload that is not a valid signal), ``wow.command.wait.signal_unmatched`` (a signal for
an unknown or finished wait).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from wow_core.command.endpoint import InvalidWaitEndpointError, WaitEndpoint, process_id
from wow_core.command.signal_wire import SignalDecodeError, decode_signal
from wow_core.command.stages import WaitSignal
from wow_core.metrics import Metrics, NoopMetrics

if TYPE_CHECKING:
    from wow_core.command.coordinator import WaitCoordinator

log = logging.getLogger("wow.command.wait")


@runtime_checkable
class CommandWaitNotifier(Protocol):
    """Carries wait signals to the process named by an endpoint; see the module doc.

    ``kind`` is the endpoint kind this notifier reaches (its plugin name: ``redis``...).
    """

    @property
    def kind(self) -> str: ...

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        """Open the receiving half: every payload addressed to this process goes to
        ``sink`` (called on the event loop). Returns this process's endpoint."""
        ...

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        """Send ``signal`` to ``endpoint`` (encode it with ``encode_signal``). Returns once
        handed to the broker; raises on failure (the caller logs and counts it)."""
        ...

    async def close(self) -> None:
        """Close both halves."""
        ...


class WaitSignalSink:
    """The receiving half's entry into the core: validates a payload and delivers it.

    Never raises: a malformed payload is dropped and counted
    (``wow.command.wait.signal_malformed``), a signal for no wait in progress is dropped
    and counted (``wow.command.wait.signal_unmatched``).
    """

    __slots__ = ("_deliver", "_last_warning", "_metrics", "malformed", "received", "unmatched")

    def __init__(self, deliver: Any, metrics: Metrics | None = None) -> None:
        self._deliver = deliver  # WaitCoordinator.signal, returning whether a wait took it
        self._metrics = metrics or NoopMetrics()
        self._last_warning = 0.0
        self.received = 0
        self.malformed = 0
        self.unmatched = 0

    def __call__(self, payload: str | bytes) -> None:
        self.received += 1
        try:
            signal = decode_signal(payload)
        except SignalDecodeError as error:
            self.malformed += 1
            self._metrics.increment("wow.command.wait.signal_malformed")
            now = time.monotonic()
            if now - self._last_warning > 10.0:  # a flood logs once per 10 s
                self._last_warning = now
                log.warning("dropped a malformed wait signal (%d so far): %s", self.malformed, error)
            return
        except Exception:
            self.malformed += 1
            self._metrics.increment("wow.command.wait.signal_malformed")
            log.exception("dropped a wait signal that failed to decode")
            return
        try:
            delivered = self._deliver(signal)
        except Exception:
            log.exception("delivering wait signal of %s failed", signal.command_id)
            return
        if not delivered:
            self.unmatched += 1
            self._metrics.increment("wow.command.wait.signal_unmatched")


class RemoteSignals:
    """Sends signals to other processes through one notifier, fire and forget.

    At most ``max_pending`` notifications are in flight; past that a signal is dropped
    and counted (a broker that stalls cannot make memory grow). A signal for an endpoint
    of another kind than the notifier's cannot be delivered: dropped and counted.
    """

    __slots__ = ("_last_warning", "_metrics", "_pending", "dropped", "failed", "max_pending", "notifier")

    def __init__(
        self, notifier: CommandWaitNotifier, metrics: Metrics | None = None, max_pending: int = 10_000
    ):
        self.notifier = notifier
        self.max_pending = max_pending
        self._metrics = metrics or NoopMetrics()
        self._pending: set[asyncio.Task[None]] = set()
        self._last_warning = 0.0
        self.failed = 0
        self.dropped = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def send(self, endpoint_text: str, signal: WaitSignal) -> None:
        """Start sending ``signal`` to ``endpoint_text`` (a header value); never raises."""
        try:
            endpoint = WaitEndpoint.parse(endpoint_text)
        except InvalidWaitEndpointError as error:
            self._drop(f"{error}")
            return
        if endpoint.kind != self.notifier.kind:
            self._drop(
                f"endpoint {endpoint_text[:120]!r} is not reachable by the {self.notifier.kind} notifier"
            )
            return
        if len(self._pending) >= self.max_pending:
            self._drop(f"{len(self._pending)} notifications already in flight")
            return
        task = asyncio.get_running_loop().create_task(self._notify(endpoint, signal))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        try:
            await self.notifier.notify(endpoint, signal)
        except Exception as error:
            self.failed += 1
            self._metrics.increment("wow.command.wait.notify_failed", tags={"notifier": self.notifier.kind})
            self._warn(
                f"notifying {endpoint} of {signal.stage.value} of {signal.command_id} failed: {error!r}"
            )

    def _drop(self, why: str) -> None:
        self.dropped += 1
        self._metrics.increment("wow.command.wait.notify_dropped")
        self._warn(f"wait signal dropped: {why}")

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning > 10.0:  # a broker outage logs once per 10 s
            self._last_warning = now
            log.warning("%s (%d failed, %d dropped so far)", message, self.failed, self.dropped)

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the notifications in flight; True when none is left."""
        if not self._pending:
            return True
        _, pending = await asyncio.wait(set(self._pending), timeout=timeout)
        return not pending


class LocalWaitNotifier:
    """The ``in_memory`` notifier: the process's own coordinator is its only endpoint.

    Signals for another process's endpoint cannot be delivered (there is no broker):
    :meth:`notify` raises :class:`ConnectionError`.
    """

    kind = "in_memory"

    def __init__(self) -> None:
        self.endpoint = WaitEndpoint(self.kind, process_id())

    async def start(self, sink: WaitSignalSink) -> WaitEndpoint:
        return self.endpoint

    async def notify(self, endpoint: WaitEndpoint, signal: WaitSignal) -> None:
        raise ConnectionError(f"the in_memory notifier reaches no other process ({endpoint})")

    async def close(self) -> None:
        return None


class WaitNotifierService:
    """The runtime's handle on its notifier: started with the process (after the
    transports, before any dispatcher), it gives the coordinator this process's endpoint
    and the sending half; closed after the dispatchers stopped (notifications in flight
    get ``drain_timeout``)."""

    def __init__(
        self,
        notifier: CommandWaitNotifier,
        coordinator: WaitCoordinator,
        *,
        metrics: Metrics | None = None,
        max_pending: int = 10_000,
        drain_timeout: float = 2.0,
    ) -> None:
        self.notifier = notifier
        self.coordinator = coordinator
        self.sink = WaitSignalSink(coordinator.receive, metrics)
        self.remote = RemoteSignals(notifier, metrics, max_pending)
        self.drain_timeout = drain_timeout
        self.endpoint: WaitEndpoint | None = None

    @property
    def name(self) -> str:
        return f"wait notifier {self.notifier.kind!r}"

    async def start(self) -> None:
        self.endpoint = await self.notifier.start(self.sink)
        self.coordinator.endpoint = str(self.endpoint)
        self.coordinator.remote = self.remote
        log.info("wait signals of this process arrive at %s", self.endpoint)

    async def close(self) -> None:
        if not await self.remote.drain(self.drain_timeout):
            log.warning("wait notifications still in flight on close were abandoned")
        if self.coordinator.remote is self.remote:
            self.coordinator.remote = None
        await self.notifier.close()
