from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from wow_core.model import (
    AggregateId,
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    Header,
    NamedAggregate,
    ReadOnlyHeaderError,
    StateEvent,
)

ACCOUNT = NamedAggregate("bank", "account")
AGG = AggregateId(ACCOUNT, "a-1")


def _stream() -> DomainEventStream:
    event = DomainEvent(aggregate_id=AGG, body={"x": 1}, name="Opened", version=1)
    return DomainEventStream(aggregate_id=AGG, version=1, events=(event,), command_id="c", request_id="r")


def test_a_read_only_header_refuses_writes_and_deletes() -> None:
    header = Header({"a": "1"}).with_read_only()
    with pytest.raises(ReadOnlyHeaderError):
        header["b"] = "2"
    with pytest.raises(ReadOnlyHeaderError):
        del header["a"]
    assert header == {"a": "1"}


def test_a_pair_of_keys_is_replaced_together_and_a_read_only_header_refuses_a_change() -> None:
    header = Header({"traceparent": "old", "tracestate": "a=1", "other": "x"})
    assert header.replace_pair("traceparent", "new", "tracestate", None) is True
    assert header == {"traceparent": "new", "other": "x"}
    assert header.replace_pair("traceparent", "new", "tracestate", None) is False
    header.with_read_only()
    assert header.replace_pair("traceparent", "new", "tracestate", None) is False  # unchanged
    with pytest.raises(ReadOnlyHeaderError):
        header.replace_pair("traceparent", "newer", "tracestate", None)
    with pytest.raises(TypeError):
        Header().replace_pair("k", 1, "j", None)  # type: ignore[arg-type]
    assert header == {"traceparent": "new", "other": "x"}
    assert header.get_pair("traceparent", "tracestate") == ("new", None)


def test_a_copy_without_a_prefix_is_writable_and_independent() -> None:
    marks = {"local_first": "true", "local_first.disabled": "true"}
    header = Header({"traceparent": "t", **marks}, read_only=True)
    copied = header.copy_without(Header.LOCAL_FIRST)
    assert copied == {"traceparent": "t"}
    assert not copied.read_only
    copied["k"] = "v"
    assert header == {"traceparent": "t", **marks}
    assert Header().copy_without("x") == {}


def test_a_pair_with_a_bad_key_or_value_changes_nothing() -> None:
    header = Header({"traceparent": "old"})
    with pytest.raises(TypeError, match="'tracestate' must be a string"):
        header.replace_pair("traceparent", "new", "tracestate", b"a=1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty strings"):
        header.replace_pair("traceparent", "new", "", "a=1")
    assert header == {"traceparent": "old"}


def test_a_message_marked_read_only_before_emission_refuses_header_writes() -> None:
    for message in (CommandMessage(aggregate_id=AGG, body=1, name="N"), _stream()):
        message.with_read_only()
        with pytest.raises(ReadOnlyHeaderError):
            message.header["k"] = "v"


def test_every_copy_gets_its_own_writable_header() -> None:
    command = CommandMessage(aggregate_id=AGG, body=1, name="N", header=Header({"a": "1"})).with_read_only()
    one, two = command.copy(), command.copy()
    one.header["local_first"] = "true"
    assert "local_first" not in two.header
    assert "local_first" not in command.header
    assert one.id == command.id
    assert one.header.read_only is False


def test_a_copy_of_every_message_kind_equals_the_original_but_for_its_header() -> None:
    stream = _stream()
    messages = (
        CommandMessage(aggregate_id=AGG, body=1, name="N", header=Header({"a": "1"}), aggregate_version=3),
        stream,
        StateEvent(stream=stream, state={"s": 1}),
    )
    for message in messages:
        message.with_read_only()
        copied = message.copy()
        assert type(copied) is type(message)
        assert copied == message  # headers compare by content
        assert copied.header is not message.header
        assert copied.header.read_only is False
        copied.header["k"] = "v"
        assert "k" not in message.header
        with pytest.raises(FrozenInstanceError):
            copied.id = "x"  # type: ignore[misc]


def test_ids_compare_and_hash_by_value() -> None:
    twin = AggregateId(NamedAggregate("bank", "account"), "a-1")
    assert twin == AGG
    assert hash(twin) == hash(AGG)
    assert {AGG: 1}[twin] == 1
    assert AggregateId(ACCOUNT, "a-2") != AGG
    assert AggregateId(ACCOUNT, "a-1", "t-1") != AGG
    assert AggregateId(NamedAggregate("bank", "other"), "a-1") != AGG
    assert NamedAggregate("bank", "account") == ACCOUNT
    assert hash(NamedAggregate("bank", "account")) == hash(ACCOUNT)
    assert NamedAggregate("bank", "other") != ACCOUNT
    assert AGG != "bank.account@a-1"
    assert ACCOUNT != ("bank", "account")


def test_header_keys_and_values_are_strings() -> None:
    with pytest.raises(TypeError):
        Header({"a": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        Header({"": "x"})
    header = Header()
    with pytest.raises(TypeError):
        header["n"] = 2  # type: ignore[assignment]


def test_messages_are_immutable_values() -> None:
    command = CommandMessage(aggregate_id=AGG, body=1, name="N")
    with pytest.raises(FrozenInstanceError):
        command.name = "M"  # type: ignore[misc]
    state = StateEvent(stream=_stream(), state={"b": 1})
    with pytest.raises(FrozenInstanceError):
        state.deleted = True  # type: ignore[misc]


def test_a_command_without_request_id_uses_its_id() -> None:
    command = CommandMessage(aggregate_id=AGG, body=1, name="N")
    assert command.request_id == command.id
    assert CommandMessage(aggregate_id=AGG, body=1, name="N", request_id="r").request_id == "r"


def test_a_negative_expected_version_is_refused() -> None:
    with pytest.raises(ValueError, match="aggregate_version"):
        CommandMessage(aggregate_id=AGG, body=1, name="N", aggregate_version=-1)


def test_event_streams_are_not_empty_and_start_at_version_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        DomainEventStream(aggregate_id=AGG, version=1, events=(), command_id="c", request_id="r")
    event = DomainEvent(aggregate_id=AGG, body=1, name="E", version=0)
    with pytest.raises(ValueError, match="starts at 1"):
        DomainEventStream(aggregate_id=AGG, version=0, events=(event,), command_id="c", request_id="r")


def test_a_state_event_exposes_its_stream() -> None:
    stream = _stream()
    state = StateEvent(stream=stream, state={"b": 1})
    assert (state.aggregate_id, state.version, state.command_id, state.request_id) == (AGG, 1, "c", "r")
    assert state.name == "Opened"


@pytest.mark.parametrize("name", ["", "a.b", "with space", "-lead", "é"])
def test_names_are_checked(name: str) -> None:
    with pytest.raises(ValueError, match="not valid"):
        NamedAggregate(name, "account")
    with pytest.raises(ValueError, match="not valid"):
        NamedAggregate("bank", name)


def test_aggregate_ids_need_an_id_and_tenant() -> None:
    with pytest.raises(ValueError):
        AggregateId(ACCOUNT, "")
    with pytest.raises(ValueError):
        AggregateId(ACCOUNT, "a", "")
    assert str(AGG) == "bank.account@a-1"
    assert NamedAggregate.parse("bank.account") == ACCOUNT
    with pytest.raises(ValueError):
        NamedAggregate.parse("bank")


def test_a_named_aggregate_key_is_equal_exactly_when_the_named_aggregates_are() -> None:
    """``key`` (``context.aggregate``, interned) keys the metrics caches in place of the
    named aggregate: equal keys for equal named aggregates, hashes unchanged."""
    a, b = NamedAggregate("bank", "account"), NamedAggregate("bank", "account")
    others = [
        NamedAggregate("bank", "accounts"),
        NamedAggregate("banks", "account"),
        NamedAggregate("b", "ank"),
    ]
    assert a.key == b.key == str(a) == "bank.account"
    assert a.key is b.key  # interned: one string per aggregate type
    assert a == b
    assert hash(a) == hash(b) == hash(("bank", "account"))
    for other in others:
        assert (other == a) is (other.key == a.key) is False
    assert repr(a) == "NamedAggregate(context_name='bank', aggregate_name='account')"
    assert NamedAggregate.parse(a.key) == a
    assert {a: 1}[b] == 1
    assert {a.key: 1}[b.key] == 1
