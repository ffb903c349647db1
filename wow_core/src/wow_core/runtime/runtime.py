"""WowRuntime: the lifecycle of one wow-py process.

Start, in order:

1. **transports ready**: every transport is started (connected), then the services that
   need them (the wait notifier, :meth:`Lifecycle.add_service`);
2. **receivers open**: every dispatcher that can prepare (``prepare()``) opens its
   receivers and waits until they are ready, before any dispatcher processes; the
   dispatchers prepare at once (each Kafka consumer group join waits for the broker's
   rebalance delay: one after another, start-up would wait that once per group);
3. **dispatchers run**: every dispatcher opens processing and consumes (``start()``).

Stop, in order, within ``settings.runtime.shutdown_timeout``:

1. **dispatchers stop** taking work and finish what they hold (``stop(timeout)``), the
   executor lets admitted work finish;
2. **flushables** registered with :meth:`WowRuntime.register_flush` (the local-first
   distributed copy queues) are flushed with what is left of the timeout; one that
   overruns is cancelled;
3. **closeables** close in reverse registration order: buses, then transports and
   stores (registered first, closed last).

A failure while starting stops what started and raises :class:`StartError`, one message
naming the part that did not start (the transport, a store, a dispatcher's receivers) and
the cause; the original exception is its ``__cause__``. A broker that is down is reported
this way, not retried: start-up does not wait for a broker to come up.

A second ``stop`` waits for the first. ``stop`` returns True when every step finished
in time. Not guaranteed: anything past the shutdown timeout (copies cancelled past it are
lost, see the local-first page).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

from wow_core.cluster.intake import CommandIntake
from wow_core.command.coordinator import WaitCoordinator
from wow_core.command.gateway import CommandGateway
from wow_core.command.notifier import WaitNotifierService
from wow_core.concurrency import TogetherError, all_or_none
from wow_core.event.pipeline import EventDispatch
from wow_core.eventsourcing.store import EventStore, SnapshotRepository
from wow_core.messaging.contract import CommandBus, DomainEventBus, StateEventBus
from wow_core.metrics import Metrics
from wow_core.middleware import Middleware, undecorated
from wow_core.modeling.dispatcher import CommandDispatcher
from wow_core.modeling.kernel import CommandKernel
from wow_core.modeling.registry import AggregateRegistry
from wow_core.runtime.keyed_executor import KeyedExecutor
from wow_core.runtime.settings import WowSettings
from wow_core.transport.spi import Transport

log = logging.getLogger("wow.runtime")

Flush = Callable[[float], Awaitable[Any]]
"""A flush: called with the seconds it may take; the runtime cancels it past them."""


@runtime_checkable
class Dispatcher(Protocol):
    """What the runtime runs. An optional ``async prepare()`` opens receivers and waits
    until they are ready without processing; the runtime calls it on every dispatcher
    before starting any."""

    async def start(self) -> None: ...

    async def stop(self, timeout: float | None = None) -> bool: ...


class StartError(RuntimeError):
    """A part of the runtime did not start; the message names it and the cause.

    Raised by :meth:`Lifecycle.start` after it stopped what had started. ``part`` is the
    label of what failed (``"transport 'redis'"``, ``"event store"``...).
    """

    def __init__(self, part: str, cause: BaseException) -> None:
        reason = (str(cause) or type(cause).__name__).rstrip(". ")
        super().__init__(f"the {part} did not start: {reason}")
        self.part = part


class Startable(Protocol):
    async def start(self) -> None: ...


class Closeable(Protocol):
    async def close(self) -> None: ...


SLOW_START_WARNING = 30.0
"""Seconds between two warnings of a start-up that has not finished (what it waits for)."""


class RuntimeState(StrEnum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Lifecycle:
    """The ordered start and stop of transports, dispatchers, flushables, closeables."""

    def __init__(self, shutdown_timeout: float = 30.0) -> None:
        self.shutdown_timeout = shutdown_timeout
        self.transports: list[Startable] = []
        self._stores: list[tuple[str, Startable]] = []
        self._services: list[tuple[str, Startable]] = []
        self.dispatchers: list[Dispatcher] = []
        self._flushes: list[tuple[str, Flush]] = []
        self._closeables: list[tuple[str, Closeable]] = []
        self.state = RuntimeState.NEW
        self._stopped: asyncio.Future[bool] | None = None
        self._starting = ""
        """What :meth:`start` waits for now (for the slow-start warning)."""

    # -- registration -------------------------------------------------------------------

    def add_transport(self, transport: Startable) -> None:
        self.transports.append(transport)

    def add_store(self, store: object, name: str) -> None:
        """Start ``store`` before the transports when it has an ``async start()`` (a store
        that checks its server answers); a store without one is not started."""
        start = getattr(store, "start", None)
        if start is not None and asyncio.iscoroutinefunction(start):
            self._stores.append((name, store))  # type: ignore[arg-type]

    def add_service(self, service: Startable, name: str) -> None:
        """Start ``service`` after the transports and before any dispatcher prepares."""
        self._services.append((name, service))

    def add_dispatcher(self, dispatcher: Dispatcher) -> None:
        if self.state is not RuntimeState.NEW:
            raise RuntimeError("dispatchers are added before the runtime starts")
        self.dispatchers.append(dispatcher)

    def register_flush(self, flush: Flush, name: str = "") -> None:
        """Flush ``flush(timeout)`` on stop, after the dispatchers stopped and before the
        transports close (the local-first copy queues register here)."""
        self._flushes.append((name or getattr(flush, "__qualname__", repr(flush)), flush))

    def add_closeable(self, closeable: Closeable, name: str = "") -> None:
        """Close ``closeable`` on stop; later registrations close first."""
        if any(existing is closeable for _, existing in self._closeables):
            return
        self._closeables.append((name or type(closeable).__name__, closeable))

    # -- start and stop -----------------------------------------------------------------

    async def start(self) -> None:
        if self.state is not RuntimeState.NEW:
            raise RuntimeError(f"the runtime is {self.state.value}; it starts once")
        self.state = RuntimeState.STARTING
        self._starting = ""
        watchdog = asyncio.get_running_loop().create_task(self._warn_while_starting(), name="wow-slow-start")
        try:
            for label, store in self._stores:
                self._starting = label
                await store.start()
            for transport in self.transports:
                self._starting = f"transport {getattr(transport, 'name', type(transport).__name__)!r}"
                await transport.start()
            for label, service in self._services:
                self._starting = label
                await service.start()
            preparing = [
                (_name(dispatcher), prepare)
                for dispatcher in self.dispatchers
                if (prepare := getattr(dispatcher, "prepare", None)) is not None
            ]
            if preparing:
                self._starting = f"receivers of {', '.join(name for name, _ in preparing)}"
                failure: TogetherError | None = None
                try:
                    await all_or_none([prepare() for _, prepare in preparing])
                except TogetherError as failed:
                    failure = failed
                if failure is not None:  # raised out of the handler: its own context kept
                    self._starting = f"receivers of {preparing[failure.index][0]}"
                    raise failure.error
            for dispatcher in self.dispatchers:
                self._starting = f"dispatcher {_name(dispatcher)}"
                await dispatcher.start()
        except Exception as error:
            # No traceback and not an error here: the caller gets the StartError (its
            # cause chained) and reports it; the CLI prints it as its one message.
            log.info("start failed (%s: %s); stopping what started", self._starting, error)
            self.state = RuntimeState.RUNNING
            await self.stop()
            raise StartError(self._starting, error) from error
        except BaseException:
            self.state = RuntimeState.RUNNING
            await self.stop()
            raise
        finally:
            watchdog.cancel()
        self.state = RuntimeState.RUNNING

    async def _warn_while_starting(self) -> None:
        """Say, every :data:`SLOW_START_WARNING` seconds of a start that has not finished,
        what it waits for: a broker that answers but never lets a member in (a group that
        keeps rebalancing) otherwise holds the start-up without a word."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while True:
            await asyncio.sleep(SLOW_START_WARNING)
            log.warning(
                "start-up still waits for the %s after %.0fs (a broker that does not answer, or a "
                "consumer group that keeps rebalancing; --log-level DEBUG shows the client's steps)",
                self._starting or "runtime",
                loop.time() - began,
            )

    async def stop(self, timeout: float | None = None) -> bool:
        if self._stopped is not None:
            return await asyncio.shield(self._stopped)
        loop = asyncio.get_running_loop()
        self._stopped = loop.create_future()
        self.state = RuntimeState.STOPPING
        budget = self.shutdown_timeout if timeout is None else timeout
        deadline = loop.time() + budget

        def remaining() -> float:
            return max(0.0, deadline - loop.time())

        clean = True
        try:
            # Each part gets what is left of the budget and a short grace, then is cancelled
            # and named: the shutdown timeout bounds the whole stop, whatever a part does.
            results = await asyncio.gather(
                *(_bounded(d.stop(remaining()), remaining() + _GRACE) for d in self.dispatchers),
                return_exceptions=True,
            )
            for dispatcher, result in zip(self.dispatchers, results, strict=True):
                if result is True:
                    continue
                clean = False
                if isinstance(result, TimeoutError):
                    log.warning(
                        "dispatcher %s overran the shutdown timeout (%.1fs): its stop was cancelled",
                        _described(dispatcher),
                        budget,
                    )
                elif result is False:  # the stop returned in time, with work still in flight
                    log.warning(
                        "dispatcher %s overran the shutdown timeout (%.1fs): work it held had not finished",
                        _described(dispatcher),
                        budget,
                    )
                elif isinstance(result, BaseException):
                    log.warning(
                        "dispatcher %s failed to stop: %s",
                        _described(dispatcher),
                        _reason(result),
                        exc_info=result,
                    )
                else:
                    log.warning("dispatcher %s did not stop cleanly: %r", _described(dispatcher), result)
            try:
                await _bounded(self.after_dispatchers(remaining()), remaining() + _GRACE)
            except TimeoutError:
                clean = False
                log.warning("closing the executor overran the shutdown timeout (%.1fs); cancelled", budget)
            for name, flush in self._flushes:
                left = remaining()
                try:
                    await asyncio.wait_for(flush(left), left + 0.5)
                except TimeoutError:
                    clean = False
                    log.warning("flush %s overran the shutdown timeout (%.1fs); cancelled", name, budget)
                except Exception:
                    clean = False
                    log.exception("flush %s failed", name)
            for name, closeable in reversed(self._closeables):
                try:
                    # past the budget, each close still gets a moment to close its connections
                    await _bounded(closeable.close(), max(remaining(), _CLOSE_AT_LEAST))
                except TimeoutError:
                    clean = False
                    log.warning("closing %s overran the shutdown timeout (%.1fs); cancelled", name, budget)
                except Exception:
                    clean = False
                    log.exception("closing %s failed", name)
        finally:
            self.state = RuntimeState.STOPPED
            self._stopped.set_result(clean)
        return clean

    async def after_dispatchers(self, timeout: float) -> None:
        """Hook between stopping the dispatchers and flushing (the runtime closes its executor)."""


_T = TypeVar("_T")
_GRACE = 1.0  # seconds a part may take beyond the shutdown budget before it is cancelled
_CLOSE_AT_LEAST = 2.0  # seconds each close gets even when the budget is spent


async def _bounded(work: Awaitable[_T], timeout: float) -> _T:
    return await asyncio.wait_for(work, timeout)


class WowRuntime(Lifecycle):
    """One process: its buses, stores, kernel, gateway, dispatchers and their lifecycle.

    Build it with :meth:`WowApp.runtime` (or :func:`~wow_core.runtime.assembly.build_runtime`)
    rather than by hand; use it as ``async with runtime:`` or ``start()``/``stop()``.
    """

    def __init__(
        self,
        *,
        settings: WowSettings,
        aggregates: AggregateRegistry,
        command_bus: CommandBus,
        domain_event_bus: DomainEventBus,
        state_event_bus: StateEventBus,
        event_store: EventStore,
        snapshot_repository: SnapshotRepository,
        kernel: CommandKernel,
        coordinator: WaitCoordinator,
        gateway: CommandGateway,
        executor: KeyedExecutor,
        metrics: Metrics,
        transport: Transport | None = None,
        name: str = "",
        middleware: Sequence[Middleware] = (),
    ) -> None:
        super().__init__(settings.runtime.shutdown_timeout)
        self.settings = settings
        self.name = name or settings.service_name
        self.aggregates = aggregates
        self.command_bus = command_bus
        self.domain_event_bus = domain_event_bus
        self.state_event_bus = state_event_bus
        self.event_store = event_store
        self.snapshot_repository = snapshot_repository
        self.kernel = kernel
        self.coordinator = coordinator
        self.gateway = gateway
        self.executor = executor
        self.metrics = metrics
        self.transport = transport
        #: The active middleware (the first outermost); the event dispatch pipeline takes
        #: the observers they contribute (``observe_event_processing``).
        self.middleware: tuple[Middleware, ...] = tuple(middleware)
        # Closed last to first: stores and the transport after the buses.
        self.add_closeable(event_store, "event store")
        self.add_closeable(snapshot_repository, "snapshot repository")
        self.add_store(event_store, "event store")
        if undecorated(snapshot_repository) is not undecorated(event_store):  # one object may be both
            self.add_store(snapshot_repository, "snapshot repository")
        if transport is not None:
            self.add_transport(transport)
            self.add_closeable(transport, f"transport {transport.name}")
        for label, bus in (("command", command_bus), ("event", domain_event_bus), ("state", state_event_bus)):
            self.add_closeable(bus, f"{label} bus")
        self.command_dispatcher = CommandDispatcher(
            command_bus,
            kernel,
            coordinator,
            executor,
            group=f"{self.name}.command",
        )
        self.add_dispatcher(self.command_dispatcher)
        # Set by the assembly: the event dispatchers (wow_core.event), added above too.
        self.event_dispatch: EventDispatch | None = None
        # Set by the assembly: the CommandWaitNotifier, started first and closed first.
        self.wait_notifier: WaitNotifierService | None = None
        # Set by the assembly when WOW_CLUSTER__INTAKE__ENABLED: one intake per context.
        self.intakes: list[CommandIntake] = []

    async def after_dispatchers(self, timeout: float) -> None:
        if not await self.executor.close(timeout):
            log.warning("work still running past the shutdown timeout was cancelled")

    async def __aenter__(self) -> WowRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def describe(self) -> dict[str, str]:
        """What this runtime runs on, for the start-up log."""
        return {
            "service": self.name,
            "transport": self.transport.name if self.transport is not None else "none (in-process buses)",
            "command bus": type(undecorated(self.command_bus)).__name__,
            "event store": type(undecorated(self.event_store)).__name__,
            "snapshot repository": type(undecorated(self.snapshot_repository)).__name__,
            "aggregates": ", ".join(sorted(str(n) for n in self.aggregates.named_aggregates)) or "none",
            "dispatchers": ", ".join(_name(d) for d in self.dispatchers),
        }


def _name(dispatcher: object) -> str:
    """What logs call ``dispatcher``: its ``label`` (the two halves of one event dispatcher
    share a name: ``bank.ProjectionDispatcher (events)`` and ``... (state events)``), else its
    ``name``, else its class."""
    for attribute in ("label", "name"):
        name = getattr(dispatcher, attribute, None)
        if isinstance(name, str) and name:
            return name
    return type(dispatcher).__name__


_SHOWN_FUNCTIONS = 4


def _described(dispatcher: object) -> str:
    """:func:`_name`, and the functions it runs when it says (the first few)."""
    functions = [
        name
        for f in getattr(dispatcher, "functions", ())
        if isinstance(name := getattr(f, "qualified_name", None), str)
    ]
    if not functions:
        return _name(dispatcher)
    shown = ", ".join(functions[:_SHOWN_FUNCTIONS])
    if len(functions) > _SHOWN_FUNCTIONS:
        shown += f" and {len(functions) - _SHOWN_FUNCTIONS} more"
    return f"{_name(dispatcher)} [{shown}]"


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
