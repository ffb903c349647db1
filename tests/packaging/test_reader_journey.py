"""A new user's first service, from the documentation alone, with only the built wheels.

The install command is read from docs/installation.md ("From built wheels") and run into
a fresh environment, with the session's wheelhouse as its ``dist`` folder. Then, in an
empty folder, the complete files of docs/getting-started.md (read from the page, not
copied) are written under their names, and the page's commands are run: the kit's tests
with pytest (the ``[test]`` extra brought it, and the ``wow_test_runtime`` fixture comes
from wow-core's pytest plugin), the script that sends commands (its output is the one the
page shows), and ``wow run accounts:app`` until SIGINT.
"""

from __future__ import annotations

import queue
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.docs.test_snippets import snippets_of
from tests.packaging.conftest import ROOT, Venv

pytestmark = pytest.mark.slow

INSTALLATION = ROOT / "docs" / "installation.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
DIST_PLACEHOLDER = "/path/to/wow-py/dist"


def _install_arguments(wheelhouse: Path) -> list[str]:
    """The arguments of the page's ``pip install --find-links ...`` line, with our dist."""
    lines = [
        line.strip()
        for line in INSTALLATION.read_text().splitlines()
        if line.strip().startswith("pip install --find-links")
    ]
    assert len(lines) == 1, lines
    arguments = shlex.split(lines[0])[2:]
    assert DIST_PLACEHOLDER in arguments, arguments
    return [str(wheelhouse) if argument == DIST_PLACEHOLDER else argument for argument in arguments]


def _shown_output(command: str) -> str:
    """The output the page shows under ``$ command`` in a console block."""
    match = re.search(
        rf"^\$ {re.escape(command)}\n(?P<out>.*?)\n```", GETTING_STARTED.read_text(), re.M | re.S
    )
    assert match is not None, f"the page shows no output of {command!r}"
    return match.group("out")


def _serve_until_sigint(venv: Venv, folder: Path) -> tuple[int, list[str]]:
    process = subprocess.Popen(
        [str(venv.path / "bin" / "wow"), "run", "accounts:app"],
        cwd=folder,
        env=venv.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    seen: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            seen.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while not any("serving bank" in line for line in lines):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or process.poll() is not None:
                raise AssertionError("wow run accounts:app did not serve:\n" + "\n".join(lines))
            try:
                lines.append(seen.get(timeout=min(remaining, 1.0)))
            except queue.Empty:
                continue
        process.send_signal(signal.SIGINT)
        code = process.wait(60)
    finally:
        process.kill()
        process.wait(10)
    while not seen.empty():
        lines.append(seen.get())
    return code, lines


def test_a_new_user_writes_tests_and_runs_the_getting_started_service_from_the_wheels(
    wheelhouse: dict[str, Path], make_venv: Callable[[str], Venv], tmp_path: Path
) -> None:
    dist = next(iter(wheelhouse.values())).parent
    venv = make_venv("reader")
    venv.install(*_install_arguments(dist))

    folder = tmp_path / "my-service"
    folder.mkdir()
    files = [s for s in snippets_of(GETTING_STARTED.read_text(), GETTING_STARTED) if s.complete]
    names = [s.filename for s in files]
    assert names[:3] == ["accounts.py", "test_accounts.py", "open_accounts.py"], names
    for snippet in files:
        (folder / snippet.filename).write_text(snippet.source)

    tests = venv.command(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_accounts.py", cwd=folder
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert re.search(r"\b4 passed\b", tests.stdout), tests.stdout

    sent = venv.command("python", "open_accounts.py", cwd=folder)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == _shown_output("python open_accounts.py").strip()

    for snippet in files[3:]:
        ran = venv.command("python", snippet.filename, cwd=folder)
        assert ran.returncode == 0, f"{snippet.label}: {ran.stdout}\n{ran.stderr}"

    code, lines = _serve_until_sigint(venv, folder)
    assert code == 0, "\n".join(lines)
    assert any("stopped cleanly" in line for line in lines), "\n".join(lines)

    # wow-py came from the wheels, into the environment: nothing of the checkout
    where = venv.script("import wow_core, pytest_asyncio; print(wow_core.__file__)", cwd=folder)
    assert where.returncode == 0, where.stderr
    assert str(venv.path) in where.stdout
    assert str(ROOT) not in where.stdout
