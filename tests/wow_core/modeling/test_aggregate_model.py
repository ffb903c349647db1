from __future__ import annotations

import collections.abc
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn, Optional

import pytest

from tests.accounts import Account, Deposit, Open, Withdraw
from tests.ids import stable_id
from wow_core.model import AggregateId, BodyTypeRegistry, NamedAggregate
from wow_core.modeling import (
    AggregateDefinitionError,
    AggregateRegistry,
    DomainError,
    Emit,
    aggregate,
    metadata_of,
    on_command,
    on_sourcing,
)


@dataclass
class State:
    n: int = 0


@dataclass
class Ping:
    pass


def test_metadata_collects_command_and_sourcing_functions() -> None:
    metadata = metadata_of(Account)
    assert metadata.named_aggregate == NamedAggregate("bank", "account")
    assert metadata.commands[Open].create
    assert metadata.commands[Open].allow_create
    assert not metadata.commands[Deposit].create
    assert metadata.commands[Withdraw].is_async
    assert len(metadata.sourcing) == 4


def test_an_undecorated_class_is_refused() -> None:
    class Plain:
        pass

    with pytest.raises(AggregateDefinitionError, match="@aggregate"):
        metadata_of(Plain)


def test_an_aggregate_without_command_functions_is_refused() -> None:
    @aggregate("shop", "empty", state=State)
    class Empty:
        pass

    with pytest.raises(AggregateDefinitionError, match="no @on_command"):
        metadata_of(Empty)


def test_a_body_without_annotation_must_be_named() -> None:
    @aggregate("shop", "loose", state=State)
    class Loose:
        @on_command
        def ping(self, state, body):  # type: ignore[no-untyped-def]
            return None

    with pytest.raises(AggregateDefinitionError, match="annotate"):
        metadata_of(Loose)

    @aggregate("shop", "named", state=State)
    class Named:
        @on_command(body=Ping, events=())
        def ping(self, state, body):  # type: ignore[no-untyped-def]
            return None

    assert Ping in metadata_of(Named).commands


def test_two_functions_for_one_body_are_refused() -> None:
    @aggregate("shop", "twice", state=State)
    class Twice:
        @on_command(body=Ping)
        def one(self, state: State, body: Ping) -> None:
            return None

        @on_command(body=Ping)
        def two(self, state: State, body: Ping) -> None:
            return None

    with pytest.raises(AggregateDefinitionError, match="two command functions"):
        metadata_of(Twice)


def test_async_sourcing_is_refused() -> None:
    @aggregate("shop", "asyncsrc", state=State)
    class AsyncSourcing:
        @on_command(body=Ping)
        def ping(self, state: State, body: Ping) -> None:
            return None

        @on_sourcing(event=Ping)
        async def pinged(self, state: State, event: Ping) -> State:
            return state

    with pytest.raises(AggregateDefinitionError, match="not async"):
        metadata_of(AsyncSourcing)


def test_initial_state_can_depend_on_the_aggregate_id() -> None:
    @aggregate("shop", "cart", state=State)
    class Cart:
        @on_command(body=Ping, create=True)
        def ping(self, state: State, body: Ping) -> None:
            return None

        def initial_state(self, aggregate_id: AggregateId) -> State:
            return State(len(aggregate_id.id))

    metadata = metadata_of(Cart)
    assert metadata.initial_state(AggregateId(metadata.named_aggregate, "abc")) == State(3)


def test_the_registry_builds_commands() -> None:
    registry = AggregateRegistry([Account])
    create = registry.command(Open("ada"))
    assert create.is_create
    assert create.aggregate_id.named_aggregate == NamedAggregate("bank", "account")
    assert create.name == "Open"
    with pytest.raises(ValueError, match="needs an aggregate_id"):
        registry.command(Deposit(1))
    with pytest.raises(LookupError):
        registry.command(Ping())
    with pytest.raises(ValueError, match="twice"):
        registry.register(Account)


def test_domain_errors_and_emit() -> None:
    error = DomainError("CODE", "why")
    assert (error.code, error.message, str(error)) == ("CODE", "why", "CODE: why")
    with pytest.raises(ValueError, match="code"):
        DomainError("")
    emitted = Emit(Ping(), Ping(), result={"k": 1})
    assert len(emitted.events) == 2
    assert dict(emitted.result) == {"k": 1}


# -- the event types a command function returns ------------------------------------------


@dataclass(frozen=True)
class Rung:
    pass


@dataclass(frozen=True)
class Chimed:
    pass


def _deciding(returns: Any, **mark: Any) -> type[Any]:
    """An aggregate whose one command function is annotated ``-> returns``."""

    def ping(self: Any, state: State, body: Ping) -> Any:
        return None

    ping.__annotations__ = {"state": State, "body": Ping, "return": returns}
    namespace = {"ping": on_command(**mark)(ping)}
    return aggregate("shop", "bell", state=State)(type("Bell", (), namespace))


@pytest.mark.parametrize(
    ("returns", "events"),
    [
        (Rung, {Rung}),
        (Rung | Chimed, {Rung, Chimed}),
        (Rung | None, {Rung}),
        (Optional[Rung], {Rung}),  # noqa: UP045 - the spelling users still write
        (Annotated[Rung, "doc"], {Rung}),
        (list[Rung | Chimed], {Rung, Chimed}),
        (tuple[Rung, Chimed], {Rung, Chimed}),
        (tuple[Rung, ...], {Rung}),
        (collections.abc.Sequence[Rung], {Rung}),
        (Emit[Rung, Chimed], {Rung, Chimed}),
        (Emit[Rung] | Emit[Chimed], {Rung, Chimed}),
        (Emit[()], set()),
        (None, set()),
        (NoReturn, set()),
    ],
    ids=stable_id,
)
def test_the_return_annotation_names_the_event_types(returns: Any, events: set[type[Any]]) -> None:
    metadata = metadata_of(_deciding(returns))
    assert metadata.commands[Ping].event_types == events
    assert set(metadata.event_types()) == events


@pytest.mark.parametrize(
    "returns",
    [Any, Emit, list, list[Any], object, int, dict[str, Rung], list[list[Rung]], Emit[list[Rung]]],
    ids=stable_id,
)
def test_a_return_annotation_that_names_no_event_type_fails_naming_the_function(returns: Any) -> None:
    with pytest.raises(
        AggregateDefinitionError, match=r"Bell\.ping: its return annotation .* @on_command\(events=\["
    ):
        metadata_of(_deciding(returns))


def test_a_command_function_without_return_annotation_fails_naming_it() -> None:
    def ping(self: Any, state: State, body: Ping) -> None:
        return None

    del ping.__annotations__["return"]
    bell = aggregate("shop", "bell", state=State)(type("Bell", (), {"ping": on_command(ping)}))
    with pytest.raises(
        AggregateDefinitionError, match=r"Bell\.ping: no return annotation.*@on_command\(events=\["
    ):
        metadata_of(bell)


def test_declared_events_replace_what_the_annotation_says() -> None:
    metadata = metadata_of(_deciding(Any, events=[Rung, Chimed]))
    assert metadata.commands[Ping].event_types == {Rung, Chimed}
    with pytest.raises(AggregateDefinitionError, match="not an event class"):
        metadata_of(_deciding(Rung, events=[dict]))


def test_every_event_a_command_function_returns_is_registered_for_the_wire() -> None:
    # No sourcing function names Rung or Chimed: they change no state, they still travel.
    registry = AggregateRegistry([_deciding(Emit[Rung] | Chimed)])
    bodies = registry.register_body_types(BodyTypeRegistry())
    for cls in (Ping, Rung, Chimed, State):
        assert cls in bodies
