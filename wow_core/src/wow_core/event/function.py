"""Registered event functions and the registrar that holds them (spec 003, "Function
Registration and Selection").

A :class:`MessageFunction` is one parsed function of a processor, saga, projection or
the snapshot component. Its metadata is what dispatch selects on: the
:class:`FunctionKind`, the context, processor and function names, the supported event
body type and the named-aggregate topics. A :class:`MessageFunctionRegistrar` holds the
functions of one component kind; dispatch splits it by kind, then selects by topic and
body type (and, for a compensation message, by the names in its header).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from wow_core.event.compensation import CompensationTarget
from wow_core.event.failure import FunctionRef, FunctionRetry
from wow_core.model import DomainEvent, NamedAggregate, StateEvent


class FunctionKind(StrEnum):
    """What a function consumes: a domain event (``EVENT``) or a state event (``STATE_EVENT``)."""

    EVENT = "EVENT"
    STATE_EVENT = "STATE_EVENT"


class ComponentKind(StrEnum):
    """The component (and dispatcher) a function belongs to; also what a filter targets."""

    EVENT_PROCESSOR = "event_processor"
    STATELESS_SAGA = "stateless_saga"
    PROJECTION = "projection"
    SNAPSHOT = "snapshot"


class FunctionRegistrationError(TypeError):
    """A declared function that cannot be registered; the message names it and why."""


Invoker = Callable[[Any], Any]
"""Calls the user's function with what it takes; may return an awaitable."""


@dataclass(frozen=True, slots=True, eq=False)
class MessageFunction:
    """One registered event function.

    ``invoke`` runs the user code exactly once per call; it guarantees nothing about
    side effects outside it (a retry calls it again).
    """

    kind: FunctionKind
    component: ComponentKind
    context_name: str
    processor_name: str
    function_name: str
    body_types: tuple[type[Any], ...]
    named_aggregates: frozenset[NamedAggregate]
    invoker: Invoker = field(repr=False)
    retry_enabled: bool = True
    takes_body: bool = True
    """EVENT functions: the body is passed (True) or the whole ``DomainEvent`` (False)."""
    retry: FunctionRetry | None = None
    """What ``@retry(...)`` declared (durable compensation), if anything."""
    ref: FunctionRef = field(init=False, repr=False)
    is_async: bool = field(init=False, repr=False)
    """The user function is a coroutine function."""

    def __post_init__(self) -> None:
        ref = FunctionRef(self.context_name, self.processor_name, self.function_name, self.kind.value)
        object.__setattr__(self, "ref", ref)
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.invoker))

    @property
    def qualified_name(self) -> str:
        return f"{self.context_name}.{self.processor_name}.{self.function_name}"

    def supports_body(self, body: object) -> bool:
        return isinstance(body, self.body_types)

    def supports_topic(self, named_aggregate: NamedAggregate) -> bool:
        return named_aggregate in self.named_aggregates

    def matches_target(self, target: CompensationTarget) -> bool:
        return (
            target.context_name == self.context_name
            and target.processor_name == self.processor_name
            and target.function_name == self.function_name
        )

    def call(self, message: DomainEvent[Any] | StateEvent[Any]) -> Any:
        """Call the user function with ``message`` (or its body); may return an awaitable."""
        if self.takes_body and self.kind is FunctionKind.EVENT:
            return self.invoker(message.body)  # type: ignore[union-attr]
        return self.invoker(message)

    async def invoke(self, message: DomainEvent[Any] | StateEvent[Any]) -> Any:
        """Call the user function with ``message`` (or its body); await it if it is async."""
        result = self.call(message)
        if self.is_async or inspect.isawaitable(result):
            result = await result
        return result

    def __repr__(self) -> str:
        return f"MessageFunction({self.kind.value} {self.qualified_name})"


class MessageFunctionRegistrar:
    """The functions of one component kind, in registration order."""

    __slots__ = ("_functions", "component")

    def __init__(self, component: ComponentKind, functions: Iterable[MessageFunction] = ()) -> None:
        self.component = component
        self._functions: list[MessageFunction] = []
        for function in functions:
            self.register(function)

    def register(self, function: MessageFunction) -> None:
        if function.component is not self.component:
            raise FunctionRegistrationError(
                f"{function!r} belongs to {function.component.value}, not {self.component.value}"
            )
        for known in self._functions:
            if known.qualified_name == function.qualified_name and known.kind is function.kind:
                raise FunctionRegistrationError(f"{function!r} is registered twice")
        self._functions.append(function)

    def __iter__(self) -> Iterator[MessageFunction]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    def of_kind(self, kind: FunctionKind) -> list[MessageFunction]:
        return [function for function in self._functions if function.kind is kind]

    def topics(self, kind: FunctionKind) -> frozenset[NamedAggregate]:
        """The named aggregates that functions of ``kind`` consume (the only topics subscribed)."""
        return frozenset(topic for function in self.of_kind(kind) for topic in function.named_aggregates)
