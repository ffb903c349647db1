"""The programming model: decorated classes whose methods are event functions.

.. code-block:: python

    @projection(context="bank", aggregates=["bank.account"])
    class AccountSummary:
        @on_event
        async def opened(self, event: AccountOpened) -> None: ...        # the body

        @on_event
        def deposited(self, event: DomainEvent[Deposited]) -> None: ...  # the whole event

        @on_state_event(body=Deposited)
        async def balance(self, state: StateEvent[Account]) -> None: ...

        @retry(enabled=False)
        @on_event(aggregate="bank.transfer")
        async def failed(self, event: TransferFailed) -> None: ...

``@event_processor``, ``@stateless_saga`` (whose functions return the commands to send)
and ``@projection`` mark the class; ``@on_event`` marks a :attr:`FunctionKind.EVENT`
function, which takes a domain event body (or the ``DomainEvent`` when annotated so);
``@on_state_event`` marks a :attr:`FunctionKind.STATE_EVENT` function, which takes the
``StateEvent``. A function's topics are its own ``aggregate=``, else the class's
``aggregates=``, else what the ``owner`` lookup passed to :func:`parse_component`
finds for its body type (the aggregates the runtime knows emit it).

Nothing is registered at import time: :func:`parse_component` turns an instance into
:class:`~wow_core.event.function.MessageFunction` values when the runtime is assembled.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from wow_core.event.failure import FunctionRetry
from wow_core.event.function import (
    ComponentKind,
    FunctionKind,
    FunctionRegistrationError,
    MessageFunction,
)
from wow_core.model import DomainEvent, NamedAggregate, StateEvent

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

AggregateSpec = str | NamedAggregate
OwnerLookup = Callable[[type[Any]], Iterable[NamedAggregate]]
"""Which named aggregates emit a body type (supplied by the runtime from its aggregates)."""

_COMPONENT_ATTR = "__wow_component__"
_FUNCTION_ATTR = "__wow_function__"
_RETRY_ATTR = "__wow_retry__"


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    kind: ComponentKind
    context_name: str | None
    name: str
    aggregates: tuple[NamedAggregate, ...]


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    kind: FunctionKind
    name: str | None
    aggregates: tuple[NamedAggregate, ...]
    body_types: tuple[type[Any], ...]


def _aggregates(spec: AggregateSpec | Sequence[AggregateSpec] | None) -> tuple[NamedAggregate, ...]:
    if spec is None:
        return ()
    items: Sequence[AggregateSpec] = [spec] if isinstance(spec, str | NamedAggregate) else spec
    return tuple(item if isinstance(item, NamedAggregate) else NamedAggregate.parse(item) for item in items)


def _body_types(body: type[Any] | Sequence[type[Any]] | None) -> tuple[type[Any], ...]:
    if body is None:
        return ()
    items = (body,) if isinstance(body, type) else tuple(body)
    for item in items:
        if not isinstance(item, type):
            raise FunctionRegistrationError(f"body= takes classes, got {item!r}")
    return items


def _component(kind: ComponentKind) -> Callable[..., Any]:
    def decorator(
        cls: type[T] | None = None,
        *,
        context: str | None = None,
        name: str | None = None,
        aggregates: Sequence[AggregateSpec] | AggregateSpec | None = None,
    ) -> Any:
        def mark(target: type[T]) -> type[T]:
            if not isinstance(target, type):
                raise FunctionRegistrationError(f"@{kind.value} decorates a class, not {target!r}")
            setattr(
                target,
                _COMPONENT_ATTR,
                ComponentSpec(kind, context, name or target.__name__, _aggregates(aggregates)),
            )
            return target

        return mark if cls is None else mark(cls)

    decorator.__name__ = kind.value
    decorator.__doc__ = f"Mark a class as a {kind.value.replace('_', ' ')} component."
    return decorator


event_processor = _component(ComponentKind.EVENT_PROCESSOR)
stateless_saga = _component(ComponentKind.STATELESS_SAGA)
projection = _component(ComponentKind.PROJECTION)


def _function(kind: FunctionKind) -> Callable[..., Any]:
    def decorator(
        func: F | None = None,
        *,
        name: str | None = None,
        aggregate: Sequence[AggregateSpec] | AggregateSpec | None = None,
        body: type[Any] | Sequence[type[Any]] | None = None,
    ) -> Any:
        def mark(target: F) -> F:
            if not callable(target):
                raise FunctionRegistrationError(f"@{decorator.__name__} decorates a function, not {target!r}")
            setattr(
                target, _FUNCTION_ATTR, FunctionSpec(kind, name, _aggregates(aggregate), _body_types(body))
            )
            return target

        return mark if func is None else mark(func)

    decorator.__name__ = "on_event" if kind is FunctionKind.EVENT else "on_state_event"
    return decorator


on_event = _function(FunctionKind.EVENT)
"""Mark a method as a ``FunctionKind.EVENT`` function (takes a domain event body)."""
on_state_event = _function(FunctionKind.STATE_EVENT)
"""Mark a method as a ``FunctionKind.STATE_EVENT`` function (takes the state event)."""


def retry(
    *,
    enabled: bool = True,
    max_retries: int | None = None,
    min_backoff: float | None = None,
    execution_timeout: float | None = None,
    recoverable: Iterable[type[BaseException]] = (),
    unrecoverable: Iterable[type[BaseException]] = (),
) -> Callable[[F], F]:
    """The durable-compensation retry spec of a function (:class:`FunctionRetry`).

    ``retry(enabled=False)``: a failure of this function is not to be compensated; the
    recorder sees ``retry_enabled=False`` and may waive it (``FAILURE_WAIVED``). The other
    arguments override the recorder's defaults for this function: at most
    ``max_retries`` compensations, ``min_backoff`` seconds before the first (doubling
    each time), ``execution_timeout`` seconds for one compensation, and error types the
    function itself calls recoverable or unrecoverable. None of it changes the
    in-process ``RetryableFilter``. A bad value raises ``ValueError`` at decoration.
    """
    spec = FunctionRetry(
        enabled,
        max_retries,
        min_backoff,
        execution_timeout,
        tuple(recoverable),
        tuple(unrecoverable),
    )

    def mark(target: F) -> F:
        setattr(target, _RETRY_ATTR, spec)
        return target

    return mark


def owner_lookup(aggregates: Iterable[Any]) -> OwnerLookup:
    """An :data:`OwnerLookup` over aggregate metadata: the aggregates that emit or source a
    body type.

    ``aggregates`` are :class:`~wow_core.modeling.aggregate.AggregateMetadata` (anything
    with ``named_aggregate`` and ``event_types()``).
    """
    owners: dict[type[Any], list[NamedAggregate]] = {}
    for metadata in aggregates:
        for body_type in metadata.event_types():
            owners.setdefault(body_type, []).append(metadata.named_aggregate)

    def lookup(body_type: type[Any]) -> Iterable[NamedAggregate]:
        found = [a for t, named in owners.items() if issubclass(t, body_type) for a in named]
        return list(dict.fromkeys(found))

    return lookup


def component_spec(instance_or_class: object) -> ComponentSpec | None:
    cls = instance_or_class if isinstance(instance_or_class, type) else type(instance_or_class)
    spec = getattr(cls, _COMPONENT_ATTR, None)
    return spec if isinstance(spec, ComponentSpec) else None


def _first_parameter_hint(func: Callable[..., Any], where: str) -> Any:
    signature = inspect.signature(func)
    parameters = [
        p
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(parameters) != 1 or any(
        p.default is inspect.Parameter.empty
        for p in signature.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ):
        raise FunctionRegistrationError(f"{where} must take exactly one argument (the event)")
    try:
        hints = typing.get_type_hints(func)
    except Exception as error:  # an unresolvable forward reference
        raise FunctionRegistrationError(
            f"{where}: cannot resolve its type hints ({error}); pass body= explicitly"
        ) from error
    return hints.get(parameters[0].name, inspect.Parameter.empty)


def _event_parameter(func: Callable[..., Any], where: str) -> tuple[tuple[type[Any], ...], bool]:
    """Body types of an EVENT function and whether it takes the body (not the DomainEvent)."""
    hint = _first_parameter_hint(func, where)
    origin = typing.get_origin(hint)
    if hint is DomainEvent or origin is DomainEvent:
        args = typing.get_args(hint)
        return _types_of(args[0], where) if args else (object,), False
    if hint is inspect.Parameter.empty:
        return (), True
    return _types_of(hint, where), True


def _types_of(hint: Any, where: str) -> tuple[type[Any], ...]:
    if hint is Any:
        return (object,)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _types_of(arg, where))
    if isinstance(hint, type):
        return (hint,)
    raise FunctionRegistrationError(f"{where}: the event parameter's type {hint!r} is not a class")


def parse_component(
    instance: object,
    *,
    default_context: str,
    owner: OwnerLookup | None = None,
) -> list[MessageFunction]:
    """The event functions of a decorated component instance, in definition order.

    Raises :class:`FunctionRegistrationError` naming the function when its body type or
    topics cannot be determined, or when the class declares no function at all.
    """
    spec = component_spec(instance)
    if spec is None:
        raise FunctionRegistrationError(
            f"{type(instance).__name__} is not marked @event_processor, @stateless_saga or @projection"
        )
    context_name = spec.context_name or default_context
    functions: list[MessageFunction] = []
    seen: set[str] = set()
    for cls in type(instance).__mro__:
        for attr_name, raw in vars(cls).items():
            fspec = getattr(raw, _FUNCTION_ATTR, None)
            if not isinstance(fspec, FunctionSpec) or attr_name in seen:
                continue
            seen.add(attr_name)
            bound = getattr(instance, attr_name)
            where = f"{type(instance).__name__}.{attr_name}"
            if fspec.kind is FunctionKind.EVENT:
                hinted, takes_body = _event_parameter(bound, where)
            else:
                hint = _first_parameter_hint(bound, where)
                if hint is not inspect.Parameter.empty and not (
                    hint is StateEvent or typing.get_origin(hint) is StateEvent
                ):
                    raise FunctionRegistrationError(
                        f"{where} is a state-event function: it takes a StateEvent"
                    )
                hinted, takes_body = (), False
            if fspec.kind is FunctionKind.STATE_EVENT:
                body_types = fspec.body_types or (object,)
            else:
                body_types = fspec.body_types or hinted
            if not body_types:
                raise FunctionRegistrationError(f"{where}: annotate the event parameter or pass body=")
            found_retry = getattr(raw, _RETRY_ATTR, None)
            retry_spec = found_retry if isinstance(found_retry, FunctionRetry) else None
            aggregates = fspec.aggregates or spec.aggregates
            if not aggregates and owner is not None:
                aggregates = tuple(dict.fromkeys(a for body in body_types for a in owner(body)))
            if not aggregates:
                raise FunctionRegistrationError(
                    f"{where}: no aggregate topic; pass aggregate= to the function or aggregates= to the "
                    "class, or register the aggregate that emits " + ", ".join(t.__name__ for t in body_types)
                )
            functions.append(
                MessageFunction(
                    kind=fspec.kind,
                    component=spec.kind,
                    context_name=context_name,
                    processor_name=spec.name,
                    function_name=fspec.name or attr_name,
                    body_types=body_types,
                    named_aggregates=frozenset(aggregates),
                    invoker=bound,
                    retry_enabled=retry_spec.enabled if retry_spec is not None else True,
                    retry=retry_spec,
                    takes_body=takes_body,
                )
            )
    if not functions:
        raise FunctionRegistrationError(
            f"{type(instance).__name__} declares no @on_event or @on_state_event function"
        )
    return functions
