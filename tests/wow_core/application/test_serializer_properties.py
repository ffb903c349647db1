"""Property-based round trips: every accepted shape comes back with the same exact values
(``int`` stays ``int``, ``float`` stays ``float`` with its sign, ``bool`` stays ``bool``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wow_core.application.commands import Everything, PydanticCommand, SlotsKwOnly
from tests.wow_core.application.strategies import FLOATS, INT64, JSON_VALUES, TEXT, exactly, exactly_fields
from wow_core.application import JsonCommandSerializer, JsonOperationContextSerializer, Operation

serializer = JsonCommandSerializer()
PROPERTY = settings(max_examples=60, deadline=None)

EVERYTHING = st.builds(
    Everything,
    nothing=st.none(),
    flag=st.booleans(),
    count=INT64,
    ratio=FLOATS | INT64,
    text=TEXT,
    items=st.lists(JSON_VALUES, max_size=4),
    mapping=st.dictionaries(TEXT, JSON_VALUES, max_size=4),
    maybe=st.none() | INT64,
    numbers=st.lists(INT64, max_size=4),
    table=st.dictionaries(TEXT, st.lists(FLOATS | INT64, max_size=3), max_size=3),
    mode=st.sampled_from(["a", "b", 1, True, None]),
    anything=JSON_VALUES,
    defaulted=TEXT,
)
FIELDS = [item.name for item in dataclasses.fields(Everything)]


@PROPERTY
@given(EVERYTHING)
def test_a_dataclass_of_every_accepted_field_type_round_trips_exactly(command: Everything) -> None:
    restored = serializer.deserialize(serializer.serialize(command), Everything)
    assert exactly_fields(restored, command, FIELDS)


@PROPERTY
@given(st.builds(SlotsKwOnly, name=TEXT, weights=st.lists(FLOATS, max_size=5)))
def test_a_frozen_slots_keyword_only_dataclass_round_trips_exactly(command: SlotsKwOnly) -> None:
    restored = serializer.deserialize(serializer.serialize(command), SlotsKwOnly)
    assert exactly_fields(restored, command, ["name", "weights"])


@PROPERTY
@given(
    st.builds(
        PydanticCommand,
        name=TEXT,
        count=INT64,
        ratio=st.none() | FLOATS,
        tags=st.lists(TEXT, max_size=4),
        extra=st.dictionaries(TEXT, JSON_VALUES, max_size=3),
    )
)
def test_a_pydantic_model_round_trips_exactly(command: PydanticCommand) -> None:
    restored = serializer.deserialize(serializer.serialize(command), PydanticCommand)
    assert exactly_fields(restored, command, list(PydanticCommand.model_fields))


@dataclasses.dataclass
class AnyValue:
    value: Any


@PROPERTY
@given(JSON_VALUES)
def test_any_json_safe_value_round_trips_exactly(value: Any) -> None:
    restored = serializer.deserialize(serializer.serialize(AnyValue(value)), AnyValue)
    assert isinstance(restored, AnyValue)
    assert exactly(restored.value, value)


@PROPERTY
@given(st.dictionaries(st.sampled_from(["tenant_id", "trace_id", "locale", "other"]), JSON_VALUES))
def test_allowlisted_context_round_trips_exactly_and_nothing_else_crosses(attributes: dict[str, Any]) -> None:
    context = JsonOperationContextSerializer(["tenant_id", "trace_id", "locale"])
    restored = context.deserialize(context.serialize(Operation(object(), attributes=attributes)))
    expected = {name: value for name, value in attributes.items() if name != "other"}
    assert exactly(restored, expected)
