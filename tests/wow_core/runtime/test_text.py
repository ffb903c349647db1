"""The article in "is a str" / "is an int" messages."""

from __future__ import annotations

import pytest

from wow_core.runtime._text import a_type_name


@pytest.mark.parametrize(
    ("value", "expected"),
    [(42, "an int"), ("x", "a str"), (object(), "an object"), (None, "a NoneType"), ([], "a list")],
)
def test_the_article_follows_the_type_name(value: object, expected: str) -> None:
    assert a_type_name(value) == expected
