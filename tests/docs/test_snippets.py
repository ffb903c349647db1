"""The Python snippets of the documentation.

Every ```python block of every page (and of the READMEs the pages include) must parse,
with top-level ``await`` allowed. Every import from a wow-py package (and from the
libraries the pages use with it) must name something that exists, so a renamed class
breaks this test rather than a reader's first try. The blocks preceded by the marker
``<!-- snippet: run -->`` are executed, in page order, in one module per page: those are
the examples a reader can paste and run.

Blocks that include a file (``--8<--``) are checked through that file.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_MARK = "<!-- snippet: run -->"
# Imports from these top-level packages are resolved; others (a reader's own module,
# ``my_transport``) are placeholders.
CHECKED_PACKAGES = {
    "wow_core",
    "wow_kafka",
    "wow_redis",
    "wow_nats",
    "wow_otel",
    "wow_compensation",
    "examples",
    "benchmarks",
    "dependency_injector",
    "pydantic",
    "pytest",
}
FENCE = re.compile(r"^(?P<indent> *)```python[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
INCLUDE = re.compile(r'--8<--\s*"?(?P<path>[^"\s]+)"?')


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    source: str
    run: bool

    @property
    def label(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _pages() -> list[Path]:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    included: set[Path] = set()
    for page in pages:
        for match in re.finditer(r'^--8<-- "(?P<path>[^"]+\.md)"', page.read_text(), re.M):
            included.add(ROOT / match.group("path"))
    return pages + sorted(included)


def _snippets(page: Path) -> list[Snippet]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        body = match.group("body")
        indent = len(match.group("indent"))
        source = "\n".join(line[indent:] for line in body.splitlines())
        include = INCLUDE.search(source) if source.lstrip().startswith("--8<--") else None
        if include is not None:
            source = (ROOT / include.group("path")).read_text()
        before = text[: match.start()].rstrip().splitlines()
        run = bool(before) and before[-1].strip() == RUN_MARK
        found.append(Snippet(page, text.count("\n", 0, match.start()) + 1, source, run))
    return found


SNIPPETS = [snippet for page in _pages() for snippet in _snippets(page)]
RUNNABLE_PAGES = sorted({s.page for s in SNIPPETS if s.run})


def test_the_pages_have_snippets_and_some_run() -> None:
    assert len(SNIPPETS) > 20
    assert len(RUNNABLE_PAGES) >= 3


def _compile(snippet: Snippet) -> types.CodeType:
    return compile(snippet.source, snippet.label, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.label for s in SNIPPETS])
def test_every_snippet_parses_and_imports_what_exists(snippet: Snippet) -> None:
    try:
        _compile(snippet)
    except SyntaxError as error:
        pytest.fail(f"{snippet.label}: the snippet does not parse: {error}")
    for node in ast.walk(ast.parse(snippet.source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in CHECKED_PACKAGES:
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                found = alias.name == "*" or hasattr(module, alias.name)
                assert found or _is_submodule(node.module, alias.name), (
                    f"{snippet.label}: {node.module} has no {alias.name}"
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in CHECKED_PACKAGES:
                    importlib.import_module(alias.name)


def _is_submodule(package: str, name: str) -> bool:
    try:
        importlib.import_module(f"{package}.{name}")
    except ImportError:
        return False
    return True


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The snippets run as on a fresh machine: no WOW_* variable, no .env, the examples importable."""
    for name in list(os.environ):
        if name.startswith("WOW_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE_PAGES])
async def test_the_runnable_snippets_of_a_page_run_in_order(page: Path) -> None:
    name = "docs_snippets_" + re.sub(r"\W", "_", str(page.relative_to(ROOT)))
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses and pydantic resolve annotations through it
    try:
        for snippet in (s for s in SNIPPETS if s.page == page and s.run):
            result = eval(_compile(snippet), module.__dict__)  # our own pages
            if inspect.iscoroutine(result):
                await result
    finally:
        del sys.modules[name]
