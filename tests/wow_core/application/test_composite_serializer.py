"""CompositeCommandSerializer: support predicates in order, a claim is final, members are
checked at construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.wow_core.application.commands import ChargeCard
from wow_core.application import CommandSerializationError, CompositeCommandSerializer, JsonCommandSerializer


@dataclass
class Opaque:
    blob: bytes


class BytesSerializer:
    """Claims Opaque only."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def supports(self, command_class: type[Any]) -> bool:
        return command_class is Opaque

    def serialize(self, command: object) -> str:
        assert isinstance(command, Opaque)
        self.calls.append("serialize")
        return command.blob.hex()

    def deserialize(self, payload: str, command_class: type[Any]) -> object:
        return Opaque(bytes.fromhex(payload))


class AcceptsEverything(BytesSerializer):
    def supports(self, command_class: type[Any]) -> bool:
        return True

    def serialize(self, command: object) -> str:
        self.calls.append("serialize")
        return "anything"


def test_the_first_member_that_claims_a_class_serializes_it() -> None:
    composite = CompositeCommandSerializer([BytesSerializer(), JsonCommandSerializer()])
    assert composite.serialize(Opaque(b"\x01")) == "01"
    assert composite.deserialize("01", Opaque) == Opaque(b"\x01")
    assert composite.deserialize(composite.serialize(ChargeCard("c", 1)), ChargeCard) == ChargeCard("c", 1)


def test_a_claim_is_final_even_when_a_later_member_would_accept() -> None:
    fallback = AcceptsEverything()
    composite = CompositeCommandSerializer([JsonCommandSerializer(), fallback])
    with pytest.raises(CommandSerializationError, match="declared bytes, which is not JSON-safe"):
        composite.serialize(Opaque(b"x"))  # JSON claims every dataclass, and refuses bytes
    assert fallback.calls == []


def test_a_class_no_member_claims_is_a_serialization_error() -> None:
    composite = CompositeCommandSerializer([BytesSerializer()])
    with pytest.raises(CommandSerializationError, match="no configured serializer supports"):
        composite.serialize(ChargeCard("c", 1))
    with pytest.raises(CommandSerializationError, match="no configured serializer supports"):
        composite.deserialize("{}", ChargeCard)


class SerializeOnly:
    def serialize(self, command: object) -> str:
        return ""

    def deserialize(self, payload: str, command_class: type[Any]) -> object:
        return object()


@pytest.mark.parametrize(
    ("members", "error", "match"),
    [
        ([], ValueError, "at least one serializer"),
        ("json", TypeError, "an iterable of serializers"),
        (None, TypeError, "an iterable of serializers"),
        ([JsonCommandSerializer(), SerializeOnly()], TypeError, "serializer #1 .SerializeOnly."),
        ([object()], TypeError, "serializer #0"),
    ],
    ids=["empty", "a string", "None", "no supports", "an object"],
)
def test_every_member_is_checked_at_construction(members: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        CompositeCommandSerializer(members)


def test_a_generator_of_members_is_read_once_at_construction() -> None:
    composite = CompositeCommandSerializer(s for s in [BytesSerializer(), JsonCommandSerializer()])
    assert len(composite.members) == 2
    assert composite.serialize(Opaque(b"\x02")) == "02"
