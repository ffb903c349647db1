"""wow_core's sub-packages form layers: no import cycle between them.

Every module of ``wow_core`` is parsed (not imported); each ``import`` statement that can
run counts, at module level and inside functions (a function-level import is how a
cycle is usually hidden, and it runs as soon as the function does). Imports under
``if TYPE_CHECKING:`` do not count: they never run, and naming a type of a higher layer
in an annotation is not an import cycle. A node is a direct child of ``wow_core``: a
sub-package (``wow_core.event``) or a top-level module (``wow_core.metrics``).

A second test checks the consequence that matters to plugin authors: the concepts below
the runtime, and the settings modules of the transport plugins, import without loading
``wow_core.runtime`` at all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import wow_core

ROOT = Path(wow_core.__file__).parent


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(imported module, line) of every import that can run, at any depth."""
    found: list[tuple[str, int]] = []
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from wow_core import event`` imports the sub-package ``event``.
            submodules = [
                f"{target}.{alias.name}" for alias in node.names if _is_module(f"{target}.{alias.name}")
            ]
            found.extend((name, node.lineno) for name in submodules or [target])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _node(module: str, nodes: set[str]) -> str | None:
    parts = module.split(".")
    if parts[0] != "wow_core" or len(parts) < 2 or parts[1] not in nodes:
        return None
    return parts[1]


def import_graph() -> dict[str, dict[str, list[str]]]:
    """node -> imported node -> the imports making that edge (``module:line -> target``)."""
    nodes = {path.stem if path.is_file() else path.name for path in ROOT.iterdir()}
    nodes = {name for name in nodes if not name.startswith(("_", "."))}
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(ROOT.rglob("*.py")):
        module, is_package = _module_name(path)
        source = _node(module, nodes)
        if source is None:
            continue
        for target, line in _imports(ast.parse(path.read_text(), str(path)), module, is_package):
            node = _node(target, nodes)
            if node is not None and node != source:
                graph[source][node].append(f"{module}:{line} -> {target}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _path_back(start: str, members: set[str], graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """The shortest path inside ``members`` from ``start`` back to ``start``."""
    paths = {target: [start, target] for target in graph.get(start, {}) if target in members}
    queue = list(paths)
    while start not in paths:
        node = queue.pop(0)
        for target in graph.get(node, {}):
            if target in members and target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return paths[start]


def _describe(component: list[str], graph: dict[str, dict[str, list[str]]]) -> str:
    members = set(component)
    lines = [" -> ".join(_path_back(component[0], members, graph)) + ":"]
    for source in component:
        for target, imports in sorted(graph[source].items()):
            if target in members:
                lines.extend(f"    {source} -> {target}: {why}" for why in imports)
    return "\n".join(lines)


def test_the_walk_counts_imports_that_run_and_skips_type_checking_ones() -> None:
    source = """
from typing import TYPE_CHECKING
import wow_core.metrics
from . import kernel
from ..command import stages
from wow_core import context

if TYPE_CHECKING:
    from wow_core.runtime.runtime import WowRuntime
else:
    from wow_core import plugins

def later() -> None:
    from wow_core.transport.in_memory import InMemoryTransport
"""
    found = {name for name, _ in _imports(ast.parse(source), "wow_core.modeling.dispatcher", False)}
    assert {
        "wow_core.metrics",
        "wow_core.modeling.kernel",
        "wow_core.command.stages",
        "wow_core.context",
        "wow_core.plugins",
        "wow_core.transport.in_memory",
    } <= found
    assert not any(name.startswith("wow_core.runtime") for name in found)


def test_a_cycle_is_found_and_named() -> None:
    graph = {
        "a": {"b": ["wow_core.a.x:1 -> wow_core.b.y"]},
        "b": {"c": ["wow_core.b.y:2 -> wow_core.c"]},
        "c": {"a": ["wow_core.c:3 -> wow_core.a"], "d": ["wow_core.c:4 -> wow_core.d"]},
        "d": {},
    }
    assert cycles(graph) == [["a", "b", "c"]]
    assert _describe(["a", "b", "c"], graph).splitlines()[0] == "a -> b -> c -> a:"


def test_no_import_cycle_between_the_sub_packages_of_wow_core() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles between wow_core's sub-packages:\n" + "\n".join(
        _describe(component, graph) for component in found
    )


def test_concepts_below_the_runtime_and_plugin_settings_import_without_the_runtime() -> None:
    modules = [
        "wow_core.settings",
        "wow_core.command",
        "wow_core.modeling",
        "wow_core.event",
        "wow_core.eventsourcing",
        "wow_core.messaging.local_first",
        "wow_core.transport",
        "wow_core.plugins",
        "wow_core.application",
        "wow_kafka.settings",
        "wow_redis.settings",
        "wow_nats.settings",
        "wow_postgres.settings",
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('wow_core.runtime')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


TYPE_ONLY_RUNTIME_REFERENCES = {
    "wow_core.event.runtime": "install_event_dispatch installs the pipeline into a WowRuntime",
    "wow_core.plugins.commands": "a Command's run receives the CLI's Invocation",
}
"""The only modules below the runtime that name it, for type checking only, and why."""


def _runtime_imports(path: Path, module: str, is_package: bool, *, type_checking: bool) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    if type_checking:
        names = [
            (target, node.lineno)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and _is_type_checking(node.test)
            for child in node.body
            for target, _ in _imports(ast.Module(body=[child], type_ignores=[]), module, is_package)
        ]
    else:
        names = _imports(tree, module, is_package)
    return [f"{module}:{line} -> {target}" for target, line in names if target.startswith("wow_core.runtime")]


def test_below_the_runtime_only_the_known_annotations_name_it() -> None:
    found: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module, is_package = _module_name(path)
        if module.startswith("wow_core.runtime") or module == "wow_core":
            continue  # ``wow_core`` itself is the user surface above every layer (lazy names)
        references = _runtime_imports(path, module, is_package, type_checking=True)
        if references:
            found[module] = references
    assert sorted(found) == sorted(TYPE_ONLY_RUNTIME_REFERENCES), found


def test_transport_plugins_never_import_the_runtime() -> None:
    import wow_kafka
    import wow_nats
    import wow_redis

    found = []
    for package in (wow_kafka, wow_redis, wow_nats):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            module = ".".join(parts[:-1] if is_package else parts)
            for type_checking in (False, True):
                found += _runtime_imports(path, module, is_package, type_checking=type_checking)
    assert not found, "transport plugins importing wow_core.runtime:\n" + "\n".join(found)


def test_the_postgres_plugin_names_the_runtime_only_in_the_annotations_of_its_command() -> None:
    import wow_postgres

    root = Path(wow_postgres.__file__).parent
    running: list[str] = []
    annotations: list[str] = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        running += _runtime_imports(path, module, is_package, type_checking=False)
        annotations += _runtime_imports(path, module, is_package, type_checking=True)
    assert not running, "wow_postgres importing wow_core.runtime:\n" + "\n".join(running)
    assert {entry.split(":")[0] for entry in annotations} <= {"wow_postgres.cli"}
