"""The JSON wire form round-trips every message kind exactly (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from wow_core.model import (
    AggregateId,
    BodyTypeRegistry,
    CommandMessage,
    DecodeError,
    DecodeFailureKind,
    DomainEvent,
    DomainEventStream,
    Header,
    MessageCodec,
    NamedAggregate,
    StateEvent,
    TopicKind,
    UnknownBodyTypeError,
)


# Not tests.wow_core.model.wire_bodies.Deposit: the tags tuple makes tuples round-trip too.
@dataclass(frozen=True)
class Deposit:
    amount: int
    note: str
    tags: tuple[str, ...] = ()


class Profile(BaseModel):
    name: str
    score: float
    nested: dict[str, list[int]] = {}


# Not tests.accounts.AccountState: a list field, so a list in a state round-trips too.
@dataclass(frozen=True)
class AccountState:
    balance: int
    owners: list[str]


REGISTRY = BodyTypeRegistry([Deposit, Profile, AccountState])
CODEC = MessageCodec(REGISTRY)

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,12}", fullmatch=True)
text = st.text(max_size=20)
ids = st.text(min_size=1, max_size=24)
times = st.integers(min_value=0, max_value=2**53)
finite = st.floats(allow_nan=False, allow_infinity=False)

aggregate_ids = st.builds(AggregateId, st.builds(NamedAggregate, names, names), ids, ids)
headers = st.dictionaries(st.text(min_size=1, max_size=10), text, max_size=4).map(Header)
bodies = st.one_of(
    st.builds(Deposit, st.integers(), text, st.lists(text, max_size=3).map(tuple)),
    st.builds(Profile, name=text, score=finite, nested=st.dictionaries(text, st.lists(st.integers()))),
)

commands = st.builds(
    CommandMessage,
    aggregate_id=aggregate_ids,
    body=bodies,
    name=ids,
    id=ids,
    request_id=ids,
    header=headers,
    is_create=st.booleans(),
    allow_create=st.booleans(),
    is_void=st.booleans(),
    aggregate_version=st.none() | st.integers(min_value=0, max_value=2**31),
    create_time=times,
)


@st.composite
def streams(draw: st.DrawFn) -> DomainEventStream:
    aggregate_id = draw(aggregate_ids)
    version = draw(st.integers(min_value=1, max_value=2**31))
    command_id = draw(text)
    count = draw(st.integers(min_value=1, max_value=3))
    events = tuple(
        DomainEvent(
            aggregate_id=aggregate_id,
            body=draw(bodies),
            name=draw(ids),
            version=version,
            sequence=index + 1,
            is_last=index == count - 1,
            id=draw(ids),
            command_id=command_id,
            revision=draw(ids),
            header=draw(headers),
            create_time=draw(times),
        )
        for index in range(count)
    )
    return DomainEventStream(
        aggregate_id=aggregate_id,
        version=version,
        events=events,
        command_id=command_id,
        request_id=draw(text),
        id=draw(ids),
        header=draw(headers),
        create_time=draw(times),
    )


state_events = st.builds(
    StateEvent,
    stream=streams(),
    state=st.builds(AccountState, st.integers(), st.lists(text, max_size=3)),
    deleted=st.booleans(),
    id=ids,
    header=headers,
    create_time=times,
)


def _event_view(event: DomainEvent[Any]) -> tuple[Any, ...]:
    return (
        event.aggregate_id,
        event.body,
        event.name,
        event.version,
        event.sequence,
        event.is_last,
        event.id,
        event.command_id,
        event.revision,
        event.header.to_dict(),
        event.create_time,
    )


def _stream_view(stream: DomainEventStream) -> tuple[Any, ...]:
    return (
        stream.aggregate_id,
        stream.version,
        stream.command_id,
        stream.request_id,
        stream.id,
        stream.header.to_dict(),
        stream.create_time,
        [_event_view(event) for event in stream.events],
    )


@settings(max_examples=150, deadline=None)
@given(commands)
def test_command_round_trips_exactly(command: CommandMessage[Any]) -> None:
    decoded = CODEC.decode(CODEC.encode(command), TopicKind.COMMAND)
    assert isinstance(decoded, CommandMessage)
    assert decoded == command
    assert type(decoded.body) is type(command.body)
    assert CODEC.encode(decoded) == CODEC.encode(command)


@settings(max_examples=100, deadline=None)
@given(streams())
def test_event_stream_round_trips_exactly(stream: DomainEventStream) -> None:
    decoded = CODEC.decode(CODEC.encode(stream), TopicKind.EVENT)
    assert isinstance(decoded, DomainEventStream)
    assert _stream_view(decoded) == _stream_view(stream)
    assert CODEC.encode(decoded) == CODEC.encode(stream)


@settings(max_examples=100, deadline=None)
@given(state_events)
def test_state_event_round_trips_exactly(event: StateEvent[Any]) -> None:
    decoded = CODEC.decode(CODEC.encode(event), TopicKind.STATE)
    assert isinstance(decoded, StateEvent)
    assert _stream_view(decoded.stream) == _stream_view(event.stream)
    assert (decoded.state, decoded.deleted, decoded.id, decoded.create_time) == (
        event.state,
        event.deleted,
        event.id,
        event.create_time,
    )
    assert decoded.header == event.header
    assert CODEC.encode(decoded) == CODEC.encode(event)


def _command() -> CommandMessage[Deposit]:
    aggregate_id = AggregateId(NamedAggregate("bank", "account"), "a-1")
    return CommandMessage(aggregate_id=aggregate_id, body=Deposit(5, "x"), name="Deposit")


def test_a_decoded_header_is_writable_and_independent() -> None:
    command = _command().with_read_only()
    decoded = CODEC.decode(CODEC.encode(command), TopicKind.COMMAND)
    decoded.header["k"] = "v"
    assert "k" not in command.header


def test_an_unregistered_body_cannot_be_encoded() -> None:
    @dataclass
    class Secret:
        value: str

    command = CommandMessage(aggregate_id=_command().aggregate_id, body=Secret("s"), name="Secret")
    with pytest.raises(UnknownBodyTypeError):
        CODEC.encode(command)


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ("not json", DecodeFailureKind.NOT_JSON),
        (b"\xff\xfe", DecodeFailureKind.NOT_JSON),
        ("[1, 2]", DecodeFailureKind.WRONG_SHAPE),
        ('{"kind": "event"}', DecodeFailureKind.WRONG_SHAPE),
        ('{"kind": "command"}', DecodeFailureKind.WRONG_SHAPE),
    ],
)
def test_garbage_is_a_decode_error(payload: str | bytes, kind: DecodeFailureKind) -> None:
    with pytest.raises(DecodeError) as caught:
        CODEC.decode(payload, TopicKind.COMMAND)
    assert caught.value.kind is kind


def _wire(**changes: Any) -> str:
    import json

    data = json.loads(CODEC.encode(_command()))
    data.update(changes)
    return json.dumps(data)


def test_a_body_type_nobody_registered_is_refused_not_imported() -> None:
    with pytest.raises(DecodeError) as caught:
        CODEC.decode(_wire(t="os.system"), TopicKind.COMMAND)
    assert caught.value.kind is DecodeFailureKind.UNKNOWN_BODY_TYPE


def test_a_hostile_body_is_an_invalid_body() -> None:
    with pytest.raises(DecodeError) as caught:
        CODEC.decode(_wire(b={"amount": "lots", "note": 3}), TopicKind.COMMAND)
    assert caught.value.kind is DecodeFailureKind.INVALID_BODY


@pytest.mark.parametrize(
    "changes",
    [
        {"h": {"k": 1}},
        {"h": {"": "v"}},
        {"cr": "yes"},
        {"av": -1},
        {"av": True},
        {"a": ["bank", "bad name", "a", "t"]},
        {"a": ["bank", "account", "", "t"]},
        {"i": ""},
    ],
)
def test_wrong_fields_are_wrong_shape(changes: dict[str, Any]) -> None:
    with pytest.raises(DecodeError) as caught:
        CODEC.decode(_wire(**changes), TopicKind.COMMAND)
    assert caught.value.kind is DecodeFailureKind.WRONG_SHAPE


def test_a_message_of_another_kind_is_refused() -> None:
    with pytest.raises(DecodeError, match="expected a event message"):
        CODEC.decode(CODEC.encode(_command()), TopicKind.EVENT)
