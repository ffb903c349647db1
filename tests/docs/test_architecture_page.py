"""The architecture page draws the layers of wow_core as the code has them.

The diagram ``docs/architecture/layers.svg`` is drawn by ``docs/architecture/layers.py``
from its ``LAYERS``; these tests hold the drawing to the import graph that
``tests/wow_core/test_import_layers.py`` walks.
"""

from __future__ import annotations

import ast
import importlib.util
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import ModuleType

import wow_core
from tests.wow_core.test_import_layers import import_graph

ROOT = Path(__file__).resolve().parents[2]
CORE = Path(wow_core.__file__).parent
NOT_DRAWN: dict[str, str] = {}


def drawing() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layers", ROOT / "docs/architecture/layers.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows() -> dict[str, int]:
    return {name: row for row, (_, packages) in enumerate(drawing().LAYERS) for name, _ in packages}


def test_the_committed_svg_is_what_the_script_draws() -> None:
    committed = (ROOT / "docs/architecture/layers.svg").read_text(encoding="utf-8")
    assert committed == drawing().draw(), "run: python docs/architecture/layers.py"


def test_the_svg_is_well_formed_and_names_every_package() -> None:
    svg = ElementTree.parse(ROOT / "docs/architecture/layers.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert svg.get("viewBox")
    texts = {element.text for element in svg.iter("{http://www.w3.org/2000/svg}text")}
    assert set(rows()) | {"wow_core", "wow_core.spi"} <= texts


def test_every_import_between_packages_points_to_a_lower_row() -> None:
    drawn = rows()
    upward = [
        f"{source} (row {drawn[source]}) -> {target} (row {drawn[target]}): {why[0]}"
        for source, targets in import_graph().items()
        for target, why in targets.items()
        if drawn[source] <= drawn[target]
    ]
    assert not upward, "\n".join(upward)


def test_every_package_and_top_level_module_of_wow_core_is_drawn() -> None:
    children = {path.stem if path.is_file() else path.name for path in CORE.iterdir()}
    children = {
        name
        for name in children
        if not name.startswith(("_", ".")) and name not in {"py", "spi"}  # py.typed; spi is on top
    }
    assert children - set(NOT_DRAWN) == set(rows())


def test_the_packages_left_out_hold_nothing_yet() -> None:
    for name in NOT_DRAWN:
        package = CORE / name
        assert [path.name for path in package.glob("*.py")] == ["__init__.py"]
        tree = ast.parse((package / "__init__.py").read_text())
        assert len(tree.body) == 1
        assert isinstance(tree.body[0], ast.Expr)
