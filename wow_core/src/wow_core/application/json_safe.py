"""The strict JSON both serializers share: what a JSON-safe value is, and an encoder and
a decoder that fail closed instead of converting.

A JSON-safe value is ``None``, a ``bool``, an ``int`` in the signed 64-bit range, a
finite ``float``, a ``str`` of Unicode scalar values (no lone surrogate), a ``list`` of
JSON-safe values or a ``dict`` with ``str`` keys and JSON-safe values, of exactly those
types (a subclass such as an ``IntEnum`` or a ``str`` subclass is an object: it would
come back as its base type), without a cycle and at most ``max_depth`` containers deep.

The wire keeps ``int`` and ``float`` apart (``1`` and ``1.0``), and keeps the sign of
zero (``-0.0``). The 64-bit bound is the wire contract with consumers in other
languages: a larger integer is refused on the way out and on the way in, never turned
into a float. :func:`encode` checks its own output by decoding it and comparing with
exact types (:func:`same`), so a lossy conversion is an error rather than a silent
change.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
_MAX_INT_DIGITS = 20  # a longer token cannot be in range; checked before int() parses it

DEFAULT_MAX_DEPTH = 32
"""How many containers deep a value may nest unless a setting says otherwise."""

ErrorType: TypeAlias = Callable[[str], Exception]


def describe_type(value: object) -> str:
    if callable(value):
        return f"a callable ({type(value).__name__})"
    return f"an object of type {type(value).__qualname__}"


def check_value(
    value: object, where: str, error: ErrorType, max_depth: int = DEFAULT_MAX_DEPTH, envelope: bool = False
) -> None:
    """Raise ``error(message)`` unless ``value`` is JSON-safe (see the module docstring).

    With ``envelope``, ``value`` is the object that holds the fields: it does not count
    towards ``max_depth``."""
    _check(value, where, error, max_depth, -1 if envelope else 0, set())


def _check(value: object, where: str, error: ErrorType, max_depth: int, depth: int, path: set[int]) -> None:
    kind = type(value)
    if value is None or kind is bool:
        return
    if kind is str and isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise error(f"{where}: a string with a lone surrogate is not valid Unicode") from None
        return
    if kind is int and isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise error(f"{where}: the integer is outside the signed 64-bit range of the wire")
        return
    if kind is float and isinstance(value, float):
        if not math.isfinite(value):
            raise error(f"{where}: {value!r} is not a finite number")
        return
    if (kind is list and isinstance(value, list)) or (kind is dict and isinstance(value, dict)):
        if id(value) in path:
            raise error(f"{where}: a cycle (the container contains itself)")
        if depth >= max_depth:
            raise error(f"{where}: nested deeper than {max_depth} containers")
        path.add(id(value))
        try:
            if isinstance(value, list):
                for index, element in enumerate(value):
                    _check(element, f"{where}[{index}]", error, max_depth, depth + 1, path)
            else:
                for key, item in value.items():
                    if type(key) is not str:
                        raise error(f"{where}: a key of type {type(key).__name__}; keys are strings")
                    _check(item, f"{where}[{_short(key)}]", error, max_depth, depth + 1, path)
        finally:
            path.discard(id(value))
        return
    raise error(f"{where}: {describe_type(value)} is not JSON-safe")


def _short(key: str) -> str:
    return repr(key if len(key) <= 40 else key[:40] + "...")


def same(left: object, right: object) -> bool:
    """Structural equality that tells ``1``, ``1.0`` and ``True`` apart, and ``0.0`` from ``-0.0``."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float) and isinstance(right, float):
        return left == right and math.copysign(1.0, left) == math.copysign(1.0, right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    return left == right


def encode(
    value: object, where: str, error: ErrorType, max_depth: int = DEFAULT_MAX_DEPTH, envelope: bool = False
) -> str:
    """``value`` as compact JSON, after :func:`check_value`; the output is decoded again
    and must equal ``value`` exactly, or this raises."""
    check_value(value, where, error, max_depth, envelope)
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if not same(decode(text, where, error, max_depth, envelope), value):
        raise error(f"{where}: the JSON encoding does not restore the same value")
    return text


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a finite number")


def _parse_int(token: str) -> int:
    if len(token.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError("an integer outside the signed 64-bit range of the wire")
    number = int(token)
    if not INT_MIN <= number <= INT_MAX:
        raise ValueError("an integer outside the signed 64-bit range of the wire")
    return number


def _parse_float(token: str) -> float:
    number = float(token)
    if not math.isfinite(number):
        raise ValueError(f"{token[:40]} is not a finite number")
    return number


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, item in pairs:
        if key in result:
            raise ValueError(f"the key {_short(key)} appears twice")
        result[key] = item
    return result


def decode(
    text: object, where: str, error: ErrorType, max_depth: int = DEFAULT_MAX_DEPTH, envelope: bool = False
) -> Any:
    """Parse ``text`` strictly: no ``NaN``/``Infinity``, no duplicate key, integers in the
    64-bit range, then :func:`check_value` (depth, Unicode)."""
    if type(text) is not str:
        raise error(f"{where}: the payload is {describe_type(text)}, not a string")
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
            object_pairs_hook=_no_duplicates,
        )
    except RecursionError:
        raise error(f"{where}: nested deeper than {max_depth} containers") from None
    except ValueError as cause:
        raise error(f"{where}: not accepted JSON: {cause}") from None
    check_value(value, where, error, max_depth, envelope)
    return value
