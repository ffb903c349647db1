"""Every member builds its own wheel; ``wow-core`` installs alone, without any broker client."""

from __future__ import annotations

import json
import tomllib
import zipfile
from collections.abc import Callable
from email.parser import Parser
from pathlib import Path

import pytest

from tests.packaging.conftest import MEMBERS, ROOT, Venv

pytestmark = pytest.mark.slow

FOREIGN = ["aiokafka", "redis", "nats", "asyncpg", "opentelemetry", "fastapi", "uvicorn"]


def _metadata(wheel: Path) -> tuple[dict[str, list[str]], str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        headers = Parser().parsestr(archive.read(meta).decode())
        points = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
        entry_points = archive.read(points).decode() if points else ""
    fields: dict[str, list[str]] = {}
    for key, value in headers.items():
        fields.setdefault(key, []).append(value)
    return fields, entry_points


def _description(wheel: Path) -> str:
    """The long description (the README) in a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(meta).decode())
    payload = message.get_payload()
    assert isinstance(payload, str)
    return payload


def test_every_member_builds_its_own_wheel_from_its_own_pyproject(wheelhouse: dict[str, Path]) -> None:
    assert set(wheelhouse) == set(MEMBERS)
    for distribution, folder in MEMBERS.items():
        project = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]
        fields, entry_points = _metadata(wheelhouse[distribution])
        assert fields["Name"] == [distribution]
        assert fields["Version"] == [project["version"]]
        declared = project.get("dependencies", [])
        required = [r for r in fields.get("Requires-Dist", []) if "extra ==" not in r]
        assert len(required) == len(declared), (distribution, required, declared)
        for name in project.get("entry-points", {}).get("wow", {}):
            assert f"{name} = " in entry_points.split("[wow]", 1)[1], (distribution, name)
        # every member carries its own README: its description on the index
        readme = ROOT / folder / "README.md"
        assert readme.is_file(), f"{distribution} has no README.md"
        assert project.get("readme") == "README.md", distribution
        assert fields.get("Description-Content-Type") == ["text/markdown"], distribution
        title = readme.read_text().splitlines()[0]
        assert title in _description(wheelhouse[distribution]), (distribution, title)


def test_each_wheel_holds_only_its_own_package(wheelhouse: dict[str, Path]) -> None:
    for distribution, wheel in wheelhouse.items():
        with zipfile.ZipFile(wheel) as archive:
            tops = {
                name.split("/")[0] for name in archive.namelist() if ".dist-info" not in name.split("/")[0]
            }
        expected = set() if distribution == "wow-py" else {distribution.replace("-", "_")}
        # (wow-core carries the bank example as wow_core.examples.bank: still its own package)
        assert tops == expected, (distribution, tops)


def test_the_umbrella_declares_the_extras(wheelhouse: dict[str, Path]) -> None:
    fields, _ = _metadata(wheelhouse["wow-py"])
    assert set(fields["Provides-Extra"]) == {
        "kafka",
        "redis",
        "nats",
        "http",
        "postgres",
        "otel",
        "compensation",
        "test",
        "all",
    }


PROBE = """
import importlib.metadata, importlib.util, json
import wow_core
from wow_core.runtime.container import create_container
from wow_core.runtime.settings import WowSettings
container = create_container(WowSettings())
print(json.dumps({
    "version": wow_core.__version__,
    "found": {m: importlib.util.find_spec(m) is not None for m in %r},
    "distributions": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
    "metrics": type(container.metrics()).__name__,
}))
"""


def test_wow_core_alone_installs_without_broker_clients_or_opentelemetry(
    wheelhouse: dict[str, Path], make_venv: Callable[[str], Venv], tmp_path: Path
) -> None:
    venv = make_venv("core-alone")
    venv.install(wheelhouse["wow-core"])
    result = venv.script(PROBE % FOREIGN, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["version"] == "0.1.0"
    assert report["found"] == dict.fromkeys(FOREIGN, False)
    installed = set(report["distributions"])
    assert "wow-core" in installed
    assert not installed & {
        "aiokafka", "redis", "nats-py", "asyncpg", "opentelemetry-api", "opentelemetry-sdk", "fastapi",
        "uvicorn",
    }  # fmt: skip
    assert not {d for d in installed if d.startswith("wow-") and d != "wow-core"}
    assert report["metrics"] == "NoopMetrics"
    plugins = venv.command("wow", "plugins", "--json", cwd=tmp_path)
    assert plugins.returncode == 0, plugins.stderr
    assert {p["distribution"] for p in json.loads(plugins.stdout)["plugins"]} == {"wow-core"}
    # the bank example ships in the wheel: the demo runs in an empty folder
    demo = venv.command("wow", "demo", "--accounts", "3", "--transfers", "4", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert "wow demo: the bank service" in demo.stdout


def test_an_extra_of_the_umbrella_pulls_its_member_in(
    wheelhouse: dict[str, Path], make_venv: Callable[[str], Venv], tmp_path: Path
) -> None:
    venv = make_venv("umbrella-redis")
    venv.install(f"{wheelhouse['wow-py']}[redis]", wheelhouse["wow-core"], wheelhouse["wow-redis"])
    result = venv.script(PROBE % FOREIGN, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["found"] == {
        "aiokafka": False,
        "redis": True,
        "nats": False,
        "asyncpg": False,
        "opentelemetry": False,
        "fastapi": False,
        "uvicorn": False,
    }
    assert {"wow-py", "wow-core", "wow-redis"} <= set(report["distributions"])


def test_the_http_plugin_installs_from_its_wheel_and_registers_through_the_entry_point(
    wheelhouse: dict[str, Path], make_venv: Callable[[str], Venv], tmp_path: Path
) -> None:
    venv = make_venv("http")
    venv.install(wheelhouse["wow-core"], wheelhouse["wow-http"])
    plugins = venv.command("wow", "plugins", "--json", cwd=tmp_path)
    assert plugins.returncode == 0, plugins.stderr
    registered = {
        (r["kind"], r["name"])
        for r in json.loads(plugins.stdout)["registrations"]
        if r["distribution"] == "wow-http"
    }
    assert registered == {
        ("settings", "http"),
        ("runtime_installer", "http"),
        ("wait_notifier", "http"),
        ("command", "openapi"),
        ("command", "send"),
    }
    (tmp_path / "shop.py").write_text(
        "from dataclasses import dataclass\n"
        "from wow_core import WowApp, aggregate, on_command, on_sourcing\n"
        "@dataclass(frozen=True)\nclass Cart:\n    items: int = 0\n"
        "@dataclass(frozen=True)\nclass AddItem:\n    sku: str\n"
        "@dataclass(frozen=True)\nclass ItemAdded:\n    sku: str\n"
        "@aggregate('shop', 'cart', state=Cart)\nclass CartAggregate:\n"
        "    @on_command(allow_create=True)\n"
        "    def add(self, state: Cart, body: AddItem) -> ItemAdded:\n        return ItemAdded(body.sku)\n"
        "    @on_sourcing\n"
        "    def added(self, state: Cart, event: ItemAdded) -> Cart:\n        return Cart(state.items + 1)\n"
        "app = WowApp('shop', aggregates=[CartAggregate])\n"
    )
    document = venv.command("wow", "openapi", "shop:app", cwd=tmp_path)
    assert document.returncode == 0, document.stderr
    assert "/shop/cart/{id}/AddItem" in json.loads(document.stdout)["paths"]


def test_the_postgres_extra_pulls_the_plugin_and_asyncpg_and_registers_its_command(
    wheelhouse: dict[str, Path], make_venv: Callable[[str], Venv], tmp_path: Path
) -> None:
    venv = make_venv("umbrella-postgres")
    venv.install(f"{wheelhouse['wow-py']}[postgres]", wheelhouse["wow-core"], wheelhouse["wow-postgres"])
    result = venv.script(PROBE % FOREIGN, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["found"] == {**dict.fromkeys(FOREIGN, False), "asyncpg": True}
    plugins = venv.command("wow", "plugins", "--json", cwd=tmp_path)
    assert plugins.returncode == 0, plugins.stderr
    assert "wow-postgres" in {p["distribution"] for p in json.loads(plugins.stdout)["plugins"]}
    usage = venv.command("wow", "postgres", "--help", cwd=tmp_path)
    assert usage.returncode == 0, usage.stderr
    assert "migrate" in usage.stdout
