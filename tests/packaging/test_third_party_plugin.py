"""A plugin distribution built outside the workspace, installed like any other package.

The distribution is ``examples/carrier_pigeon`` (the recipe of docs/plugins/authoring.md),
copied to a temporary folder and installed into a fresh environment beside the
``wow-core`` wheel. Two more throwaway distributions show the two plugin errors.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.packaging.conftest import ROOT, Venv

pytestmark = pytest.mark.slow

USE_THE_TRANSPORT = """
import asyncio, json
from wow_core.runtime.container import create_container
from wow_core.transport.spi import TransportMessage

async def main():
    container = create_container()
    transport = container.transport()
    receiver = transport.open("readers", ["wow.post.letter.event"])
    await receiver.ready()
    receiver.open_processing()
    await transport.send(TransportMessage("wow.post.letter.event", "letter-1", '{"hello": 1}', 1))
    record = await asyncio.wait_for(anext(aiter(receiver)), 5)
    await receiver.close()
    print(json.dumps({
        "class": type(transport).__module__ + "." + type(transport).__name__,
        "loft": transport.settings.loft,
        "received": [record.topic, record.key, record.payload],
    }))

asyncio.run(main())
"""


def _distribution(folder: Path, name: str, module: str, plugin: str, body: str) -> Path:
    source = folder / name
    package = source / "src" / module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(body)
    (source / "pyproject.toml").write_text(
        f"""[project]
name = "{name}"
version = "1.2.3"
dependencies = ["wow-core"]

[project.entry-points.wow]
{plugin} = "{module}.plugin"

[build-system]
requires = ["hatchling>=1.27"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]
"""
    )
    return source


@pytest.fixture(scope="module")
def pigeon_venv(
    wheelhouse: dict[str, Path], make_venv: Callable[[str], Venv], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Venv]:
    source = tmp_path_factory.mktemp("src") / "carrier_pigeon"
    shutil.copytree(
        ROOT / "examples" / "carrier_pigeon", source, ignore=shutil.ignore_patterns("__pycache__")
    )
    venv = make_venv("pigeon")
    venv.install(wheelhouse["wow-core"], source)
    yield venv
    venv.uninstall("wow-carrier-pigeon")


def test_wow_transport_selects_the_third_party_transport(pigeon_venv: Venv, tmp_path: Path) -> None:
    result = pigeon_venv.script(
        USE_THE_TRANSPORT,
        cwd=tmp_path,
        extra_env={"WOW_TRANSPORT": "carrier_pigeon", "WOW_PIGEON__LOFT": "rooftop"},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["class"] == "wow_carrier_pigeon.transport.PigeonTransport"
    assert report["loft"] == "rooftop"
    assert report["received"] == ["wow.post.letter.event", "letter-1", '{"hello": 1}']


def test_the_cli_shows_the_plugin_and_its_section(pigeon_venv: Venv, tmp_path: Path) -> None:
    listed = pigeon_venv.command("wow", "plugins", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    registrations = json.loads(listed.stdout)["registrations"]
    assert {
        "kind": "transport",
        "name": "carrier_pigeon",
        "plugin": "carrier_pigeon",
        "distribution": "wow-carrier-pigeon",
        "version": "0.3.0",
    } in registrations
    shown = pigeon_venv.command(
        "wow",
        "settings",
        cwd=tmp_path,
        extra_env={"WOW_PIGEON__RING_CODE": "s3cret", "WOW_TRANSPORT": "carrier_pigeon"},
    )
    assert shown.returncode == 0, shown.stderr
    assert "WOW_TRANSPORT=carrier_pigeon" in shown.stdout.splitlines()
    assert "WOW_PIGEON__RING_CODE=**********" in shown.stdout.splitlines()
    assert "s3cret" not in shown.stdout


def test_without_the_setting_the_default_transport_is_kept(pigeon_venv: Venv, tmp_path: Path) -> None:
    result = pigeon_venv.script(
        "from wow_core.runtime.container import create_container, selected_name\n"
        "c = create_container(); print(selected_name(c.settings(), 'transport'))",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "in_memory"


RIVAL = """
from wow_core.plugins import hookimpl

@hookimpl
def register_transports(register):
    register("carrier_pigeon", lambda settings: None)
"""

BROKEN = """
import wow_pigeon_feed  # not installed: this plugin cannot import
"""


@contextlib.contextmanager
def _installed_beside(venv: Venv, folder: Path, name: str, plugin: str, body: str) -> Iterator[None]:
    """Install a throwaway plugin distribution (version 1.2.3) for the ``with`` block."""
    venv.install(_distribution(folder, name, name.replace("-", "_"), plugin, body))
    try:
        yield
    finally:
        venv.uninstall(name)


def _wow_plugins_fails(venv: Venv, cwd: Path) -> str:
    """Run ``wow plugins``; it must exit 2 with a message and no traceback. Returns stderr."""
    result = venv.command("wow", "plugins", cwd=cwd)
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr
    return result.stderr


def test_two_plugins_claiming_one_name_fail_naming_both_distributions(
    pigeon_venv: Venv, tmp_path: Path
) -> None:
    with _installed_beside(pigeon_venv, tmp_path, "wow-rival-pigeon", "rival_pigeon", RIVAL):
        error = _wow_plugins_fails(pigeon_venv, tmp_path)
    assert "two plugins register the transport 'carrier_pigeon'" in error
    assert "wow-carrier-pigeon 0.3.0" in error
    assert "wow-rival-pigeon 1.2.3" in error


def test_two_distributions_declaring_one_plugin_name_are_both_named(
    pigeon_venv: Venv, tmp_path: Path
) -> None:
    with _installed_beside(pigeon_venv, tmp_path, "wow-pigeon-clone", "carrier_pigeon", RIVAL):
        error = _wow_plugins_fails(pigeon_venv, tmp_path)
    assert "two distributions declare the plugin 'carrier_pigeon'" in error
    assert "wow-carrier-pigeon" in error
    assert "wow-pigeon-clone" in error


def test_a_plugin_that_fails_to_import_is_named_with_its_distribution(
    pigeon_venv: Venv, tmp_path: Path
) -> None:
    with _installed_beside(pigeon_venv, tmp_path, "wow-broken-loft", "broken_loft", BROKEN):
        error = _wow_plugins_fails(pigeon_venv, tmp_path)
        in_code = pigeon_venv.script(
            "from wow_core.plugins import PluginImportError, load_plugins\n"
            "try:\n    load_plugins()\nexcept PluginImportError as e:\n    print(e)",
            cwd=tmp_path,
        )
    assert "plugin 'broken_loft' of wow-broken-loft 1.2.3" in error
    assert "ModuleNotFoundError" in error
    assert "wow_pigeon_feed" in error
    assert "plugin 'broken_loft' of wow-broken-loft 1.2.3" in in_code.stdout
