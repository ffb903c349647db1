"""JsonOperationContextSerializer: only allowlisted attributes cross; reserved names
never; values strictly JSON-safe with exact types."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ids import stable_id
from wow_core.application import JsonOperationContextSerializer, Operation, OperationContextError


def operation(**attributes: Any) -> Operation:
    return Operation(object(), attributes=attributes)


def test_the_default_allowlist_is_empty_so_nothing_crosses() -> None:
    assert JsonOperationContextSerializer().serialize(operation(tenant_id="t", user="u")) == "{}"


def test_only_allowlisted_attributes_cross_and_missing_ones_are_left_out() -> None:
    context = JsonOperationContextSerializer(["tenant_id", "locale"])
    assert json.loads(context.serialize(operation(tenant_id="t", password="p"))) == {"tenant_id": "t"}


@pytest.mark.parametrize("name", ["__original_operation_id", "__execution_mode", "__anything"])
def test_reserved_names_cannot_be_allowlisted(name: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        JsonOperationContextSerializer(["tenant_id", name])


@pytest.mark.parametrize("allowlist", ["tenant_id", [""], [1], [None]], ids=repr)
def test_an_allowlist_that_is_not_a_list_of_names_is_refused(allowlist: Any) -> None:
    with pytest.raises(TypeError):
        JsonOperationContextSerializer(allowlist)


def test_exact_number_types_and_signed_zero_are_kept() -> None:
    context = JsonOperationContextSerializer(["values"])
    payload = context.serialize(operation(values=[1, 1.0, -0.0, 0.0, True, 2**63 - 1]))
    restored = context.deserialize(payload)["values"]
    assert [type(v) for v in restored] == [int, float, float, float, bool, int]
    assert str(restored[2]) == "-0.0"
    assert str(restored[3]) == "0.0"


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        ([float("-inf")], "not a finite number"),
        (object(), "an object of type object"),
        (lambda: 1, "a callable"),
        ({1: "x"}, "a key of type int"),
        (2**64, "signed 64-bit range"),
        ((1,), "an object of type tuple"),
        ("\udc80", "lone surrogate"),
    ],
    ids=stable_id,
)
def test_values_that_are_not_json_safe_are_rejected(value: Any, match: str) -> None:
    with pytest.raises(OperationContextError, match=match):
        JsonOperationContextSerializer(["value"]).serialize(operation(value=value))


def test_an_attribute_that_is_not_allowlisted_is_not_even_inspected() -> None:
    context = JsonOperationContextSerializer(["tenant_id"])
    assert context.serialize(operation(tenant_id="t", connection=object())) == '{"tenant_id":"t"}'


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ("[]", "not a JSON object"),
        ("nope", "not accepted JSON"),
        ('{"__original_operation_id":"forged"}', "'__original_operation_id' is a reserved attribute"),
        ('{"__execution_mode":"sync"}', "reserved attribute"),
        ('{"role":"admin"}', "'role' is not on the allowlist"),
        ('{"tenant_id":NaN}', "not a finite number"),
        ('{"tenant_id":1e400}', "not a finite number"),
        ('{"tenant_id":99999999999999999999}', "signed 64-bit range"),
        ('{"tenant_id":"a","tenant_id":"b"}', "appears twice"),
    ],
    ids=stable_id,
)
def test_payloads_that_are_not_an_allowlisted_context_are_rejected(payload: str, match: str) -> None:
    with pytest.raises(OperationContextError, match=match):
        JsonOperationContextSerializer(["tenant_id"]).deserialize(payload)


def test_operation_attribute_names_are_non_empty_strings() -> None:
    with pytest.raises(TypeError, match="not a string"):
        Operation(object(), attributes={1: "x"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="cannot be empty"):
        Operation(object(), attributes={"": "x"})
