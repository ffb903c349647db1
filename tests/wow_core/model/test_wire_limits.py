"""What the sender accepts, the receiver reads: the encoder applies the decoder's limits,
and a command body from the wire is validated strictly (unless the codec is lax)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

import pytest
from pydantic import BaseModel, ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from tests.wow_core.model.wire_bodies import Deposit
from wow_core.model import (
    AggregateId,
    BodyTypeRegistry,
    CommandMessage,
    DecodeError,
    DecodeFailureKind,
    DomainEvent,
    DomainEventStream,
    EncodeError,
    MessageCodec,
    NamedAggregate,
    TopicKind,
)
from wow_core.model.wire import MAX_DEPTH, MAX_INT_DIGITS
from wow_core.transport.bus import TransportCommandBus
from wow_core.transport.in_memory import InMemoryTransport


@dataclass(frozen=True)
class Upload:
    payload: Any


class Color(Enum):
    RED = "red"


@dataclass(frozen=True)
class Rich:
    price: Decimal
    sizes: tuple[int, ...]
    color: Color
    at: datetime
    ref: UUID
    tags: frozenset[str] = field(default_factory=frozenset)


class Order(BaseModel):
    quantity: int
    item: str


class Open(BaseModel):
    """Declares its own extra behaviour: it is kept."""

    model_config = ConfigDict(extra="allow")
    owner: str


REGISTRY = BodyTypeRegistry([Deposit, Upload, Rich, Order, Open])
STRICT = MessageCodec(REGISTRY)
LAX = MessageCodec(REGISTRY, strict_commands=False)
ACCOUNT = AggregateId(NamedAggregate("bank", "account"), "a-1")


def command(body: object) -> CommandMessage[Any]:
    return CommandMessage(aggregate_id=ACCOUNT, body=body, name=type(body).__name__)


def stream(body: object) -> DomainEventStream:
    event = DomainEvent(aggregate_id=ACCOUNT, body=body, name="uploaded", version=1)
    return DomainEventStream(aggregate_id=ACCOUNT, version=1, events=(event,), command_id="c", request_id="r")


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


# -- the decoder's limits, applied by the encoder ------------------------------------------

# A command's body is the message's second level: payload nested n deep makes n + 2 levels.
DEEPEST_PAYLOAD = MAX_DEPTH - 2


@pytest.mark.parametrize(
    "levels", [DEEPEST_PAYLOAD - 1, DEEPEST_PAYLOAD, DEEPEST_PAYLOAD + 1, 200, 253, 5000]
)
def test_a_body_is_encoded_exactly_when_a_receiver_can_decode_it(levels: int) -> None:
    message = command(Upload(nested(levels)))
    if levels <= DEEPEST_PAYLOAD:
        decoded = STRICT.decode(STRICT.encode(message), TopicKind.COMMAND)
        assert decoded.body == Upload(nested(levels))  # type: ignore[attr-defined]
        return
    with pytest.raises(EncodeError) as refused:
        STRICT.encode(message)
    assert refused.value.field.startswith("message.body.payload[0][0]")
    assert f"nested more than {MAX_DEPTH} levels deep" in refused.value.reason


def test_what_the_encoder_refuses_for_depth_the_decoder_refuses_too() -> None:
    data = json.loads(STRICT.encode(command(Upload(nested(DEEPEST_PAYLOAD)))))
    data["b"]["payload"] = [data["b"]["payload"]]  # one level more
    with pytest.raises(DecodeError, match="recursion limit"):
        STRICT.decode(json.dumps(data), TopicKind.COMMAND)


def test_an_integer_too_long_for_the_decoder_is_refused_at_the_sender_naming_the_field() -> None:
    longest = 10**MAX_INT_DIGITS - 1  # 4300 nines
    decoded = STRICT.decode(STRICT.encode(command(Deposit(-longest))), TopicKind.COMMAND)
    assert decoded.body == Deposit(-longest)  # type: ignore[attr-defined]
    with pytest.raises(EncodeError) as refused:
        STRICT.encode(command(Deposit(10**5000, "5,001 digits")))
    assert refused.value.field == "message.body.amount"
    assert f"more than {MAX_INT_DIGITS} digits" in refused.value.reason
    with pytest.raises(EncodeError) as in_a_list:
        STRICT.encode(command(Upload({"rows": [1, 2, -(10**4300)]})))
    assert in_a_list.value.field == "message.body.payload.rows[2]"


def test_a_long_run_of_digits_in_a_string_is_no_integer() -> None:
    message = command(Deposit(1, "9" * 6000))
    assert STRICT.decode(STRICT.encode(message), TopicKind.COMMAND).body == Deposit(1, "9" * 6000)  # type: ignore[attr-defined]


def test_an_event_beyond_the_limits_is_refused_naming_the_event() -> None:
    with pytest.raises(EncodeError) as refused:
        STRICT.encode(stream(Upload(nested(MAX_DEPTH))))
    assert refused.value.field.startswith("message.events[0].body.payload")
    with pytest.raises(EncodeError, match=r"message\.events\[0\]\.body\.payload: an integer"):
        STRICT.encode(stream(Upload(10**4301)))


async def test_a_body_beyond_the_limits_is_refused_by_send_and_nothing_is_sent() -> None:
    transport = InMemoryTransport()
    bus = TransportCommandBus(transport, STRICT)
    try:
        with pytest.raises(EncodeError, match=r"message\.body\.amount"):
            await bus.send(command(Deposit(10**5000)))
    finally:
        await bus.close()
        await transport.close()


# -- strict command bodies ---------------------------------------------------------------


def wire(body_type: type[Any], body: dict[str, Any]) -> str:
    data = json.loads(STRICT.encode(command(Deposit(1))))
    data["t"] = REGISTRY.name_of(body_type)
    data["b"] = body
    return json.dumps(data)


@pytest.mark.parametrize(
    ("body_type", "body", "named"),
    [
        (
            Deposit,
            {"amount": 5, "note": "x", "memo": "dropped?"},
            "body.memo: Unexpected keyword argument",
        ),
        (Deposit, {"amount": True}, "body.amount: Input should be a valid integer"),
        (Deposit, {"amount": "5"}, "body.amount: Input should be a valid integer"),
        (Deposit, {"amount": 5.0}, "body.amount: Input should be a valid integer"),
        (Deposit, {"amount": 5, "note": 7}, "body.note: Input should be a valid string"),
        (
            Order,
            {"quantity": 2, "item": "tea", "discount": 1},
            "body.discount: Extra inputs are not permitted",
        ),
        (Order, {"quantity": False, "item": "tea"}, "body.quantity: Input should be a valid integer"),
    ],
)
def test_a_command_body_from_the_wire_is_validated_strictly_naming_the_field(
    body_type: type[Any], body: dict[str, Any], named: str
) -> None:
    with pytest.raises(DecodeError) as refused:
        STRICT.decode(wire(body_type, body), TopicKind.COMMAND)
    assert refused.value.kind is DecodeFailureKind.INVALID_BODY
    assert named in refused.value.detail


def test_the_lax_codec_coerces_and_ignores_unknown_fields() -> None:
    decoded = LAX.decode(wire(Deposit, {"amount": True, "memo": "x"}), TopicKind.COMMAND)
    assert decoded.body == Deposit(1)  # type: ignore[attr-defined]
    decoded = LAX.decode(wire(Order, {"quantity": "2", "item": "tea", "discount": 1}), TopicKind.COMMAND)
    assert decoded.body == Order(quantity=2, item="tea")  # type: ignore[attr-defined]


def test_a_class_that_configures_extra_keeps_it() -> None:
    decoded = STRICT.decode(wire(Open, {"owner": "ada", "nickname": "countess"}), TopicKind.COMMAND)
    assert decoded.body.model_extra == {"nickname": "countess"}  # type: ignore[attr-defined]


def test_strict_json_still_reads_what_json_cannot_hold_natively() -> None:
    body = Rich(
        Decimal("1.50"), (1, 2), Color.RED, datetime(2024, 5, 1, 12, 30), UUID(int=7), frozenset({"a"})
    )
    assert STRICT.decode(STRICT.encode(command(body)), TopicKind.COMMAND).body == body  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic's serializer warns of the str
def test_the_sender_refuses_a_command_body_a_strict_receiver_would_refuse() -> None:
    # A plain dataclass does not check its fields: "5" is held where an int is declared.
    loose = Deposit("5")  # type: ignore[arg-type]
    with pytest.raises(EncodeError) as refused:
        STRICT.encode(command(loose))
    assert refused.value.field == "message.body"
    assert "body.amount: Input should be a valid integer" in refused.value.reason
    assert LAX.decode(LAX.encode(command(loose)), TopicKind.COMMAND).body == Deposit(5)  # type: ignore[attr-defined]


def test_events_are_history_and_stay_readable_when_their_class_lost_a_field() -> None:
    data = json.loads(STRICT.encode(stream(Deposit(3))))
    data["e"][0]["b"]["removed_since"] = "v1"
    decoded = STRICT.decode(json.dumps(data), TopicKind.EVENT)
    assert decoded.events[0].body == Deposit(3)  # type: ignore[attr-defined]


def test_pydantic_dataclass_bodies_are_strict_too() -> None:
    @pydantic_dataclass
    class Refund:
        amount: int

    registry = BodyTypeRegistry([Refund])
    codec = MessageCodec(registry)
    data = json.loads(codec.encode(command(Refund(2))))
    data["b"] = {"amount": 2, "why": "x"}
    with pytest.raises(DecodeError, match=r"body\.why: Unexpected keyword argument"):
        codec.decode(json.dumps(data), TopicKind.COMMAND)


def test_the_runtime_codec_is_lax_only_when_the_setting_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from wow_core.runtime.container import create_container
    from wow_core.runtime.settings import WowSettings

    assert create_container(WowSettings.load()).codec().strict_commands
    monkeypatch.setenv("WOW_COMMAND__STRICT_BODIES", "false")
    assert not create_container(WowSettings.load()).codec().strict_commands
