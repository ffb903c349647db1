"""The API reference pages cover each public surface exactly (docs/hooks/api_reference.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
api_reference = importlib.import_module("api_reference")


@pytest.mark.parametrize("surface", ["wow_core", "wow_core.application", "wow_core.spi", "wow_core.testing"])
def test_every_exported_name_has_a_block_at_its_defining_module(surface: str) -> None:
    module = importlib.import_module(surface)
    rendered = api_reference.render(surface)
    exports = getattr(module, "_EXPORTS", None) or {
        name: getattr(getattr(module, name), "__module__", surface) for name in module.__all__
    }
    for name, defined in exports.items():
        if name.isupper() or name.startswith("_"):
            continue
        assert getattr(importlib.import_module(defined), name) is getattr(module, name)
        assert f"::: {defined}.{name}\n" in rendered, (surface, name, defined)


def test_each_surface_has_its_page() -> None:
    for page, surface in [
        ("api.md", "wow_core"),
        ("api-application.md", "wow_core.application"),
        ("api-spi.md", "wow_core.spi"),
        ("api-testing.md", "wow_core.testing"),
    ]:
        assert f"<!-- wow:api-reference {surface} -->" in (ROOT / "docs" / "reference" / page).read_text()
