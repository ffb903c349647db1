"""The documentation and the examples import wow-core only from its public surfaces.

``wow_core`` for services, ``wow_core.application`` for application commands,
``wow_core.spi`` for plugin authors, ``wow_core.testing`` for test helpers and the
conformance suites, and the examples that ship with wow-core (``wow_core.examples.bank``,
which the pages import as a reader of the installed package does): a reader who copies
a page never depends on a module path that is not meant to be used.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.docs.test_snippets import ROOT, SNIPPETS

PUBLIC = {"wow_core", "wow_core.application", "wow_core.spi", "wow_core.testing"}
EXAMPLES = "wow_core.examples."


def _sources() -> list[tuple[str, str]]:
    sources = [(snippet.label, snippet.source) for snippet in SNIPPETS]
    for path in sorted((ROOT / "examples").rglob("*.py")):
        sources.append((str(path.relative_to(ROOT)), path.read_text()))
    return sources


def _wow_core_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "wow_core":
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "wow_core"]
    return found


SOURCES = _sources()


def test_the_pages_and_the_examples_import_wow_core() -> None:
    assert sum(bool(_wow_core_imports(source)) for _, source in SOURCES) > 10
    assert any(label.startswith("plugins/wow_nats/README.md") for label, _ in SOURCES)


@pytest.mark.parametrize(("label", "source"), SOURCES, ids=[label for label, _ in SOURCES])
def test_only_the_public_surfaces_are_imported(label: str, source: str) -> None:
    private = [
        module
        for module in _wow_core_imports(source)
        if module not in PUBLIC and not module.startswith(EXAMPLES)
    ]
    assert not private, f"{label} imports {', '.join(private)}; use {', '.join(sorted(PUBLIC))}"


def test_the_examples_are_found() -> None:
    assert Path(ROOT / "examples" / "bank" / "app.py") in set((ROOT / "examples").rglob("*.py"))
