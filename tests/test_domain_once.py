"""The bank account the tests share is written once, in :mod:`tests.accounts`.

A test that needs another shape of one of its classes keeps that variant local; each
variant is listed here with the reason it exists, so a new copy fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ACCOUNT_CLASSES = {
    "Account",
    "AccountState",
    "Open",
    "Deposit",
    "Withdraw",
    "Opened",
    "Deposited",
    "Withdrawn",
}
VARIANTS = {
    ("wow_core/model/wire_bodies.py", "Deposit"): "no constraint: the codec's limits are tested",
    ("wow_core/model/test_wire_round_trip.py", "Deposit"): "a tuple field, so tuples round-trip",
    ("wow_core/model/test_wire_round_trip.py", "AccountState"): "a list field, so lists round-trip",
    ("wow_core/model/test_wire_limits.py", "Open"): "a pydantic model that keeps extra fields",
}


def definitions() -> set[tuple[str, str]]:
    found = set()
    for path in TESTS.rglob("*.py"):
        relative = path.relative_to(TESTS).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if isinstance(node, ast.ClassDef) and node.name in ACCOUNT_CLASSES:
                found.add((relative, node.name))
    return found


def test_the_account_classes_are_defined_in_tests_accounts_or_are_listed_variants() -> None:
    elsewhere = {found for found in definitions() if found[0] != "accounts.py"}
    assert elsewhere == set(VARIANTS)


def test_tests_accounts_defines_every_account_class() -> None:
    assert {name for path, name in definitions() if path == "accounts.py"} == ACCOUNT_CLASSES
