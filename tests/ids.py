"""Test ids that are the same in every process.

pytest-xdist requires every worker to collect the same test ids; ``repr`` of a
function, of an ``object()`` or of a set of classes differs between processes
(addresses, hash order). ``stable_id`` names such values by what they are.
"""

from __future__ import annotations

import types
from typing import Any


def stable_id(value: Any) -> str:
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType):
        return f"<function {value.__qualname__}>"
    if isinstance(value, set | frozenset):
        return "{" + ", ".join(sorted(stable_id(item) for item in value)) + "}"
    if isinstance(value, type):
        return value.__qualname__
    if type(value).__repr__ is object.__repr__:
        return f"<{type(value).__qualname__}>"
    return repr(value)
