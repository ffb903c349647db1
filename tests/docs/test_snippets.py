"""The Python snippets of the documentation.

Every ```python block of every page (and of the READMEs the pages include) must parse.
Every import from a wow-py package (and from the libraries the pages use with it) must
name something that exists, so a renamed class breaks this test rather than a reader's
first try.

A block is a **complete file** unless the line before it is the marker
``<!-- snippet: fragment -->`` (an HTML comment: it does not show on the page). A
complete file is what a reader pastes into a file of its own: it is written to a
temporary folder under its title (```` ```python title="accounts.py" ````, which the page
shows as the file's name; an untitled block gets a name of its own), run there as
``python file.py`` (a ``test_*.py`` file with ``python -m pytest``), where a file can
import the files before it, and all of them are type-checked together by one
``mypy --strict``. So a complete file has no top-level ``await`` (it calls
``asyncio.run(main())``) and imports only installed packages and the files before it.
Titles are unique across the docs: the files share one folder.

Blocks that include a file of the repository (``--8<--``) are checked through that file,
where it lives (the repository's own checks cover it); they are not run here.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAGMENT_MARK = "<!-- snippet: fragment -->"
# Imports from these top-level packages are resolved; others (a reader's own module,
# ``my_transport``) are placeholders.
CHECKED_PACKAGES = {
    "wow_core",
    "wow_kafka",
    "wow_redis",
    "wow_nats",
    "wow_otel",
    "wow_compensation",
    "benchmarks",
    "dependency_injector",
    "pydantic",
    "pytest",
}
FENCE = re.compile(r"^(?P<indent> *)```python(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
QUOTED = re.compile(r"^````.*?^````", re.S | re.M)
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
INCLUDE = re.compile(r'--8<--\s*"?(?P<path>[^"\s]+)"?')
RUN_TIMEOUT = 60


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    source: str
    fragment: bool
    included: bool
    title: str | None

    @property
    def label(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def complete(self) -> bool:
        return not self.fragment and not self.included

    @property
    def filename(self) -> str:
        """The name a reader saves it under: its title, or one made from its place."""
        if self.title is not None:
            return self.title
        page = re.sub(r"\W", "_", str(self.page.relative_to(ROOT).with_suffix("")))
        return f"{page}_{self.line}.py"


def _pages() -> list[Path]:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    included: set[Path] = set()
    for page in pages:
        for match in re.finditer(r'^--8<-- "(?P<path>[^"]+\.md)"', page.read_text(), re.M):
            included.add(ROOT / match.group("path"))
    return pages + sorted(included)


def snippets_of(text: str, page: Path) -> list[Snippet]:
    """The python blocks of a page's markdown, with what the page says about each.

    A block inside a four-backtick fence is an example of markdown, not a snippet."""
    text = QUOTED.sub(lambda match: "\n" * match.group(0).count("\n"), text)
    found = []
    for match in FENCE.finditer(text):
        body = match.group("body")
        indent = len(match.group("indent"))
        source = "\n".join(line[indent:] for line in body.splitlines()) + "\n"
        include = INCLUDE.search(source) if source.lstrip().startswith("--8<--") else None
        if include is not None:
            source = (ROOT / include.group("path")).read_text()
        before = text[: match.start()].rstrip().splitlines()
        fragment = bool(before) and before[-1].strip() == FRAGMENT_MARK
        title = TITLE.search(match.group("info"))
        found.append(
            Snippet(
                page,
                text.count("\n", 0, match.start()) + 1,
                source,
                fragment,
                include is not None,
                title.group("title") if title else None,
            )
        )
    return found


SNIPPETS = [snippet for page in _pages() for snippet in snippets_of(page.read_text(), page)]
COMPLETE = [s for s in SNIPPETS if s.complete]


def test_the_pages_have_snippets_and_complete_files() -> None:
    assert len(SNIPPETS) > 20
    assert len(COMPLETE) >= 8


def test_every_complete_file_has_a_name_of_its_own() -> None:
    names = [s.filename for s in COMPLETE]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for snippet in COMPLETE:
        assert snippet.filename.endswith(".py"), snippet.label
        assert "/" not in snippet.filename, f"{snippet.label}: a complete file's title is a file name"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.label for s in SNIPPETS])
def test_every_snippet_parses_and_imports_what_exists(snippet: Snippet) -> None:
    try:
        if snippet.complete:
            compile(snippet.source, snippet.label, "exec")  # no top-level await in a file
        else:
            compile(snippet.source, snippet.label, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as error:
        kind = "complete file" if snippet.complete else "fragment"
        pytest.fail(f"{snippet.label}: the {kind} does not compile: {error} (see {FRAGMENT_MARK})")
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


def test_the_fragment_marker_is_recognised_and_titles_name_files(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    found = snippets_of(
        f'```python title="shop.py"\nx = 1\n```\n\n{FRAGMENT_MARK}\n```python\nawait y\n```\n'
        "```python\nz = 2\n```\n````markdown\n```python\nnot = a snippet\n```\n````\n",
        page,
    )
    assert [(s.title, s.fragment, s.source) for s in found] == [
        ("shop.py", False, "x = 1\n"),
        (None, True, "await y\n"),
        (None, False, "z = 2\n"),
    ]


def _clean_env() -> dict[str, str]:
    """A fresh machine's environment: no WOW_* variable, nothing of the repository on the path."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("WOW_", "PYTHONPATH", "MYPYPATH", "PYTEST_"))
    }


@pytest.fixture(scope="module")
def snippet_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every complete file, written under its name into one folder."""
    folder = tmp_path_factory.mktemp("snippets")
    for snippet in COMPLETE:
        (folder / snippet.filename).write_text(snippet.source)
    return folder


def _command(snippet: Snippet) -> list[str]:
    if snippet.filename.startswith("test_"):
        # only the plugins a reader's `pip install "wow-py[test]"` brings, not the whole
        # development environment's (schemathesis, hypothesis... load for seconds)
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_asyncio.plugin",
                "-p", "wow_core.testing.pytest_plugin", snippet.filename]  # fmt: skip
    return [sys.executable, snippet.filename]


@pytest.fixture(scope="module")
def runs(snippet_folder: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every complete file run in its own process, a few at a time (each imports wow-py and
    its plugins, which takes seconds on a loaded machine): filename -> how it ended."""

    def run(snippet: Snippet) -> subprocess.CompletedProcess[str]:
        env = _clean_env()
        if snippet.filename.startswith("test_"):
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        try:
            return subprocess.run(
                _command(snippet),
                cwd=snippet_folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            return subprocess.CompletedProcess(error.cmd, -1, "", f"timed out after {RUN_TIMEOUT} s")

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip([s.filename for s in COMPLETE], pool.map(run, COMPLETE), strict=True))


@pytest.mark.parametrize("snippet", COMPLETE, ids=[s.label for s in COMPLETE])
def test_a_complete_file_runs_as_a_file(
    snippet: Snippet, runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    result = runs[snippet.filename]
    assert result.returncode == 0, (
        f"{snippet.label}: {' '.join(_command(snippet)[1:])} exited {result.returncode}\n"
        f"{result.stdout}\n{result.stderr}"
    )


def test_the_complete_files_pass_mypy_strict(snippet_folder: Path) -> None:
    """One mypy over them all, as a reader's project would run it (no configuration of ours)."""
    cache = ROOT / ".mypy_cache" / "docs-snippets"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(cache),
            *sorted(p.name for p in snippet_folder.glob("*.py")),
        ],
        cwd=snippet_folder,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
