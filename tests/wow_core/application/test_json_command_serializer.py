"""JsonCommandSerializer: the hostile-input corpus (every rejection of spec 004 and issue
19) and the accepted shapes. The property-based round trips are in
``test_serializer_properties.py``."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, RootModel, computed_field, field_validator

from tests.ids import stable_id
from tests.wow_core.application.commands import ChargeCard, Everything, PydanticCommand, SlotsKwOnly
from wow_core.application import CommandSerializationError, JsonCommandSerializer

serializer = JsonCommandSerializer()


def rejected_on_send(command: object, match: str) -> None:
    with pytest.raises(CommandSerializationError, match=match):
        serializer.serialize(command)


def rejected_on_receive(payload: str, command_class: type[Any], match: str, using: Any = serializer) -> None:
    with pytest.raises(CommandSerializationError, match=match):
        using.deserialize(payload, command_class)


@dataclass
class Loose:
    value: Any


# -- accepted --------------------------------------------------------------------------------


def everything(**overrides: Any) -> Everything:
    values: dict[str, Any] = dict(
        nothing=None,
        flag=True,
        count=-(2**63),
        ratio=-0.0,
        text="zürich \u2603 \U0001f600",
        items=[1, 1.0, True, None, "s", [], {}],
        mapping={"a": {"b": [2**63 - 1]}},
        maybe=None,
        numbers=[0, -1],
        table={"x": [1.5, 2]},
        mode=True,
        anything={"nested": [0.1]},
    )
    values.update(overrides)
    return Everything(**values)


def test_every_accepted_declared_type_round_trips_with_exact_types() -> None:
    command = everything()
    restored = serializer.deserialize(serializer.serialize(command), Everything)
    assert restored == command
    assert isinstance(restored, Everything)
    assert type(restored.items[0]) is int
    assert type(restored.items[1]) is float
    assert restored.items[2] is True
    assert str(restored.ratio) == "-0.0"
    assert type(restored.table["x"][1]) is int  # an int in a float field stays an int


def test_int_and_float_are_distinct_on_the_wire() -> None:
    payload = json.loads(serializer.serialize(Loose([1, 1.0, -0.0, 10**18, 1e18])))
    assert serializer.serialize(Loose([1, 1.0, -0.0])) == '{"value":[1,1.0,-0.0]}'
    assert [type(v) for v in payload["value"]] == [int, float, float, int, float]


def test_slots_frozen_keyword_only_dataclasses_and_pydantic_models_are_accepted() -> None:
    command = SlotsKwOnly(name="n", weights=[0.5])
    assert serializer.deserialize(serializer.serialize(command), SlotsKwOnly) == command
    model = PydanticCommand(name="n", count=2, ratio=None, tags=["t"], extra={"k": [1]})
    assert serializer.deserialize(serializer.serialize(model), PydanticCommand) == model


def test_a_field_with_a_default_may_be_missing_from_the_payload() -> None:
    restored = serializer.deserialize('{"card":"c","amount":1}', ChargeCard)
    assert restored == ChargeCard("c", 1, None)


def test_supports_claims_dataclasses_and_pydantic_models_only() -> None:
    assert serializer.supports(ChargeCard)
    assert serializer.supports(PydanticCommand)
    assert not serializer.supports(dict)
    assert not serializer.supports(int)


# -- rejected on send: values ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (lambda: None, "a callable"),
        (print, "a callable"),
        (object(), "an object of type object"),
        (datetime.date(2026, 1, 1), "an object of type date"),
        ((1, 2), "an object of type tuple"),
        ({1, 2}, "an object of type set"),
        (b"bytes", "an object of type bytes"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        (float("-inf"), "not a finite number"),
        ([1.0, float("nan")], r"value\[1\]: nan is not a finite number"),
        (2**63, "signed 64-bit range"),
        (-(2**63) - 1, "signed 64-bit range"),
        ({1: "a"}, "a key of type int"),
        ({"a": {None: 1}}, "a key of type NoneType"),
        ("\ud800", "lone surrogate"),
        (["ok", {"k": "\udfff"}], "lone surrogate"),
    ],
    ids=stable_id,
)
def test_values_that_are_not_json_safe_are_rejected_before_sending(value: Any, match: str) -> None:
    rejected_on_send(Loose(value), match)


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@pytest.mark.parametrize("value", [Color.RED, Name("x"), [Color.RED]], ids=repr)
def test_subclasses_of_json_types_are_objects_because_they_would_come_back_as_their_base(value: Any) -> None:
    rejected_on_send(Loose(value), "an object of type")


def test_cycles_are_rejected() -> None:
    items: list[Any] = []
    items.append(items)
    rejected_on_send(Loose(items), "a cycle")
    mapping: dict[str, Any] = {}
    mapping["self"] = [mapping]
    rejected_on_send(Loose(mapping), "a cycle")


def test_the_same_list_twice_is_not_a_cycle() -> None:
    shared = [1]
    assert serializer.serialize(Loose([shared, shared])) == '{"value":[[1],[1]]}'


def test_nesting_deeper_than_the_setting_is_rejected() -> None:
    shallow = JsonCommandSerializer(max_depth=3)
    assert shallow.serialize(Loose([[[1]]]))
    with pytest.raises(CommandSerializationError, match="nested deeper than 3"):
        shallow.serialize(Loose([[[[1]]]]))
    with pytest.raises(CommandSerializationError, match="nested deeper than 3"):
        shallow.serialize(Loose({"a": {"b": {"c": {}}}}))


def test_a_value_that_does_not_match_the_declared_type_is_rejected() -> None:
    rejected_on_send(ChargeCard("c", True), r"ChargeCard.amount: declared int, holds bool")  # type: ignore[arg-type]
    rejected_on_send(ChargeCard("c", 1.0), r"declared int, holds float")  # type: ignore[arg-type]
    rejected_on_send(everything(flag=1), r"Everything.flag: declared bool, holds int")
    rejected_on_send(everything(numbers=[1, False]), r"Everything.numbers")
    rejected_on_send(everything(mode="c"), r"Everything.mode")
    rejected_on_send(ChargeCard(5, 1), r"declared str, holds int")  # type: ignore[arg-type]


# -- rejected on send: the class -------------------------------------------------------------


def test_a_class_that_is_neither_a_dataclass_nor_a_pydantic_model_is_rejected() -> None:
    class Plain:
        def __init__(self, value: int) -> None:
            self.value = value

    rejected_on_send(Plain(1), "only dataclasses and pydantic models")


def test_private_fields_are_rejected() -> None:
    @dataclass
    class WithPrivate:
        public: int
        _secret: str

    rejected_on_send(WithPrivate(1, "s"), "the private field '_secret'")


def test_init_false_fields_are_rejected() -> None:
    @dataclass
    class Derived:
        base: int
        doubled: int = field(init=False, default=0)

    rejected_on_send(Derived(1), "'doubled' has init=False")


def test_a_dataclass_without_its_generated_constructor_is_rejected() -> None:
    @dataclass(init=False)
    class Custom:
        value: int

        def __init__(self) -> None:
            self.value = 1

    rejected_on_send(Custom(), "init=False")


def test_a_constructor_whose_parameters_are_not_the_stored_fields_is_rejected() -> None:
    @dataclass
    class Variadic:
        value: int

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.value = 1

    rejected_on_send(Variadic(), "a variadic constructor parameter")


def test_initvar_parameters_without_storage_are_rejected() -> None:
    @dataclass
    class WithInitVar:
        value: int
        seed: InitVar[int]

        def __post_init__(self, seed: int) -> None:
            pass

    rejected_on_send(WithInitVar(1, 2), "the InitVar 'seed'")


def test_properties_without_storage_are_rejected() -> None:
    class WithComputed(BaseModel):
        amount: int

        @computed_field  # type: ignore[prop-decorator]
        @property
        def doubled(self) -> int:
            return self.amount * 2

    rejected_on_send(WithComputed(amount=1), r"computed fields \('doubled'\) are properties without storage")

    @dataclass
    class Shadowed:
        amount: int

    Shadowed.amount = property(lambda self: 1)  # type: ignore[assignment]
    rejected_on_send(Shadowed.__new__(Shadowed), "'amount' is a property or descriptor")


def test_pydantic_private_attributes_are_rejected() -> None:
    class WithPrivate(BaseModel):
        amount: int
        _token: str = PrivateAttr("t")

    rejected_on_send(WithPrivate(amount=1), r"private attributes \('_token'\)")


def test_attributes_set_outside_the_constructor_are_rejected() -> None:
    command = Loose(1)
    command.injected = "x"  # type: ignore[attr-defined]
    rejected_on_send(command, r"attributes set outside the constructor \('injected'\)")

    class Lenient(BaseModel):
        model_config = ConfigDict(extra="allow")
        amount: int

    rejected_on_send(Lenient(amount=1, injected="x"), "extra='allow' admits fields")


def test_aliased_pydantic_fields_and_root_models_are_rejected() -> None:
    class Aliased(BaseModel):
        amount: int = Field(alias="Amount")

    rejected_on_send(Aliased(Amount=1), "has an alias")
    rejected_on_send(RootModel[int](1), "a RootModel")


@pytest.mark.parametrize(
    "annotation",
    [datetime.datetime, tuple[int, ...], set[str], dict[int, str], ChargeCard, bytes, "list[object()]"],
    ids=str,
)
def test_fields_declared_with_a_type_that_is_not_json_safe_are_rejected(annotation: Any) -> None:
    if annotation == "list[object()]":
        annotation = list[object()]  # type: ignore[misc]
    declared = dataclasses.make_dataclass("Declared", [("value", annotation)])
    rejected_on_send(declared(None), "which is not JSON-safe")


def test_a_refused_class_is_refused_on_receive_too() -> None:
    @dataclass
    class WithPrivate:
        _secret: str

    rejected_on_receive('{"_secret":"s"}', WithPrivate, "the private field")


# -- rejected on receive: the payload ---------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ("not json", "not accepted JSON"),
        ("", "not accepted JSON"),
        ('["card","amount"]', "not a JSON object"),
        ("null", "not a JSON object"),
        ('{"card":"c","amount":NaN}', "NaN is not a finite number"),
        ('{"card":"c","amount":Infinity}', "Infinity is not a finite number"),
        ('{"card":"c","amount":-Infinity}', "-Infinity is not a finite number"),
        ('{"card":"c","amount":1e999}', "not a finite number"),
        ('{"card":"c","amount":9223372036854775808}', "signed 64-bit range"),
        ('{"card":"c","amount":-9223372036854775809}', "signed 64-bit range"),
        ('{"card":"c","amount":' + "9" * 5000 + "}", "signed 64-bit range"),
        ('{"card":"c","amount":1,"amount":2}', "the key 'amount' appears twice"),
        ('{"card":"c","amount":1,"admin":true}', "unknown fields 'admin'"),
        ('{"card":"c"}', "missing required fields 'amount'"),
        ('{"card":"c","amount":true}', "declared int, holds bool"),
        ('{"card":"c","amount":1.0}', "declared int, holds float"),
        ('{"card":"c","amount":"1"}', "declared int, holds str"),
        ('{"card":"c","amount":1,"note":5}', "ChargeCard.note"),
        ('{"card":"\\ud800","amount":1}', "lone surrogate"),
    ],
    ids=stable_id,
)
def test_payloads_that_are_not_a_command_of_the_class_are_rejected_before_construction(
    payload: str, match: str
) -> None:
    rejected_on_receive(payload, ChargeCard, match)


def test_int_where_bool_is_declared_is_rejected_on_receive() -> None:
    payload = json.loads(serializer.serialize(everything()))
    payload["flag"] = 1
    rejected_on_receive(json.dumps(payload), Everything, "Everything.flag: declared bool, holds int")


def test_a_payload_that_is_not_a_string_is_rejected() -> None:
    rejected_on_receive(b'{"card":"c","amount":1}', ChargeCard, "not a string")  # type: ignore[arg-type]


def test_payload_size_and_depth_are_bounded_on_receive() -> None:
    small = JsonCommandSerializer(max_payload_chars=20, max_depth=2)
    rejected_on_receive('{"card":"c","amount":12345678}', ChargeCard, "more than 20", using=small)
    rejected_on_receive('{"value":[[[1]]]}', Loose, "nested deeper than 2", using=small)
    rejected_on_receive('{"value":' + "[" * 100_000 + "]" * 100_000 + "}", Loose, "nested deeper")


def test_a_constructor_that_changes_the_state_it_is_given_is_rejected() -> None:
    @dataclass
    class Normalizing:
        email: str

        def __post_init__(self) -> None:
            self.email = self.email.lower()

    assert serializer.serialize(Normalizing("a@b.c")) == '{"email":"a@b.c"}'
    rejected_on_receive('{"email":"A@B.C"}', Normalizing, "the constructor changed the field 'email'")

    class Validating(BaseModel):
        amount: float

        @field_validator("amount")
        @classmethod
        def rounded(cls, value: float) -> float:
            return round(value, 1)

    rejected_on_receive('{"amount":1.25}', Validating, "the constructor changed the field 'amount'")
    # pydantic's own coercion is a change of state too: an int declared float becomes a float
    rejected_on_receive('{"amount":1}', Validating, "the constructor changed the field 'amount'")


def test_a_constructor_that_mutates_its_arguments_in_place_is_rejected() -> None:
    @dataclass
    class Appending:
        items: list[int]

        def __post_init__(self) -> None:
            self.items.append(0)

    rejected_on_receive('{"items":[1]}', Appending, "changed the field 'items'")


def test_a_constructor_that_refuses_the_payload_is_a_serialization_error() -> None:
    class Bounded(BaseModel):
        amount: int = Field(gt=0)

    rejected_on_receive('{"amount":0}', Bounded, "the constructor refused the payload: ValidationError")


def test_bad_settings_of_the_serializer_are_refused() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        JsonCommandSerializer(max_depth=0)
    with pytest.raises(ValueError, match="max_payload_chars"):
        JsonCommandSerializer(max_payload_chars=True)  # type: ignore[arg-type]


def test_the_bounds_can_come_from_the_settings() -> None:
    from wow_core.application.settings import SerializerSettings

    bounded = JsonCommandSerializer.from_settings(SerializerSettings(max_depth=2, max_payload_chars=100))
    assert (bounded.max_depth, bounded.max_payload_chars) == (2, 100)
