"""Given/when/expect specifications of aggregates, sagas, projections and event processors.

::

    from wow_core.testing import AggregateSpec

    def test_a_withdrawal_beyond_the_balance_is_refused() -> None:
        (
            AggregateSpec(Account)
            .given(AccountOpened("ann", 100))
            .when(Withdraw(500))
            .expect_error("INSUFFICIENT_FUNDS")
        )

An :class:`AggregateSpec` decides the command with the real
:class:`~wow_core.modeling.kernel.CommandKernel` over an in-memory event store holding the
``given`` events (one version each), so what it checks is what a running service does:
the body's validation, the creation rules, the command function, sourcing and the result.
A :class:`SagaSpec` runs a stateless saga's functions on one event and collects the
commands they return; :class:`ProjectionSpec` and :class:`EventProcessorSpec` run a
component's functions on the ``given`` events, then the ``when`` event, and check the
component afterwards.

Every ``expect_*`` method is synchronous (plain pytest runs it, no event loop needed;
inside a running loop the work runs on a private loop in a worker thread), returns the
expectation so checks chain, and fails with an ``AssertionError`` that says what
happened instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar, overload

from wow_core.command.stages import ErrorCodes
from wow_core.event.declare import component_spec, owner_lookup, parse_component
from wow_core.event.function import ComponentKind, FunctionKind, MessageFunction
from wow_core.event.function_filter import saga_commands
from wow_core.eventsourcing.in_memory import InMemoryEventStore
from wow_core.model import (
    DEFAULT_TENANT_ID,
    AggregateId,
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    NamedAggregate,
    new_id,
)
from wow_core.modeling.aggregate import AggregateMetadata, metadata_of
from wow_core.modeling.kernel import CommandKernel, CommandOutcome
from wow_core.modeling.registry import AggregateRegistry

T = TypeVar("T")
C = TypeVar("C")

DEFAULT_ID = "spec-1"
"""The aggregate id a specification uses unless told otherwise."""


def run_sync(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``work()`` to completion from synchronous code, inside a running loop or not."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wow-spec") as pool:
        return pool.submit(asyncio.run, work()).result()


def _shown(values: Iterable[object]) -> str:
    listed = ", ".join(repr(v) for v in values)
    return f"[{listed}]" if listed else "nothing"


# -- aggregates -----------------------------------------------------------------------------


class AggregateSpec(Generic[C]):
    """A specification of one aggregate class: ``given`` events, ``when`` a command body.

    ``aggregate_id`` and ``tenant_id`` name the aggregate the events belong to and the
    command goes to. Each ``given`` returns a new specification (they can be shared as
    a starting point between tests).
    """

    __slots__ = ("_given", "aggregate_id", "metadata")

    def __init__(
        self,
        aggregate: type[C] | AggregateMetadata[Any],
        *,
        aggregate_id: str = DEFAULT_ID,
        tenant_id: str = DEFAULT_TENANT_ID,
        _given: tuple[tuple[object, ...], ...] = (),
    ) -> None:
        self.metadata: AggregateMetadata[Any] = (
            aggregate if isinstance(aggregate, AggregateMetadata) else metadata_of(aggregate)
        )
        self.aggregate_id = AggregateId(self.metadata.named_aggregate, aggregate_id, tenant_id)
        self._given = _given

    def given(self, *events: object | tuple[object, ...]) -> AggregateSpec[C]:
        """The aggregate's history: each event is one version (a tuple of events is one
        version holding several, as one command that emitted them)."""
        versions = tuple(e if isinstance(e, tuple) else (e,) for e in events)
        for version in versions:
            for body in version:
                if type(body) not in self.metadata.sourcing:
                    known = ", ".join(sorted(t.__name__ for t in self.metadata.sourcing)) or "none"
                    raise TypeError(
                        f"{self.metadata.named_aggregate} sources no {type(body).__name__} "
                        f"(it sources {known})"
                    )
        return AggregateSpec(
            self.metadata,
            aggregate_id=self.aggregate_id.id,
            tenant_id=self.aggregate_id.tenant_id,
            _given=self._given + versions,
        )

    def when(
        self,
        body: object,
        *,
        request_id: str = "",
        aggregate_version: int | None = None,
        header: Mapping[str, str] | None = None,
    ) -> AggregateExpectation:
        """Decide the command carrying ``body`` (lazily: on the first ``expect_*``)."""
        function = self.metadata.commands.get(type(body))
        if function is None:
            known = ", ".join(sorted(t.__name__ for t in self.metadata.commands)) or "none"
            raise TypeError(
                f"{self.metadata.named_aggregate} handles no {type(body).__name__} command "
                f"(it handles {known})"
            )
        registry = AggregateRegistry([self.metadata])
        command = registry.command(
            body,
            self.aggregate_id.id,
            tenant_id=self.aggregate_id.tenant_id,
            request_id=request_id,
            aggregate_version=aggregate_version,
            header=header,
        )
        return AggregateExpectation(self, registry, command)

    def _history(self) -> list[DomainEventStream]:
        streams = []
        for version, bodies in enumerate(self._given, start=1):
            command_id = new_id()
            events = tuple(
                DomainEvent(
                    self.aggregate_id,
                    body,
                    type(body).__name__,
                    version,
                    index,
                    index == len(bodies),
                    command_id=command_id,
                )
                for index, body in enumerate(bodies, start=1)
            )
            streams.append(DomainEventStream(self.aggregate_id, version, events, command_id, command_id))
        return streams


class AggregateExpectation:
    """What one command did; see :class:`AggregateSpec`. The ``expect_*`` methods chain."""

    __slots__ = ("_outcome", "_registry", "command", "spec")

    def __init__(self, spec: AggregateSpec[Any], registry: AggregateRegistry, command: CommandMessage[Any]):
        self.spec = spec
        self.command = command
        self._registry = registry
        self._outcome: CommandOutcome | None = None

    @property
    def outcome(self) -> CommandOutcome:
        """The kernel's outcome (decided on first use)."""
        if self._outcome is None:
            self._outcome = run_sync(self._decide)
        return self._outcome

    async def _decide(self) -> CommandOutcome:
        store = InMemoryEventStore()
        for stream in self.spec._history():
            await store.append(stream)
        return await CommandKernel(self._registry, store).process(self.command)

    @property
    def events(self) -> list[object]:
        """The bodies of the events the command appended (none for a rejection)."""
        stream = self.outcome.stream
        return [] if stream is None else [event.body for event in stream.events]

    @property
    def state(self) -> Any:
        """The aggregate's state after the command (its state before, for a rejection)."""
        outcome = self.outcome
        if outcome.stream is not None:
            return outcome.state
        return run_sync(self._state_before)  # nothing appended: the state is unchanged

    async def _state_before(self) -> Any:
        store = InMemoryEventStore()
        for stream in self.spec._history():
            await store.append(stream)
        _, state = await CommandKernel(self._registry, store).load_state(
            self.spec.metadata, self.command.aggregate_id
        )
        return state

    def _describe(self) -> str:
        outcome = self.outcome
        if outcome.succeeded:
            return f"it appended {_shown(self.events)} at version {outcome.version}"
        listed = "; ".join(str(v) for v in outcome.errors)
        detail = f" ({listed})" if listed else ""
        return f"it was rejected with {outcome.error_code}: {outcome.error_msg}{detail}"

    def expect_events(self, *events: object) -> AggregateExpectation:
        """The command appended exactly ``events`` (compared with ``==``), in order."""
        if not self.outcome.succeeded or self.events != list(events):
            raise AssertionError(f"expected the events {_shown(events)}, but {self._describe()}")
        return self

    def expect_event_types(self, *types: type[Any]) -> AggregateExpectation:
        """The command appended events of exactly these types, in order."""
        found = [type(e) for e in self.events]
        if not self.outcome.succeeded or found != list(types):
            raise AssertionError(
                f"expected events of the types [{', '.join(t.__name__ for t in types)}], "
                f"but {self._describe()}"
            )
        return self

    def expect_no_events(self) -> AggregateExpectation:
        """The command succeeded and appended nothing."""
        if not self.outcome.succeeded or self.events:
            raise AssertionError(f"expected no events, but {self._describe()}")
        return self

    def expect_error(self, code: str, message: str | None = None) -> AggregateExpectation:
        """The command was rejected with ``code`` (and, if given, a message containing
        ``message``); nothing was appended."""
        outcome = self.outcome
        if outcome.error_code != code or (message is not None and message not in outcome.error_msg):
            wanted = code if message is None else f"{code} with a message containing {message!r}"
            raise AssertionError(f"expected a rejection with {wanted}, but {self._describe()}")
        return self

    def expect_invalid(self, *paths: str) -> AggregateExpectation:
        """The body was invalid (``COMMAND_INVALID``), with a violation at each of ``paths``."""
        self.expect_error(ErrorCodes.COMMAND_INVALID)
        found = {v.path for v in self.outcome.errors}
        missing = [p for p in paths if p not in found]
        if missing:
            raise AssertionError(f"expected violations at {missing}, but {self._describe()}")
        return self

    def expect_state(self, expected: object | Callable[[Any], bool]) -> AggregateExpectation:
        """The state after the command equals ``expected``, or ``expected(state)`` is true."""
        state = self.state
        if callable(expected) and not isinstance(expected, type):
            if not expected(state):
                raise AssertionError(f"the state {state!r} does not satisfy the check; {self._describe()}")
        elif state != expected:
            raise AssertionError(f"expected the state {expected!r}, but it is {state!r}; {self._describe()}")
        return self

    def expect_result(self, expected: Mapping[str, Any]) -> AggregateExpectation:
        """The command function's result equals ``expected``."""
        outcome = self.outcome
        if not outcome.succeeded or dict(outcome.result) != dict(expected):
            raise AssertionError(
                f"expected the result {dict(expected)!r}, but it is {dict(outcome.result)!r}; "
                + self._describe()
            )
        return self

    def expect_version(self, version: int) -> AggregateExpectation:
        """The aggregate is at ``version`` after the command."""
        if self.outcome.version != version:
            raise AssertionError(f"expected version {version}, but {self._describe()}")
        return self


# -- event functions ------------------------------------------------------------------------


class _ComponentSpec(Generic[C]):
    """The shared part of the specifications of event components.

    ``component`` is the class (a fresh instance is made for every ``when``, so tests
    sharing a specification share no state) or an instance (used as it is).
    """

    kind: ComponentKind

    __slots__ = ("_given", "_source", "aggregates", "component", "context", "functions")

    # Two overloads, so that a type checker infers C from a class (C is the class's
    # instances) as well as from an instance; ``C | type[C]`` alone leaves C ambiguous.
    @overload
    def __init__(
        self,
        component: type[C],
        *,
        aggregates: Iterable[type[Any] | AggregateMetadata[Any]] = (),
        context: str = "spec",
        _given: tuple[DomainEvent[Any], ...] = (),
    ) -> None: ...

    @overload
    def __init__(
        self,
        component: C,
        *,
        aggregates: Iterable[type[Any] | AggregateMetadata[Any]] = (),
        context: str = "spec",
        _given: tuple[DomainEvent[Any], ...] = (),
    ) -> None: ...

    def __init__(
        self,
        component: C | type[C],
        *,
        aggregates: Iterable[type[Any] | AggregateMetadata[Any]] = (),
        context: str = "spec",
        _given: tuple[DomainEvent[Any], ...] = (),
    ) -> None:
        self._source = component
        self.aggregates = [a if isinstance(a, AggregateMetadata) else metadata_of(a) for a in aggregates]
        self.context = context
        self.component, self.functions = self._instance()
        self._given = _given

    def _instance(self) -> tuple[C, list[MessageFunction]]:
        source = self._source
        instance: Any = source() if isinstance(source, type) else source
        spec = component_spec(instance)
        if spec is None or spec.kind is not self.kind:
            what = self.kind.value.lower().replace("_", " ")
            raise TypeError(f"{type(instance).__name__} is not a {what}")
        functions = [
            f
            for f in parse_component(
                instance, default_context=self.context, owner=owner_lookup(self.aggregates)
            )
            if f.kind is FunctionKind.EVENT
        ]
        return instance, functions

    def event(
        self,
        body: object,
        aggregate_id: str = DEFAULT_ID,
        *,
        aggregate: NamedAggregate | type[Any] | None = None,
        version: int = 1,
        tenant_id: str = DEFAULT_TENANT_ID,
    ) -> DomainEvent[Any]:
        """The domain event carrying ``body`` of the aggregate ``aggregate_id`` (of the
        aggregate type that the component's functions for ``body`` listen to, or
        ``aggregate`` when several do)."""
        named = self._named(body, aggregate)
        return DomainEvent(
            AggregateId(named, aggregate_id, tenant_id),
            body,
            type(body).__name__,
            version,
            1,
            True,
            command_id=new_id(),
        )

    def _named(self, body: object, aggregate: NamedAggregate | type[Any] | None) -> NamedAggregate:
        if isinstance(aggregate, NamedAggregate):
            return aggregate
        if aggregate is not None:
            return metadata_of(aggregate).named_aggregate
        topics = {a for f in self.functions if f.supports_body(body) for a in f.named_aggregates}
        if len(topics) != 1:
            handled = f"listen to {sorted(map(str, topics))}" if topics else "handle it"
            raise TypeError(
                f"{type(self.component).__name__}: the functions for {type(body).__name__} {handled}; "
                "pass aggregate= to say whose event it is"
            )
        return next(iter(topics))

    def _as_event(self, event: object) -> DomainEvent[Any]:
        return event if isinstance(event, DomainEvent) else self.event(event)

    @staticmethod
    async def _run(functions: list[MessageFunction], event: DomainEvent[Any]) -> list[Any]:
        results = []
        named = event.aggregate_id.named_aggregate
        for function in functions:
            if function.supports_body(event.body) and function.supports_topic(named):
                result = function.call(event)
                if inspect.isawaitable(result):
                    result = await result
                results.append(result)
        return results

    def _handled(self, event: DomainEvent[Any]) -> bool:
        named = event.aggregate_id.named_aggregate
        return any(f.supports_body(event.body) and f.supports_topic(named) for f in self.functions)


class SagaSpec(_ComponentSpec[C]):
    """A stateless saga: ``when`` an event, ``expect_commands`` it sends.

    ``aggregates`` are the aggregate classes whose events the saga reacts to, when its
    functions name no topic themselves (as in a service, where they are found from the
    registered aggregates).
    """

    kind = ComponentKind.STATELESS_SAGA
    __slots__ = ()

    def when(self, event: object | DomainEvent[Any]) -> SagaExpectation:
        """Run the saga's functions on ``event`` (a body, or a :meth:`event`)."""
        message = self._as_event(event)
        if not self._handled(message):
            raise TypeError(
                f"{type(self.component).__name__} has no function for {message.name} "
                f"of {message.aggregate_id}"
            )
        _, functions = self._instance()
        results = run_sync(lambda: self._run(functions, message))
        commands = [command for result in results for command in saga_commands(result)]
        return SagaExpectation(message, commands)


class SagaExpectation:
    """The commands a saga returned for one event; the ``expect_*`` methods chain."""

    __slots__ = ("commands", "event")

    def __init__(self, event: DomainEvent[Any], commands: list[CommandMessage[Any]]) -> None:
        self.event = event
        self.commands = commands

    def expect_commands(self, *bodies: object) -> SagaExpectation:
        """The saga sent commands with exactly these bodies (compared with ``==``), in order."""
        found = [c.body for c in self.commands]
        if found != list(bodies):
            raise AssertionError(f"expected the commands {_shown(bodies)}, but the saga sent {_shown(found)}")
        return self

    def expect_command(self, body: object, aggregate_id: AggregateId | str | None = None) -> SagaExpectation:
        """Among the commands sent, one carries ``body`` (to ``aggregate_id``, when given:
        an :class:`AggregateId` or just its id)."""
        for command in self.commands:
            if command.body != body:
                continue
            if aggregate_id is None:
                return self
            target = command.aggregate_id
            if target == aggregate_id or target.id == aggregate_id:
                return self
        sent = _shown(f"{c.body!r} to {c.aggregate_id}" for c in self.commands)
        where = "" if aggregate_id is None else f" to {aggregate_id}"
        raise AssertionError(f"expected a command {body!r}{where}, but the saga sent {sent}")

    def expect_no_commands(self) -> SagaExpectation:
        """The saga handled the event and sent nothing."""
        if self.commands:
            raise AssertionError(
                f"expected no commands, but the saga sent {_shown(c.body for c in self.commands)}"
            )
        return self


class _StatefulSpec(_ComponentSpec[C]):
    """Projections and event processors: the component after the events."""

    __slots__ = ()

    def given(self, *events: object | DomainEvent[Any]) -> Any:
        """Events the component handled before (each a body or a :meth:`event`)."""
        return type(self)(
            self._source,
            aggregates=self.aggregates,
            context=self.context,
            _given=self._given + tuple(self._as_event(e) for e in events),
        )

    def when(self, event: object | DomainEvent[Any]) -> ComponentExpectation[C]:
        """Run the ``given`` events, then ``event``, through the component's functions."""
        message = self._as_event(event)
        component, functions = self._instance()

        async def apply() -> None:
            for given in self._given:
                await self._run(functions, given)
            await self._run(functions, message)

        error: Exception | None = None
        try:
            run_sync(apply)
        except Exception as raised:
            error = raised
        return ComponentExpectation(component, message, error)


class ProjectionSpec(_StatefulSpec[C]):
    """A projection: ``given`` events, ``when`` one more, ``expect`` the read model."""

    kind = ComponentKind.PROJECTION
    __slots__ = ()


class EventProcessorSpec(_StatefulSpec[C]):
    """An event processor: ``given`` events, ``when`` one more, ``expect`` its effects."""

    kind = ComponentKind.EVENT_PROCESSOR
    __slots__ = ()


class ComponentExpectation(Generic[C]):
    """The component after the events; the ``expect_*`` methods chain."""

    __slots__ = ("component", "error", "event")

    def __init__(self, component: C, event: DomainEvent[Any], error: Exception | None) -> None:
        self.component = component
        self.event = event
        self.error = error

    def expect(self, check: Callable[[C], bool]) -> ComponentExpectation[C]:
        """The functions succeeded and ``check(component)`` is true."""
        if self.error is not None:
            raise AssertionError(f"handling {self.event.name} raised {self.error!r}") from self.error
        if not check(self.component):
            raise AssertionError(
                f"{type(self.component).__name__} does not satisfy the check after {self.event.name}"
            )
        return self

    def expect_error(
        self, error_type: type[BaseException] = Exception, message: str | None = None
    ) -> ComponentExpectation[C]:
        """Handling the ``when`` event (or a ``given`` one) raised ``error_type``."""
        error = self.error
        if (
            error is None
            or not isinstance(error, error_type)
            or (message is not None and message not in str(error))
        ):
            raise AssertionError(
                f"expected {error_type.__name__} from handling {self.event.name}, got {error!r}"
            )
        return self


# -- a whole service in one process --------------------------------------------------------


class WowTestRuntime(Protocol):
    """The type of the pytest fixture ``wow_test_runtime``: ``await wow_test_runtime(app,
    **overrides)`` starts a :class:`TestRuntime` of ``app`` and returns its runtime; every
    runtime it started is stopped when the test ends."""

    async def __call__(self, app: Any, /, **overrides: Any) -> Any: ...


class TestRuntime:
    """Runs a :class:`~wow_core.runtime.app.WowApp` in this process on the in-memory
    default, whatever the environment says about the transport, the stores and the wait
    notifier (``WOW_TRANSPORT=kafka`` in a developer's shell does not reach a test)::

        async with TestRuntime(app) as runtime:
            result = await runtime.gateway.send_and_wait(runtime.aggregates.command(OpenAccount("ann")))

    Every wait stage works (the dispatchers run in-process); ``eventually`` polls what
    only a query shows. Other ``WOW_*`` settings still apply; pass ``overrides``
    (``WowSettings`` fields, e.g. ``command={"wait_timeout": 5}``) to set them.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, app: Any, *, service_name: str | None = None, **overrides: Any) -> None:
        from wow_core.runtime.settings import WowSettings

        fields: dict[str, Any] = {
            "transport": "in_memory",
            "failure_recorder": "none",
            "eventsourcing": {"store": "in_memory", "snapshot": "in_memory"},
            "command": {"wait": {"notifier": "in_memory"}},
        }
        fields.update(overrides)
        if service_name is not None:
            fields["service_name"] = service_name
        self.app = app
        self.settings = WowSettings.load(**fields)
        self.runtime: Any = None

    async def __aenter__(self) -> Any:
        self.runtime = self.app.runtime(self.settings)
        await self.runtime.start()
        return self.runtime

    async def __aexit__(self, *exc_info: object) -> None:
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            await runtime.stop()
