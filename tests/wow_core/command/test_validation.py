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
