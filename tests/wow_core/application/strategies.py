"""Hypothesis strategies of JSON-safe values, and an equality that tells 1, 1.0 and True apart."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)  # includes -0.0, subnormals, extremes
TEXT = st.text(max_size=12)  # hypothesis draws no surrogates by default
SCALARS = st.none() | st.booleans() | INT64 | FLOATS | TEXT

JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)


def exactly(left: Any, right: Any) -> bool:
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        return left == right and math.copysign(1, left) == math.copysign(1, right)
    if isinstance(left, list):
        return len(left) == len(right) and all(exactly(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(exactly(left[k], right[k]) for k in left)
    return bool(left == right)


def exactly_fields(left: object, right: object, names: list[str]) -> bool:
    return type(left) is type(right) and all(exactly(getattr(left, n), getattr(right, n)) for n in names)
