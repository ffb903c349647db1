"""Hostile and malformed payloads: every one is a DecodeError of the right kind, never a crash.

The envelopes changed here are wire version 1 (the unversioned, long-key form, which the
decoder still reads); ``test_wire_v2`` holds the same hostile cases for version 2.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pytest

from tests.wow_core.model.wire_bodies import Deposit
from wow_core.model import (
    AggregateId,
    BodyTypeRegistry,
    CommandMessage,
    DecodeError,
    DecodeFailureKind,
    DomainEvent,
    DomainEventStream,
    MessageCodec,
    NamedAggregate,
    StateEvent,
    TopicKind,
    wire,
)
from wow_core.model.wire import from_wire, to_wire


@dataclass(frozen=True)
class Rate:
    value: float


@dataclass(frozen=True)
class Balance:
    amount: int


REGISTRY = BodyTypeRegistry([Deposit, Rate, Balance])
CODEC = MessageCodec(REGISTRY)
ACCOUNT = AggregateId(NamedAggregate("bank", "account"), "a-1")


def command(body: object = Deposit(5, "x")) -> CommandMessage[Any]:
    return CommandMessage(aggregate_id=ACCOUNT, body=body, name="deposit")


def stream() -> DomainEventStream:
    event = DomainEvent(aggregate_id=ACCOUNT, body=Deposit(1, "e"), name="deposited", version=3)
    return DomainEventStream(aggregate_id=ACCOUNT, version=3, events=(event,), command_id="c", request_id="r")


def state() -> StateEvent[Balance]:
    return StateEvent(stream=stream(), state=Balance(9))


def wire_of(message: Any, **changes: Any) -> dict[str, Any]:
    """The version 1 envelope of ``message`` with ``changes``."""
    data: dict[str, Any] = json.loads(json.dumps(to_wire(REGISTRY, message)))
    data.update(changes)
    return data


def failure(payload: str | bytes, kind: TopicKind = TopicKind.COMMAND) -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        CODEC.decode(payload, kind)
    return caught.value


@pytest.mark.parametrize(
    "payload",
    [
        b'{"kind": "command", "id": "\xff"}',  # not UTF-8 inside a string
        b"\xff\xfe\x00",
        '{"kind": "command"} trailing',
        '"\\ud800"',  # a lone surrogate escape
        '{"kind": "\ud800"}',  # text with a lone surrogate, which no UTF-8 can carry
        "",
        "{",
    ],
)
def test_text_that_is_not_json_is_not_json(payload: str | bytes) -> None:
    assert failure(payload).kind is DecodeFailureKind.NOT_JSON


@pytest.mark.parametrize("payload", [None, 42, ["not", "text"]])
def test_a_payload_that_is_not_text_is_not_json(payload: Any) -> None:
    assert failure(payload).kind is DecodeFailureKind.NOT_JSON


@pytest.mark.parametrize(
    "payload",
    [
        "[" * 20_000 + "]" * 20_000,
        '{"body": ' + "[" * 5_000 + "]" * 5_000 + "}",
    ],
)
def test_hostile_nesting_is_wrong_shape_not_a_recursion_error(payload: str) -> None:
    assert failure(payload).kind is DecodeFailureKind.WRONG_SHAPE


def test_deep_nesting_inside_a_body_is_refused_before_the_body_class_sees_it() -> None:
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    data = wire_of(command(), body={"amount": 1, "note": "n", "extra": deep})
    assert failure(json.dumps(data)).kind is DecodeFailureKind.WRONG_SHAPE


@pytest.mark.parametrize(
    "changes",
    [
        {"create_time": 1.0},  # a float is not an integer
        {"create_time": "1"},  # nor is a numeric string
        {"create_time": True},  # nor a boolean
        {"is_void": 0},
        {"is_void": "false"},
        {"aggregate_version": 1.5},
        {"name": ""},
        {"name": 7},
        {"request_id": None},
        {"body_type": ""},
        {"header": ["k", "v"]},
        {"header": {"k": None}},
        {"aggregate": "bank.account@a-1"},
        {"aggregate": {"context": "bank", "aggregate": "account", "id": "a-1"}},
        {"aggregate": {"context": "", "aggregate": "account", "id": "a-1", "tenant": "t"}},
    ],
)
def test_strict_envelope_types(changes: dict[str, Any]) -> None:
    assert failure(json.dumps(wire_of(command(), **changes))).kind is DecodeFailureKind.WRONG_SHAPE


@pytest.mark.parametrize("missing", ["body_type", "body", "header", "create_time", "aggregate"])
def test_a_missing_field_is_wrong_shape_and_named(missing: str) -> None:
    data = wire_of(command())
    del data[missing]
    error = failure(json.dumps(data))
    assert error.kind is DecodeFailureKind.WRONG_SHAPE
    assert f"message.{missing}" in error.detail


def test_a_missing_aggregate_version_means_any_version() -> None:
    data = wire_of(command())
    del data["aggregate_version"]
    decoded = CODEC.decode(json.dumps(data), TopicKind.COMMAND)
    assert isinstance(decoded, CommandMessage)
    assert decoded.aggregate_version is None


def test_the_envelope_is_checked_before_the_body() -> None:
    data = wire_of(command(), body={"amount": "lots"}, header={"k": 1})
    assert failure(json.dumps(data)).kind is DecodeFailureKind.WRONG_SHAPE
    data = wire_of(command(), body={"amount": "lots"})
    assert failure(json.dumps(data)).kind is DecodeFailureKind.INVALID_BODY


def test_unknown_fields_are_ignored() -> None:
    message = command()
    decoded = CODEC.decode(json.dumps(wire_of(message, future_field=[1, 2])), TopicKind.COMMAND)
    assert decoded == message


@pytest.mark.parametrize(
    ("kind", "found"),
    [(TopicKind.EVENT, "'command'"), (TopicKind.STATE, "'command'")],
)
def test_another_kind_is_named_in_the_error(kind: TopicKind, found: str) -> None:
    error = failure(CODEC.encode(command()), kind)
    assert error.kind is DecodeFailureKind.WRONG_SHAPE
    assert error.detail == f"expected a {kind.value} message, got {found}"


def test_a_huge_kind_value_is_shortened_in_the_error() -> None:
    error = failure(json.dumps(wire_of(command(), kind="x" * 100_000)))
    assert len(error.detail) < 200


def test_an_event_stream_is_fully_checked() -> None:
    good = wire_of(stream())
    assert CODEC.decode(json.dumps(good), TopicKind.EVENT).id == good["id"]
    changes: dict[str, Any]
    for changes in ({"events": []}, {"version": 0}, {"events": [{"id": "e"}]}, {"events": {}}):
        bad = {**good, **changes}
        assert failure(json.dumps(bad), TopicKind.EVENT).kind is DecodeFailureKind.WRONG_SHAPE
    event = {**good["events"][0], "body_type": "builtins.eval"}
    error = failure(json.dumps({**good, "events": [event]}), TopicKind.EVENT)
    assert error.kind is DecodeFailureKind.UNKNOWN_BODY_TYPE
    event = {**good["events"][0], "body": {"amount": []}}
    error = failure(json.dumps({**good, "events": [event]}), TopicKind.EVENT)
    assert error.kind is DecodeFailureKind.INVALID_BODY


def test_a_state_event_is_fully_checked() -> None:
    good = wire_of(state())
    assert isinstance(CODEC.decode(json.dumps(good), TopicKind.STATE), StateEvent)
    error = failure(json.dumps({**good, "state_type": "os.system"}), TopicKind.STATE)
    assert error.kind is DecodeFailureKind.UNKNOWN_BODY_TYPE
    error = failure(json.dumps({**good, "state": {"amount": "x"}}), TopicKind.STATE)
    assert error.kind is DecodeFailureKind.INVALID_BODY
    error = failure(json.dumps({**good, "stream": {**good["stream"], "events": []}}), TopicKind.STATE)
    assert error.kind is DecodeFailureKind.WRONG_SHAPE
    error = failure(json.dumps({**good, "deleted": "no"}), TopicKind.STATE)
    assert error.kind is DecodeFailureKind.WRONG_SHAPE


@pytest.mark.parametrize("message", [command(), stream(), state()], ids=["command", "event", "state"])
def test_from_wire_and_decode_agree(message: Any) -> None:
    kind = message.topic_kind
    data = to_wire(REGISTRY, message)
    assert CODEC.encode(from_wire(REGISTRY, data, kind)) == CODEC.encode(message)
    assert CODEC.encode(CODEC.decode(CODEC.encode(message), kind)) == CODEC.encode(message)
    with pytest.raises(DecodeError) as caught:
        from_wire(REGISTRY, {**data, "create_time": True}, kind)
    assert caught.value.kind is DecodeFailureKind.WRONG_SHAPE


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_cannot_be_encoded(value: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        CODEC.encode(command(Rate(value)))


@pytest.mark.parametrize("note", ["NaN", "-Infinity", '"NaN"', "Infinity and beyond"])
def test_strings_that_look_like_constants_are_encoded(note: str) -> None:
    message = command(Deposit(1, note))
    decoded = CODEC.decode(CODEC.encode(message), TopicKind.COMMAND)
    assert isinstance(decoded, CommandMessage)
    assert decoded.body == Deposit(1, note)


def test_the_text_is_compact_utf8_json() -> None:
    text = CODEC.encode(command(Deposit(1, "café ✓")))
    assert "café ✓" in text
    assert ": " not in text
    assert ", " not in text
    assert json.loads(text)["b"] == {"amount": 1, "note": "café ✓"}


def test_big_integers_round_trip() -> None:
    message = command(Deposit(-(2**200), "big"))
    decoded = CODEC.decode(CODEC.encode(message), TopicKind.COMMAND)
    assert isinstance(decoded, CommandMessage)
    assert decoded.body.amount == -(2**200)


def test_a_body_type_registered_again_is_dumped_by_its_new_name() -> None:
    registry = BodyTypeRegistry([Deposit])
    codec = MessageCodec(registry)
    assert json.loads(codec.encode(command()))["t"].endswith("Deposit")
    registry.register(Deposit, "bank.Deposit.v2")
    assert json.loads(codec.encode(command()))["t"] == "bank.Deposit.v2"
    data = wire_of(command(), body_type="bank.Deposit.v2")
    decoded = codec.decode(json.dumps(data), TopicKind.COMMAND)
    assert isinstance(decoded, CommandMessage)
    assert decoded.body == Deposit(5, "x")


def test_aggregate_caches_are_bounded_and_keep_no_bad_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "_CACHE_SIZE", 8)
    for n in range(50):
        data = wire_of(command())
        data["aggregate"] = {"context": f"c{n}", "aggregate": "account", "id": f"a{n}", "tenant": "t"}
        decoded = CODEC.decode(json.dumps(data), TopicKind.COMMAND)
        assert decoded.aggregate_id == AggregateId(NamedAggregate(f"c{n}", "account"), f"a{n}", "t")
        assert len(wire._aggregate_ids) <= 8
        assert len(wire._named_aggregates) <= 8
    bad = {"context": "bad name", "aggregate": "account", "id": "a", "tenant": "t"}
    for _ in range(2):
        assert failure(json.dumps(wire_of(command(), aggregate=bad))).kind is DecodeFailureKind.WRONG_SHAPE
    assert ("bad name", "account") not in wire._named_aggregates
