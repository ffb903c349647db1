"""mkdocs hook: render the configuration reference from the settings model at build time.

A page containing the marker ``<!-- wow:settings-reference -->`` gets, in its place, one
table for :class:`~wow_core.runtime.settings.WowSettings` and one per settings section a
discovered plugin registers. Every row is read from the model (variable, specification
key, type, default, description), so the page cannot drift from the code.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from wow_core.plugins import load_plugins
from wow_core.runtime.settings import ENV_PREFIX, NESTED, WowSettings

MARKER = "<!-- wow:settings-reference -->"


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(arg) for arg in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _constraints(field: FieldInfo) -> str:
    words = []
    for item in field.metadata:
        for attribute, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attribute, None)
            if value is not None:
                words.append(f"{symbol} {value}")
    return f" ({', '.join(words)})" if words else ""


def _default(field: FieldInfo) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    else:
        return "*required*"
    if isinstance(value, SecretStr | SecretBytes):
        return "*secret*" if value.get_secret_value() else '`""`'
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" else f"`{value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{json.dumps(value)}`"


def _rows(model: type[BaseModel], variable: str, key: str) -> Iterator[str]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            below = f"{key}{name.replace('_', '-')}."
            yield from _rows(annotation, f"{variable}{name.upper()}{NESTED}", below)
            continue
        description = (field.description or "").replace("|", "\\|").replace("\n", " ")
        yield (
            f"| `{variable}{name.upper()}` | `{key}{name.replace('_', '-')}` "
            f"| `{_type_name(annotation)}`{_constraints(field)} | {_default(field)} | {description} |"
        )


def _table(model: type[BaseModel], variable: str, key: str) -> str:
    header = "| Variable | Specification key | Type | Default | Description |"
    return "\n".join([header, "| --- | --- | --- | --- | --- |", *_rows(model, variable, key)])


def render() -> str:
    parts = ["### Core settings", "", _table(WowSettings, ENV_PREFIX, "wow."), ""]
    registry = load_plugins()
    sections = registry.all("settings")
    parts += ["### Plugin sections", ""]
    if not sections:
        parts += ["No installed plugin contributes a settings section.", ""]
    for registration in sections:
        origin = registration.origin
        parts += [
            f"#### `{registration.name}` ({origin.distribution})",
            "",
            f"Contributed by plugin `{origin.plugin}` of `{origin.distribution}` {origin.version}.",
            "",
            _table(
                registration.value,
                f"{ENV_PREFIX}{registration.name.upper()}{NESTED}",
                f"wow.{registration.name}.",
            ),
            "",
        ]
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
