"""mkdocs hook: the API reference of a public surface, rendered by mkdocstrings.

A page containing ``<!-- wow:api-reference SURFACE -->`` (``wow_core``, ``wow_core.spi``
or ``wow_core.testing``) gets, in its place, one ``:::`` block per name the surface
exports, pointing at the module that defines it, grouped as the surface's export table
groups them. mkdocstrings then renders each from its signature and docstring, so the
reference is exactly the surface a reader may import, and a name added to a surface is
documented in the next build.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

MARKER = re.compile(r"<!-- wow:api-reference (?P<surface>[\w.]+) -->")


def _exports(surface: str) -> dict[str, str]:
    module = importlib.import_module(surface)
    exports = getattr(module, "_EXPORTS", None)
    if isinstance(exports, dict):
        return {name: target for name, target in exports.items() if isinstance(target, str)}
    names = getattr(module, "__all__", ())
    found = {}
    for name in names:
        value = getattr(module, name)
        found[name] = getattr(value, "__module__", surface) or surface
    return found


def render(surface: str) -> str:
    blocks = []
    for name, module in sorted(_exports(surface).items(), key=lambda item: (item[1], item[0])):
        if name.isupper() or name.startswith("_"):
            continue  # constants are described on the pages that use them
        blocks.append(f"::: {module}.{name}\n    options:\n      heading_level: 3\n")
    return "\n".join(blocks)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return MARKER.sub(lambda match: render(match.group("surface")), markdown)
