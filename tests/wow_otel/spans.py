"""Reading finished spans as a tree, for the tracing tests (in one process or many)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Node:
    """One span: its ids, name, kind, attributes, events, and the spans under it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str
    attributes: dict[str, Any]
    events: list[str]
    children: list[Node] = field(default_factory=list)

    def find(self, name: str) -> list[Node]:
        """Every span named ``name`` under this one (depth first), this one included."""
        found = [self] if self.name == name else []
        for child in self.children:
            found += child.find(name)
        return found

    def child(self, name: str) -> Node:
        matches = [c for c in self.children if c.name == name]
        names = [c.name for c in self.children]
        assert len(matches) == 1, f"{self.name}: children {names}, wanted one {name}"
        return matches[0]

    def text(self, depth: int = 0) -> str:
        outcome = self.attributes.get("wow.outcome")
        line = "  " * depth + f"{self.name} [{self.kind}]" + (f" {outcome}" if outcome else "")
        if self.events:
            line += f" events={self.events}"
        return "\n".join([line, *(c.text(depth + 1) for c in self.children)])


def from_sdk(spans: Iterable[Any]) -> list[Node]:
    """Nodes of SDK ``ReadableSpan`` objects."""
    nodes = []
    for span in spans:
        context = span.get_span_context()
        parent = span.parent
        nodes.append(
            Node(
                format(context.trace_id, "032x"),
                format(context.span_id, "016x"),
                format(parent.span_id, "016x") if parent is not None else None,
                span.name,
                span.kind.name,
                dict(span.attributes or {}),
                [event.name for event in span.events],
            )
        )
    return nodes


def trees(nodes: Iterable[Node]) -> list[Node]:
    """The roots: spans whose parent is not among ``nodes`` (children linked in)."""
    by_id = {node.span_id: node for node in nodes}
    roots = []
    for node in sorted(by_id.values(), key=lambda n: n.name):
        parent = by_id.get(node.parent_id) if node.parent_id else None
        if parent is None:
            roots.append(node)
        else:
            parent.children.append(node)
    return roots
