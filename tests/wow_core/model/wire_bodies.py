"""The command body the wire tests encode and decode: a plain int and a plain string.

Unlike :class:`tests.accounts.Deposit` it has no field constraint, so a negative or a
very large amount reaches the codec's own limits instead of the body's validation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Deposit:
    amount: int
    note: str = ""
