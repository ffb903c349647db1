"""Wire version 2, the compact envelope: its size, every field kept, version 1 still read,
unknown versions refused, and hostile version 2 envelopes on the decode-failure path."""

from __future__ import annotations

import json
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
    Header,
    MessageCodec,
    NamedAggregate,
    StateEvent,
    TopicKind,
)
from wow_core.model.wire import READ_VERSIONS, WIRE_VERSION, compact_wire, from_wire, to_wire


@dataclass(frozen=True)
class Note:
    """A body of about 300 bytes of JSON."""

    amount: int
    text: str

    __wow_type__ = "bank.Note"


@dataclass(frozen=True)
class Balance:
    amount: int


REGISTRY = BodyTypeRegistry([Deposit, Note, Balance])
CODEC = MessageCodec(REGISTRY)
ACCOUNT = AggregateId(NamedAggregate("bank", "account"), "acc-1")
TENANTED = AggregateId(NamedAggregate("bank", "account"), "acc-2", "tenant-9")


def plain_command(body: object = Deposit(5, "x")) -> CommandMessage[Any]:
    return CommandMessage(ACCOUNT, body, "deposit")


def full_command() -> CommandMessage[Any]:
    """Every field away from its default."""
    return CommandMessage(
        TENANTED,
        Deposit(7, "all"),
        "deposit",
        request_id="req-1",
        header=Header({"trace": "t-1", "local_first": "true"}),
        is_create=True,
        allow_create=True,
        is_void=True,
        aggregate_version=0,
    )


def full_stream() -> DomainEventStream:
    first = DomainEvent(
        TENANTED,
        Deposit(1, "a"),
        "deposited",
        4,
        sequence=1,
        is_last=False,
        command_id="cmd-1",
        header=Header({"h": "1"}),
        create_time=10,
    )
    second = DomainEvent(
        TENANTED,
        Deposit(2, "b"),
        "deposited",
        5,
        sequence=2,
        command_id="other",
        revision="2.0",
        create_time=11,
    )
    return DomainEventStream(
        TENANTED, 5, (first, second), "cmd-1", "req-1", header=Header({"s": "x"}), create_time=12
    )


def full_state() -> StateEvent[Balance]:
    return StateEvent(full_stream(), Balance(9), deleted=True, header=Header({"st": "y"}), create_time=13)


def plain_stream() -> DomainEventStream:
    event = DomainEvent(ACCOUNT, Deposit(1, "e"), "deposited", 3, command_id="c", create_time=5)
    return DomainEventStream(ACCOUNT, 3, (event,), "c", "c", create_time=5)


def v2(message: Any, **changes: Any) -> str:
    data: dict[str, Any] = json.loads(CODEC.encode(message))
    data.update(changes)
    return json.dumps(data, separators=(",", ":"))


def failure(payload: str | bytes, kind: TopicKind = TopicKind.COMMAND) -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        CODEC.decode(payload, kind)
    return caught.value


def test_a_300_byte_body_travels_in_at_most_one_and_a_half_times_its_size() -> None:
    body = Note(5, "x" * 270)
    body_bytes = len(json.dumps({"amount": 5, "text": body.text}, separators=(",", ":")))
    assert 290 <= body_bytes <= 310
    payload = CODEC.encode(plain_command(body)).encode()
    assert len(payload) <= 1.5 * body_bytes, (len(payload), body_bytes)
    version_1 = json.dumps(to_wire(REGISTRY, plain_command(body)), separators=(",", ":"))
    assert len(payload) < len(version_1) - 150


def test_the_encoder_writes_version_2_first_and_leaves_defaults_out() -> None:
    text = CODEC.encode(plain_command())
    assert text.startswith('{"v":2,"k":"c",')
    data = json.loads(text)
    assert data["v"] == WIRE_VERSION == 2
    assert set(data) == {"v", "k", "i", "a", "n", "t", "b", "ts"}
    assert data["a"] == ["bank", "account", "acc-1"]
    assert data["b"] == {"amount": 5, "note": "x"}  # the body embedded as JSON, not as a string
    assert isinstance(data["ts"], int)


@pytest.mark.parametrize(
    "message",
    [plain_command(), full_command(), plain_stream(), full_stream(), full_state()],
    ids=["command", "full-command", "stream", "full-stream", "full-state"],
)
def test_every_field_round_trips(message: Any) -> None:
    decoded = CODEC.decode(CODEC.encode(message), message.topic_kind)
    assert decoded == message
    assert dict(decoded.header) == dict(message.header)
    if isinstance(message, DomainEventStream):
        assert isinstance(decoded, DomainEventStream)
        for got, sent in zip(decoded.events, message.events, strict=True):
            assert dict(got.header) == dict(sent.header)


@pytest.mark.parametrize(
    "message",
    [plain_command(), full_command(), full_stream(), full_state()],
    ids=["command", "full-command", "full-stream", "full-state"],
)
def test_an_envelope_another_serializer_reordered_and_spaced_decodes_the_same(message: Any) -> None:
    """A jsonb column or a proxy keeps the JSON value, not its text."""
    members = list(json.loads(CODEC.encode(message)).items())
    rewritten = json.dumps(dict(reversed(members)), indent=1)
    assert not rewritten.startswith('{"v":')
    assert CODEC.decode(rewritten, message.topic_kind) == message
    assert CODEC.decode(rewritten.encode(), message.topic_kind) == message


def test_a_reordered_envelope_with_a_wrong_field_is_still_refused() -> None:
    members = json.loads(CODEC.encode(plain_command()))
    members["a"] = ["bank"]
    error = failure(json.dumps(dict(reversed(list(members.items())))))
    assert error.kind is DecodeFailureKind.WRONG_SHAPE


def test_non_default_fields_are_written() -> None:
    data = json.loads(CODEC.encode(full_command()))
    assert data["a"] == ["bank", "account", "acc-2", "tenant-9"]
    assert (data["r"], data["cr"], data["ac"], data["vd"], data["av"]) == ("req-1", True, True, True, 0)
    assert data["h"] == {"trace": "t-1", "local_first": "true"}
    stream = json.loads(CODEC.encode(full_stream()))
    first, second = stream["e"]
    assert (first["ver"], first["l"], first["ts"], first["h"]) == (4, False, 10, {"h": "1"})
    assert "ci" not in first
    assert "s" not in first
    assert (second["s"], second["ci"], second["rev"], second["ts"]) == (2, "other", "2.0", 11)
    assert "ver" not in second
    assert "l" not in second


@pytest.mark.parametrize(
    "message",
    [plain_command(), full_command(), plain_stream(), full_stream(), full_state()],
    ids=["command", "full-command", "stream", "full-stream", "full-state"],
)
def test_version_1_is_still_read(message: Any) -> None:
    old = json.dumps(to_wire(REGISTRY, message))
    assert '"v"' not in old
    assert CODEC.decode(old, message.topic_kind) == message
    assert from_wire(REGISTRY, to_wire(REGISTRY, message), message.topic_kind) == message
    assert from_wire(REGISTRY, compact_wire(REGISTRY, message), message.topic_kind) == message


@pytest.mark.parametrize("version", [3, 1, 0, "2", None, 2.0, True])
def test_a_version_this_decoder_does_not_read_is_refused_clearly(version: object) -> None:
    error = failure(v2(plain_command(), v=version))
    assert error.kind is DecodeFailureKind.WRONG_SHAPE
    assert "wire version" in error.detail
    assert "reads 1 and 2" in error.detail
    assert READ_VERSIONS == (1, 2)


def test_a_dict_naming_an_unknown_version_is_refused_too() -> None:
    with pytest.raises(DecodeError, match="wire version 3"):
        from_wire(REGISTRY, {**compact_wire(REGISTRY, plain_command()), "v": 3}, TopicKind.COMMAND)


@pytest.mark.parametrize(
    "changes",
    [
        {"ts": 1.0},
        {"ts": "1"},
        {"ts": True},
        {"i": ""},
        {"i": 5},
        {"n": ""},
        {"t": ""},
        {"r": ""},
        {"h": ["k", "v"]},
        {"h": {"k": None}},
        {"h": {"": "v"}},
        {"cr": 1},
        {"vd": "true"},
        {"av": -1},
        {"av": 1.5},
        {"a": "bank.account@acc-1"},
        {"a": ["bank", "account"]},
        {"a": ["bank", "account", "acc-1", "t", "extra"]},
        {"a": ["bank", "account", 7]},
        {"a": ["bank", "bad name", "acc-1"]},
        {"a": ["bank", "account", ""]},
        {"k": "x" * 100_000},
    ],
)
def test_hostile_envelope_fields_are_wrong_shape(changes: dict[str, Any]) -> None:
    error = failure(v2(plain_command(), **changes))
    assert error.kind is DecodeFailureKind.WRONG_SHAPE
    assert len(error.detail) < 400


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ("i", "i (id)"),
        ("a", "a (aggregate)"),
        ("t", "t (body type)"),
        ("b", "b (body)"),
        ("ts", "ts (create_time)"),
    ],
)
def test_a_missing_field_is_named_by_key_and_field(missing: str, named: str) -> None:
    data = json.loads(CODEC.encode(plain_command()))
    del data[missing]
    error = failure(json.dumps(data, separators=(",", ":")))
    assert error.kind is DecodeFailureKind.WRONG_SHAPE
    assert f"message.{named}" in error.detail


def test_a_body_field_is_named_as_the_body_names_it() -> None:
    error = failure(v2(plain_command(), b={"amount": "lots", "note": "x"}))
    assert error.kind is DecodeFailureKind.INVALID_BODY
    assert "body.amount" in error.detail


@pytest.mark.parametrize(("kind", "found"), [(TopicKind.EVENT, "'command'"), (TopicKind.STATE, "'command'")])
def test_another_kind_is_named(kind: TopicKind, found: str) -> None:
    error = failure(CODEC.encode(plain_command()), kind)
    assert error.detail == f"expected a {kind.value} message, got {found}"


def test_unknown_and_invalid_bodies_keep_their_kinds() -> None:
    assert failure(v2(plain_command(), t="os.system")).kind is DecodeFailureKind.UNKNOWN_BODY_TYPE
    stream = json.loads(CODEC.encode(plain_stream()))
    stream["e"][0]["t"] = "builtins.eval"
    assert failure(json.dumps(stream), TopicKind.EVENT).kind is DecodeFailureKind.UNKNOWN_BODY_TYPE
    for bad in ({"e": []}, {"ver": 0}, {"e": [{"i": "e"}]}, {"e": {}}):
        error = failure(v2(plain_stream(), **bad), TopicKind.EVENT)
        assert error.kind is DecodeFailureKind.WRONG_SHAPE
    state = json.loads(CODEC.encode(full_state()))
    for bad in ({"t": "os.system"}, {"st": {"amount": "x"}}, {"d": "no"}, {"es": {**state["es"], "e": []}}):
        error = failure(json.dumps({**state, **bad}), TopicKind.STATE)
        assert error.kind in (
            DecodeFailureKind.UNKNOWN_BODY_TYPE,
            DecodeFailureKind.INVALID_BODY,
            DecodeFailureKind.WRONG_SHAPE,
        )
    assert failure(json.dumps({**state, "d": "no"}), TopicKind.STATE).kind is DecodeFailureKind.WRONG_SHAPE


@pytest.mark.parametrize(
    "payload",
    [
        '{"v":',
        '{"v":2',
        b'{"v":2,"k":"c","i":"\xff"}',
        '{"v":2,"k":"c"} trailing',
        '{"v":' + "[" * 20_000 + "]" * 20_000 + "}",
        '{"v":2,"k":"c","b":' + "[" * 5_000 + "]" * 5_000 + "}",
    ],
)
def test_broken_version_2_text_is_a_decode_error(payload: str | bytes) -> None:
    assert failure(payload).kind in (DecodeFailureKind.NOT_JSON, DecodeFailureKind.WRONG_SHAPE)


def test_unknown_extra_keys_are_ignored() -> None:
    message = plain_command()
    assert CODEC.decode(v2(message, future=[1, 2]), TopicKind.COMMAND) == message


@pytest.mark.parametrize(
    "message",
    [
        plain_command(),
        full_command(),
        plain_command(Note(12345, 'quote " backslash \\ newline \n é ' + "n" * 250)),
        CommandMessage(ACCOUNT, Deposit(1, "x"), "deposit", header=Header({"k": "v"}), request_id="r"),
    ],
    ids=["command", "full-command", "escapes", "header-and-request"],
)
def test_a_command_spliced_around_its_body_json_is_the_compact_form(message: Any) -> None:
    """The encoder writes a command's body once and splices it into the envelope: the text is
    what the compact dict's JSON would be, member for member, and it round-trips."""
    text = CODEC.encode(message)
    assert json.loads(text) == compact_wire(REGISTRY, message)
    assert text == json.dumps(compact_wire(REGISTRY, message), separators=(",", ":"), ensure_ascii=False)
    assert CODEC.decode(text, TopicKind.COMMAND) == message
