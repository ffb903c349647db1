"""Body validation: pydantic is skipped only where it could find nothing to report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
from pydantic import Field

from wow_core.command import validation
from wow_core.command.validation import validate_body


@dataclass(frozen=True, slots=True)
class Plain:
    text: str
    count: int
    ratio: float
    flag: bool
    raw: bytes


@dataclass(frozen=True)
class Constrained:
    count: Annotated[int, Field(gt=0)]


@dataclass(frozen=True)
class ConstrainedByDefault:
    count: int = Field(default=1, gt=0)


@dataclass
class Checked:
    count: int

    def __post_init__(self) -> None:
        if self.count == 13:
            raise ValueError("unlucky")


@pytest.fixture
def pydantic_calls(monkeypatch: pytest.MonkeyPatch) -> list[type]:
    calls: list[type] = []
    plan = validation._plan

    def counting(cls: type) -> object:
        calls.append(cls)
        return plan(cls)

    monkeypatch.setattr(validation, "_plan", counting)
    return calls


def test_a_plain_dataclass_with_exactly_typed_values_is_not_given_to_pydantic(
    pydantic_calls: list[type],
) -> None:
    assert validate_body(Plain("a", 1, 0.5, True, b"x")) == []
    assert pydantic_calls == []


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        (Plain(1, 1, 0.5, True, b"x"), ["text"]),  # type: ignore[arg-type]
        (Plain("a", "many", 0.5, True, b"x"), ["count"]),  # type: ignore[arg-type]
        (Plain("a", 1, None, True, b"x"), ["ratio"]),  # type: ignore[arg-type]
    ],
)
def test_any_other_value_goes_through_pydantic_with_the_same_violations(
    pydantic_calls: list[type], body: Plain, paths: list[str]
) -> None:
    assert [v.path for v in validate_body(body)] == paths
    assert pydantic_calls == [Plain]


def test_values_pydantic_accepts_though_not_of_the_exact_type_stay_valid(pydantic_calls: list[type]) -> None:
    assert validate_body(Plain("a", 1, 2, True, b"x")) == []  # an int for a float
    assert pydantic_calls == [Plain]


def unlucky() -> Checked:
    body = object.__new__(Checked)  # made without its __post_init__ (a decoded body, say)
    body.count = 13
    return body


@pytest.mark.parametrize(
    "body",
    [Constrained(0), ConstrainedByDefault(0), unlucky()],
    ids=["annotated", "field-default", "post-init"],
)
def test_constraints_and_post_init_are_still_checked(body: object) -> None:
    assert validate_body(body) != []


# -- the rules of the wire, in-process ---------------------------------------------------


@dataclass(frozen=True)
class Amount:
    amount: Annotated[int, Field(gt=0)]
    ratio: float = 1.0


@pytest.mark.parametrize("value", ["5", True, 1.0], ids=["text", "bool", "float"])
def test_a_value_a_receiver_would_refuse_from_the_wire_is_a_violation_in_process(value: object) -> None:
    assert [(v.path, v.message) for v in validate_body(Amount(value))] == [  # type: ignore[arg-type]
        ("amount", "Input should be a valid integer")
    ]


def test_the_in_process_violations_are_those_of_the_codec_for_the_same_json() -> None:
    from pydantic import ValidationError

    from wow_core.model.wire import command_body_validator

    with pytest.raises(ValidationError) as wire:
        command_body_validator(Amount)(b'{"amount": true}')
    assert [v.message for v in validate_body(Amount(True))] == [e["msg"] for e in wire.value.errors()]


def test_an_int_for_a_float_is_still_valid_strictly_as_on_the_wire() -> None:
    assert validate_body(Amount(5, 2)) == []


def test_the_lax_mode_accepts_what_pydantic_would_convert() -> None:
    assert validation.validate_body_lax(Amount("5")) == []  # type: ignore[arg-type]
    assert validation.validate_body_lax(Amount(0)) != []
    assert validation.body_validator(False) is validation.validate_body_lax
    assert validation.body_validator(True) is validate_body


class Opaque:
    """A value JSON cannot carry (a body of this kind can only be handed over in-process)."""


@dataclass(frozen=True)
class Carrying:
    thing: Opaque
    count: int

    __pydantic_config__ = {"arbitrary_types_allowed": True}


def test_a_body_whose_values_json_cannot_carry_is_checked_in_lax_mode() -> None:
    assert validate_body(Carrying(Opaque(), 1)) == []
    assert [v.path for v in validate_body(Carrying(Opaque(), "x"))] == ["count"]  # type: ignore[arg-type]
