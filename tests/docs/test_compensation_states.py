"""The state diagram of the compensation page is drawn offline from its mermaid source
(``docs/compensation/states.mmd`` by ``docs/compensation/states.py``) and names what the
``ExecutionFailed`` aggregate has."""

from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import ModuleType

import pytest

from wow_compensation import model
from wow_compensation.model import ExecutionFailedStatus

ROOT = Path(__file__).resolve().parents[2]


def drawing() -> ModuleType:
    spec = importlib.util.spec_from_file_location("states", ROOT / "docs/compensation/states.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_svg_is_what_the_script_draws_from_the_mermaid_source() -> None:
    committed = (ROOT / "docs/compensation/states.svg").read_text(encoding="utf-8")
    assert committed == drawing().render(), "run: python docs/compensation/states.py"
    ElementTree.fromstring(committed)  # well-formed


def test_the_diagram_has_the_aggregate_states_and_commands() -> None:
    edges = drawing().parse((ROOT / "docs/compensation/states.mmd").read_text(encoding="utf-8"))
    states = {name for edge in edges for name in edge[:2]} - {"[*]"}
    assert states == {status.value for status in ExecutionFailedStatus}
    named = {name for _, _, label in edges for name in re.findall(r"\((\w+)\)", label)}
    assert named
    for name in named:
        assert hasattr(model, name), f"{name} is not a command of wow_compensation.model"


def test_a_source_the_script_cannot_draw_is_refused() -> None:
    with pytest.raises(ValueError, match="stateDiagram-v2"):
        drawing().parse("graph TD\n A --> B")
    with pytest.raises(ValueError, match="not a transition"):
        drawing().parse("stateDiagram-v2\n    state FAILED {")
