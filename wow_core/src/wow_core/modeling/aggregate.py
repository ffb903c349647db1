"""The aggregate programming model: a plain class, a state class, decorated functions.

::

    @dataclass(frozen=True)
    class AccountState:
        owner: str = ""
        balance: int = 0

    @aggregate("bank", "account", state=AccountState)
    class Account:
        @on_command(create=True)
        def open(self, state: AccountState, body: OpenAccount) -> AccountOpened:
            return AccountOpened(body.owner, body.initial)

        @on_command
        def withdraw(self, state: AccountState, body: Withdraw) -> MoneyWithdrawn:
            if body.amount > state.balance:
                raise DomainError("INSUFFICIENT_FUNDS", f"balance {state.balance} < {body.amount}")
            return MoneyWithdrawn(body.amount)

        @on_sourcing
        def opened(self, state: AccountState, event: AccountOpened) -> AccountState:
            return replace(state, owner=event.owner, balance=event.initial)

- A **command function** takes the current state and the command body (and, when it
  declares a third parameter, the :class:`~wow_core.model.CommandMessage`); it may be
  ``async``. It validates and returns the events: one event body, a list of them, or
  :class:`Emit` (events plus a result for the caller). Returning nothing changes
  nothing. Raising :class:`DomainError` rejects the command with its code and
  message; nothing is written.
- A **sourcing function** takes the state and one event body and returns the new
  state. States are values: a sourcing function returns a new state (``replace``)
  rather than changing the one it was given, because the state of every version is
  published and may be held by others.
- The body type of a function is read from its annotation, or given explicitly
  (``@on_command(body=Withdraw)``).
- The **event types** a command function may return are read from its return
  annotation (``-> MoneyWithdrawn``, ``-> A | B``, ``-> A | None``, ``-> list[A | B]``,
  ``-> tuple[A, B]``, ``-> Emit[A, B]``, ``-> None``), or declared explicitly
  (``@on_command(events=[A, B])``). An annotation that does not name them (none,
  ``Any``, a bare ``Emit`` or ``list``) is an :class:`AggregateDefinitionError` when the
  aggregate is collected, so a service never starts with an event it cannot put on the
  wire. Every declared type is registered for the wire with the aggregate's other body
  types; an event the function returns that it did not declare is refused by the kernel
  (``PROCESSING_ERROR``, nothing written).
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar, TypeVarTuple, overload

from wow_core.model import AggregateId, NamedAggregate

S = TypeVar("S")
F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)
Events = TypeVarTuple("Events")


class DomainError(Exception):
    """A business rule refused a command: it becomes a rejection with ``code`` and
    ``message``, nothing is written, and the caller receives both."""

    def __init__(self, code: str, message: str = "") -> None:
        if not code:
            raise ValueError("a domain error needs a code")
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class AggregateDefinitionError(TypeError):
    """An aggregate class that cannot be used as written."""


@dataclass(frozen=True, slots=True)
class Emit(Generic[*Events]):
    """What a command function may return: its events and a result for the caller.

    Its parameters name the event types, so the return annotation tells which events the
    function emits: ``-> Emit[MoneyWithdrawn]``, ``-> Emit[A, B]`` (two events),
    ``-> Emit[A] | Emit[B]``, ``-> Emit[()]`` (a result and no event).
    """

    events: tuple[*Events]
    result: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, *events: *Events, result: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "events", tuple(events))
        object.__setattr__(self, "result", MappingProxyType(dict(result or {})))


_COMMAND_MARK = "__wow_command__"
_SOURCING_MARK = "__wow_sourcing__"
_AGGREGATE_MARK = "__wow_aggregate__"


@dataclass(frozen=True, slots=True)
class _CommandMark:
    create: bool
    allow_create: bool
    body: type[Any] | None
    events: tuple[type[Any], ...] | None


@overload
def on_command(fn: F, /) -> F: ...


@overload
def on_command(
    *,
    create: bool = False,
    allow_create: bool = False,
    body: type[Any] | None = None,
    events: Iterable[type[Any]] | None = None,
) -> Callable[[F], F]: ...


def on_command(
    fn: F | None = None,
    *,
    create: bool = False,
    allow_create: bool = False,
    body: type[Any] | None = None,
    events: Iterable[type[Any]] | None = None,
) -> Any:
    """Mark a method as the command function of its body type.

    ``create``: the command creates the aggregate (refused when it exists).
    ``allow_create``: the command may run on an aggregate that does not exist yet.
    ``events``: the event body types it may return, when its return annotation does not
    name them (it replaces what the annotation says; ``events=()``: it returns none).
    """
    declared = None if events is None else tuple(events)

    def mark(function: F) -> F:
        setattr(function, _COMMAND_MARK, _CommandMark(create, allow_create, body, declared))
        return function

    return mark(fn) if fn is not None else mark


@overload
def on_sourcing(fn: F, /) -> F: ...


@overload
def on_sourcing(*, event: type[Any] | None = None) -> Callable[[F], F]: ...


def on_sourcing(fn: F | None = None, *, event: type[Any] | None = None) -> Any:
    """Mark a method as the sourcing function of its event body type."""

    def mark(function: F) -> F:
        setattr(function, _SOURCING_MARK, event or True)
        return function

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True, slots=True)
class CommandFunction:
    """One command function of an aggregate."""

    body_type: type[Any]
    name: str
    function: Callable[..., Any]
    create: bool
    allow_create: bool
    takes_command: bool
    is_async: bool
    event_types: frozenset[type[Any]] = frozenset()
    """The event body types it may return (from its return annotation or ``events=``)."""


@dataclass(frozen=True, slots=True)
class AggregateMetadata(Generic[S]):
    """What the kernel knows of one aggregate class."""

    named_aggregate: NamedAggregate
    aggregate_type: type[Any]
    state_type: type[S]
    instance: Any
    commands: Mapping[type[Any], CommandFunction]
    sourcing: Mapping[type[Any], Callable[[S, Any], S]]

    def initial_state(self, aggregate_id: AggregateId) -> S:
        """The state before the first event: ``instance.initial_state(aggregate_id)`` when
        the aggregate defines it, else ``state_type()``."""
        factory = getattr(self.instance, "initial_state", None)
        if callable(factory):
            return factory(aggregate_id)  # type: ignore[no-any-return]
        return self.state_type()

    def event_types(self) -> list[type[Any]]:
        """Every event body type of the aggregate: those its command functions may return
        and those its sourcing functions apply, in that order, each once."""
        returned = (t for function in self.commands.values() for t in function.event_types)
        return list(dict.fromkeys((*sorted(returned, key=_type_order), *self.sourcing)))


def _type_order(cls: type[Any]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class _Undetermined(Exception):
    """A part of a return annotation that names no event type."""


_SEQUENCES = (list, tuple, collections.abc.Sequence)
_NO_EVENTS: tuple[Any, ...] = (None, type(None), typing.NoReturn, typing.Never)


def _events_of(hint: Any, *, top: bool) -> list[type[Any]]:
    """The event classes a return annotation names; :class:`_Undetermined` for a part that
    names none. ``top``: the annotation itself (a sequence or Emit may appear only there)."""
    if hint in _NO_EVENTS:
        return []
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        return _events_of(arguments[0], top=top)
    if origin is typing.Union or origin is types.UnionType:
        return [cls for argument in arguments for cls in _events_of(argument, top=top)]
    if top and origin is Emit:
        if arguments == ((),):  # Emit[()]: a result, no event
            return []
        return [cls for argument in arguments for cls in _events_of(argument, top=False)]
    if top and origin in _SEQUENCES and arguments:
        return [
            cls
            for argument in arguments
            if argument is not Ellipsis
            for cls in _events_of(argument, top=False)
        ]
    if top and origin is tuple and arguments == ():
        return []
    if (
        not isinstance(hint, type)
        or origin is not None
        or hint is Emit
        or hint.__module__ in ("builtins", "typing")  # object, int, dict, Any...
        or issubclass(hint, (*_SEQUENCES, collections.abc.Mapping))
    ):
        raise _Undetermined(hint)
    return [hint]


def _event_types(
    function: Callable[..., Any], declared: tuple[type[Any], ...] | None, where: str
) -> frozenset[type[Any]]:
    if declared is not None:
        for cls in declared:
            if not isinstance(cls, type) or cls.__module__ == "builtins":
                raise AggregateDefinitionError(f"{where}: events= names {cls!r}, which is not an event class")
        return frozenset(declared)
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except (NameError, TypeError) as error:
        raise AggregateDefinitionError(
            f"{where}: cannot read the annotations ({error}); declare the event types with "
            "@on_command(events=[...])"
        ) from None
    advice = (
        "annotate the event types it returns (-> MoneyDeposited, -> A | B, -> list[A | B], "
        "-> Emit[A], -> None) or declare them with @on_command(events=[...])"
    )
    if "return" not in hints:
        raise AggregateDefinitionError(
            f"{where}: no return annotation, so the event types it returns are unknown and could not be "
            f"registered for the wire; {advice}"
        )
    try:
        return frozenset(_events_of(hints["return"], top=True))
    except _Undetermined as part:
        raise AggregateDefinitionError(
            f"{where}: its return annotation {_shown(hints['return'])} does not name its event types "
            f"({_shown(part.args[0])} is not an event class), so they could not be registered for the wire; "
            f"{advice}"
        ) from None


def _shown(hint: Any) -> str:
    """An annotation as a user writes it: ``Emit[list[Rung]]``, ``A | None``, ``Any``."""
    if hint is None or hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_shown(argument) for argument in arguments)
    if origin is not None and arguments:
        name = getattr(origin, "__qualname__", None) or repr(origin).replace("typing.", "")
        return f"{name}[{', '.join('...' if a is Ellipsis else _shown(a) for a in arguments)}]"
    if isinstance(hint, type):
        return hint.__qualname__
    return repr(hint).replace("typing.", "")


def _body_type(function: Callable[..., Any], index: int, explicit: type[Any] | None, kind: str) -> type[Any]:
    if explicit is not None:
        return explicit
    params = list(inspect.signature(function).parameters.values())
    if len(params) <= index:
        raise AggregateDefinitionError(
            f"{function.__qualname__}: a {kind} function takes (self, state, {kind} body)"
        )
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError) as error:
        raise AggregateDefinitionError(
            f"{function.__qualname__}: cannot read the annotations ({error}); name the body type explicitly"
        ) from None
    found = hints.get(params[index].name)
    if not isinstance(found, type):
        raise AggregateDefinitionError(
            f"{function.__qualname__}: annotate parameter {params[index].name!r} with the {kind} "
            f"body class, or name it explicitly"
        )
    return found


def aggregate(context_name: str, aggregate_name: str, *, state: type[Any]) -> Callable[[C], C]:
    """Declare a class as the aggregate ``context_name.aggregate_name`` with ``state``.

    The class is instantiated once without arguments (it may hold collaborators set up
    in ``__init__``) and its decorated functions are collected.
    """

    named = NamedAggregate(context_name, aggregate_name)

    def declare(cls: C) -> C:
        setattr(cls, _AGGREGATE_MARK, (named, state))
        return cls

    return declare


def metadata_of(aggregate_type: type[Any], instance: Any = None) -> AggregateMetadata[Any]:
    """Collect the metadata of a class decorated with :func:`aggregate`."""
    declared = aggregate_type.__dict__.get(_AGGREGATE_MARK)
    if declared is None:
        raise AggregateDefinitionError(f"{aggregate_type.__qualname__} is not decorated with @aggregate")
    named, state_type = declared
    target = aggregate_type() if instance is None else instance
    commands: dict[type[Any], CommandFunction] = {}
    sourcing: dict[type[Any], Callable[[Any, Any], Any]] = {}
    for attribute in dir(aggregate_type):
        member = inspect.getattr_static(aggregate_type, attribute)
        if isinstance(member, staticmethod | classmethod):
            continue
        command_mark = getattr(member, _COMMAND_MARK, None)
        if isinstance(command_mark, _CommandMark):
            body_type = _body_type(member, 2, command_mark.body, "command")
            if body_type in commands:
                raise AggregateDefinitionError(
                    f"{aggregate_type.__qualname__}: two command functions for {body_type.__qualname__}"
                )
            params = inspect.signature(member).parameters
            commands[body_type] = CommandFunction(
                body_type=body_type,
                name=attribute,
                function=getattr(target, attribute),
                create=command_mark.create,
                allow_create=command_mark.allow_create or command_mark.create,
                takes_command=len(params) >= 4,
                is_async=inspect.iscoroutinefunction(member),
                event_types=_event_types(
                    member, command_mark.events, f"{aggregate_type.__qualname__}.{attribute}"
                ),
            )
        sourcing_mark = getattr(member, _SOURCING_MARK, None)
        if sourcing_mark is not None:
            event_type = _body_type(
                member, 2, sourcing_mark if isinstance(sourcing_mark, type) else None, "event"
            )
            if event_type in sourcing:
                raise AggregateDefinitionError(
                    f"{aggregate_type.__qualname__}: two sourcing functions for {event_type.__qualname__}"
                )
            if inspect.iscoroutinefunction(member):
                raise AggregateDefinitionError(f"{member.__qualname__}: sourcing functions are not async")
            sourcing[event_type] = getattr(target, attribute)
    if not commands:
        raise AggregateDefinitionError(f"{aggregate_type.__qualname__} has no @on_command function")
    return AggregateMetadata(
        named_aggregate=named,
        aggregate_type=aggregate_type,
        state_type=state_type,
        instance=target,
        commands=MappingProxyType(commands),
        sourcing=MappingProxyType(sourcing),
    )
