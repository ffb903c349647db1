"""Fixtures that build real wheels and real virtual environments (``slow`` tests).

Wheels are built once per run (``uv build --all-packages``) and reused; each environment
is a fresh ``uv venv`` whose third-party dependencies come from the package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = {
    "wow-py": ".",
    "wow-core": "wow_core",
    "wow-kafka": "wow_kafka",
    "wow-redis": "wow_redis",
    "wow-otel": "wow_otel",
    "wow-compensation": "wow_compensation",
    "wow-nats": "plugins/wow_nats",
    "wow-http": "plugins/wow_http",
    "wow-postgres": "plugins/wow_postgres",
}


def _uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.fail("uv is not on PATH: the packaging tests need it (./scripts/test installs it)")
    return found


def run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command; fail the test with its output when it fails."""
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """distribution name -> its freshly built wheel (every workspace member, once per run)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    run(_uv(), "build", "--all-packages", "--wheel", "--out-dir", out, cwd=ROOT)
    wheels: dict[str, Path] = {}
    for wheel in out.glob("*.whl"):
        distribution = wheel.name.split("-")[0].replace("_", "-")
        wheels[distribution] = wheel
    return wheels


@dataclass(frozen=True)
class Venv:
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def env(self) -> dict[str, str]:
        """A clean environment: this venv first on PATH, no WOW_* of the caller."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WOW_", "VIRTUAL_ENV", "PYTHON"))}
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.path)
        return env

    def install(self, *requirements: str | Path) -> None:
        run(_uv(), "pip", "install", "--python", self.python, *requirements)

    def uninstall(self, *distributions: str) -> None:
        run(_uv(), "pip", "uninstall", "--python", self.python, *distributions)

    def script(
        self, code: str, *, cwd: Path, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.command("python", "-c", code, cwd=cwd, extra_env=extra_env)

    def command(
        self, program: str, *args: str, cwd: Path, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = self.env | (extra_env or {})
        return subprocess.run(
            [str(self.path / "bin" / program), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="session")
def make_venv(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Venv]:
    def make(name: str) -> Venv:
        path = tmp_path_factory.mktemp("venvs") / name
        run(_uv(), "venv", "--quiet", "--python", sys.executable, path)
        return Venv(path)

    return make
