"""Registration: decorated components become MessageFunctions with the spec's metadata."""

from __future__ import annotations

from typing import Any

import pytest

from tests.accounts import ACCOUNT, Deposited, Opened, Withdrawn
from tests.wow_core.event.support import TRANSFER, stream
from wow_core.event import ComponentKind, on_event, on_state_event, projection, retry, stateless_saga
from wow_core.event.declare import parse_component
from wow_core.event.function import FunctionKind, FunctionRegistrationError, MessageFunctionRegistrar
from wow_core.event.pipeline import register_components
from wow_core.model import DomainEvent, NamedAggregate, StateEvent


@projection(context="reports", aggregates=["bank.account"])
class Summary:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    @on_event
    async def opened(self, event: Opened) -> None:
        self.seen.append(event)

    @on_event(aggregate="bank.transfer", name="moved")
    def deposited(self, event: DomainEvent[Deposited | Withdrawn]) -> None:
        self.seen.append(event)

    @retry(enabled=False)
    @on_state_event(body=Deposited)
    async def balance(self, state: StateEvent[dict[str, int]]) -> None:
        self.seen.append(state)


def test_registration_records_kind_names_body_type_and_topics() -> None:
    functions = {f.function_name: f for f in parse_component(Summary(), default_context="svc")}
    assert set(functions) == {"opened", "moved", "balance"}
    opened = functions["opened"]
    assert opened.kind is FunctionKind.EVENT
    assert opened.component is ComponentKind.PROJECTION
    assert (opened.context_name, opened.processor_name) == ("reports", "Summary")
    assert opened.body_types == (Opened,)
    assert opened.named_aggregates == {ACCOUNT}
    assert opened.takes_body
    assert opened.retry_enabled
    moved = functions["moved"]
    assert moved.body_types == (Deposited, Withdrawn)
    assert moved.named_aggregates == {TRANSFER}
    assert not moved.takes_body
    balance = functions["balance"]
    assert balance.kind is FunctionKind.STATE_EVENT
    assert balance.body_types == (Deposited,)
    assert not balance.retry_enabled
    assert balance.ref.function_kind == "STATE_EVENT"


async def test_event_functions_take_the_body_or_the_domain_event_and_state_functions_the_state_event() -> (
    None
):
    summary = Summary()
    functions = {f.function_name: f for f in parse_component(summary, default_context="svc")}
    s = stream(ACCOUNT, "a1", 1, Opened("ann"))
    await functions["opened"].invoke(s.events[0])
    await functions["moved"].invoke(s.events[0])
    state = StateEvent(s, {"balance": 0})
    await functions["balance"].invoke(state)
    assert summary.seen == [Opened("ann"), s.events[0], state]


def test_default_context_and_owner_lookup_supply_what_the_declaration_omits() -> None:
    @stateless_saga
    class Saga:
        @on_event
        def on_withdrawn(self, event: Withdrawn) -> None:
            return None

    owners = {Withdrawn: [NamedAggregate("bank", "account")]}
    [function] = parse_component(Saga(), default_context="bank", owner=lambda t: owners.get(t, []))
    assert function.context_name == "bank"
    assert function.processor_name == "Saga"
    assert function.named_aggregates == {ACCOUNT}
    assert function.component is ComponentKind.STATELESS_SAGA


def test_a_function_without_topic_fails_registration_naming_it() -> None:
    @projection
    class Orphan:
        @on_event
        def on_opened(self, event: Opened) -> None: ...

    with pytest.raises(FunctionRegistrationError, match=r"Orphan\.on_opened: no aggregate topic"):
        parse_component(Orphan(), default_context="x")


def test_bad_declarations_are_refused() -> None:
    @projection(aggregates=["bank.account"])
    class NoHint:
        @on_event
        def f(self, event):  # type: ignore[no-untyped-def]
            ...

    with pytest.raises(FunctionRegistrationError, match="annotate the event parameter"):
        parse_component(NoHint(), default_context="x")

    @projection(aggregates=["bank.account"])
    class TwoArgs:
        @on_event
        def f(self, a: Opened, b: Opened) -> None: ...

    with pytest.raises(FunctionRegistrationError, match="exactly one argument"):
        parse_component(TwoArgs(), default_context="x")

    @projection(aggregates=["bank.account"])
    class WrongState:
        @on_state_event
        def f(self, a: Opened) -> None: ...

    with pytest.raises(FunctionRegistrationError, match="takes a StateEvent"):
        parse_component(WrongState(), default_context="x")

    @projection(aggregates=["bank.account"])
    class Empty:
        pass

    with pytest.raises(FunctionRegistrationError, match="declares no"):
        parse_component(Empty(), default_context="x")

    with pytest.raises(FunctionRegistrationError, match="not marked"):
        parse_component(object(), default_context="x")

    with pytest.raises(ValueError, match=r"context\.aggregate"):
        projection(aggregates=["noaggregate"])(type("X", (), {}))


def test_the_registrar_splits_by_kind_and_knows_its_topics_and_refuses_duplicates() -> None:
    registrars = register_components([Summary()], default_context="svc")
    registrar = registrars[ComponentKind.PROJECTION]
    assert [f.function_name for f in registrar.of_kind(FunctionKind.EVENT)] == ["opened", "moved"]
    assert registrar.topics(FunctionKind.EVENT) == {ACCOUNT, TRANSFER}
    assert registrar.topics(FunctionKind.STATE_EVENT) == {ACCOUNT}
    with pytest.raises(FunctionRegistrationError, match="registered twice"):
        registrar.register(registrar.of_kind(FunctionKind.EVENT)[0])
    other = MessageFunctionRegistrar(ComponentKind.EVENT_PROCESSOR)
    with pytest.raises(FunctionRegistrationError, match="belongs to projection"):
        other.register(registrar.of_kind(FunctionKind.EVENT)[0])
