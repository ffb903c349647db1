"""mkdocs hook: render the configuration reference from the settings model at build time.

A page containing the marker ``<!-- wow:settings-reference -->`` gets, in its place, one
table for :class:`~wow_core.runtime.settings.WowSettings` and one per settings section a
discovered plugin registers. Every row is read from the model (variable, specification
key, type and bounds, default, description), so the page cannot drift from the code.
Under each table, the bounds its model applies to every value (finite numbers, the
longest text).

Every page gets its settings names marked for the browser: an inline ``WOW_A__B__C`` or
``wow.a.b-c`` becomes ``<code class="wow-name">`` with one unbreakable part per
segment, so a narrow column breaks a name only after a ``__`` or a ``.``
(``docs/stylesheets/wow.css``), never in the middle of a word. The text copies unchanged.
"""

from __future__ import annotations

import html
import json
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from wow_core.plugins import load_plugins
from wow_core.runtime.settings import WowSettings
from wow_core.settings import ENV_PREFIX, NESTED

MARKER = "<!-- wow:settings-reference -->"
# inline code holding exactly one settings name: a variable with nested parts, or a dotted key
NAME = re.compile(r"<code>(WOW_[A-Z0-9_]*?__[A-Z0-9_]+|wow\.[a-z0-9_-]+(?:\.[a-z0-9_-]+)*)</code>")
WHOLE = 24
PART = re.compile(r".+?(?:__|\.|$)")


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
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


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _bounds(metadata: list[Any], unit: str) -> list[str]:
    words = []
    shortest = longest = None
    for item in metadata:
        for attribute, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attribute, None)
            if value is not None:
                words.append(f"{symbol} {_number(value)}")
        shortest = getattr(item, "min_length", None) or shortest
        longest = getattr(item, "max_length", None) or longest
    if shortest is not None and longest is not None:
        words.append(f"{shortest} to {longest} {unit}")
    elif longest is not None:
        words.append(f"at most {longest} {unit}")
    elif shortest is not None:
        words.append(f"at least {shortest} {unit}")
    return words


def _constraints(field: FieldInfo) -> str:
    annotation = field.annotation
    candidates = [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        candidates = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    base = typing.get_origin(candidates[0]) or candidates[0]
    unit = "items" if base in (list, set, tuple, dict) else "characters"
    words = _bounds(field.metadata, unit)
    for arg in candidates:
        if typing.get_origin(arg) is typing.Annotated:
            for item in arg.__metadata__:
                words += _bounds(item.metadata if isinstance(item, FieldInfo) else [item], unit)
    return f" ({', '.join(words)})" if words else ""


def _model_bounds(model: type[BaseModel]) -> str:
    """What the model's configuration bounds for every value, as a sentence (or nothing)."""
    config = model.model_config
    words = []
    if config.get("allow_inf_nan") is False:
        words.append("every number is finite (`inf` and `nan` are refused)")
    longest = config.get("str_max_length")
    if longest is not None:
        words.append(f"every text value is at most {longest} characters long unless its row says less")
    return ("Bounds: " + "; ".join(words) + ".") if words else ""


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
        # a description is text: "<name>" is a placeholder, not an HTML tag
        description = html.escape(field.description or "", quote=False).replace("|", "\\|").replace("\n", " ")
        yield (
            f"| `{variable}{name.upper()}` | `{key}{name.replace('_', '-')}` "
            f"| `{_type_name(annotation)}`{_constraints(field)} | {_default(field)} | {description} |"
        )


def _table(model: type[BaseModel], variable: str, key: str) -> str:
    header = "| Variable | Specification key | Type | Default | Description |"
    bounds = _model_bounds(model)
    table = [header, "| --- | --- | --- | --- | --- |", *_rows(model, variable, key)]
    return "\n".join([*table, "", bounds] if bounds else table)


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


def mark_name(name: str) -> str:
    """``<code class="wow-name">`` with a break opportunity after each ``__`` or ``.``
    (none in a name of at most :data:`WHOLE` characters)."""
    # a name of up to WHOLE characters is one part: short names stay on one line
    parts = [name] if len(name) <= WHOLE else PART.findall(name)
    spans = "<wbr>".join(f"<span>{html.escape(part)}</span>" for part in parts)
    # the longest part, in characters of the code's font: a table column is never narrower
    longest = max(len(part) for part in parts)
    return f'<code class="wow-name" style="--wow-longest: {longest}ch">{spans}</code>'


def on_page_content(content: str, **kwargs: Any) -> str:
    return NAME.sub(lambda match: mark_name(html.unescape(match.group(1))), content)
