"""Small helpers for the messages of the runtime and the ``wow`` command."""

from __future__ import annotations


def a_type_name(value: object) -> str:
    """The name of the type of ``value`` with its indefinite article: ``a str``, ``an int``."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
