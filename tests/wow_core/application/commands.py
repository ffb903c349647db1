"""Command classes the application tests share (also imported by the worker processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from wow_core.application import asynchronous


@asynchronous(transport="payments")
@dataclass(frozen=True)
class ChargeCard:
    card: str
    amount: int
    note: str | None = None


@asynchronous(transport="mail")
@dataclass(frozen=True)
class SendReceipt:
    to: str


@dataclass(frozen=True)
class Audit:
    """Not asynchronous: always handled where it is dispatched."""

    what: str


@dataclass
class Everything:
    """One field of every accepted declared type."""

    nothing: None
    flag: bool
    count: int
    ratio: float
    text: str
    items: list[Any]
    mapping: dict[str, Any]
    maybe: int | None
    numbers: list[int]
    table: dict[str, list[float]]
    mode: Literal["a", "b", 1, True, None]
    anything: Any
    defaulted: str = "d"


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotsKwOnly:
    name: str
    weights: list[float] = field(default_factory=list)


class PydanticCommand(BaseModel):
    name: str
    count: int
    ratio: float | None = None
    tags: list[str] = []
    extra: dict[str, Any] = {}
