"""``wow run module:app`` with an error in the user's module (issue 11, item 12): one line
naming the file, the line and the error, exit status 2; the traceback only with
``--debug`` or ``--log-level DEBUG``. Each case runs ``wow`` as a subprocess in a
directory holding the user's module, as a user runs it."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from wow_core.runtime.serve import error_location

WOW = Path(sys.executable).with_name("wow")

VALID_AGGREGATE = """
from dataclasses import dataclass

from wow_core.modeling import aggregate, on_command, on_sourcing


@dataclass(frozen=True)
class State:
    count: int = 0


@dataclass(frozen=True)
class Add:
    amount: int


@dataclass(frozen=True)
class Added:
    amount: int


@aggregate("shop", "counter", state=State)
class Counter:
    @on_command
    async def add(self, state: State, command: Add) -> Added:
        return Added(command.amount)

    @on_sourcing
    def added(self, state: State, event: Added) -> State:
        return State(state.count + event.amount)
"""

MODULES = {
    "syntax": ("x = 1\ndef broken(:\n    pass\n", "syntax.py", 2, "SyntaxError: invalid syntax"),
    "raises": (
        "x = 1\n\nraise RuntimeError('no database configured')\n",
        "raises.py",
        3,
        "RuntimeError: no database configured",
    ),
    "imports": (
        "from helpers import tools\n",
        "helpers/tools.py",
        2,
        "ModuleNotFoundError: No module named 'not_installed_xyz'",
    ),
    "aggregate": (
        "from dataclasses import dataclass\n"
        "from wow_core.modeling import aggregate\n"
        "from wow_core.runtime.app import WowApp\n\n"
        "@dataclass\nclass State:\n    n: int = 0\n\n"
        "@aggregate('shop', 'cart', state=State)\nclass Cart:\n    pass\n\n"
        "app = WowApp('shop', aggregates=[Cart])\n",
        "aggregate.py",
        9,  # the definition of Cart starts at its decorator
        "AggregateDefinitionError: Cart has no @on_command function",
    ),
    "cycle": (
        VALID_AGGREGATE
        + textwrap.dedent(
            """
            from wow_core.event import EventDispatchOptions, order
            from wow_core.runtime.app import WowApp


            @order(before=["Second"])
            class First:
                async def filter(self, exchange, next):
                    await next(exchange)


            @order(before=["First"])
            class Second:
                async def filter(self, exchange, next):
                    await next(exchange)


            events = EventDispatchOptions(filters=[First(), Second()])
            app = WowApp("shop", aggregates=[Counter], events=events)
            """
        ),
        "cycle.py",
        0,
        "FilterCycleError: filter order constraints form a cycle: ",
    ),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, (source, _, _, _) in MODULES.items():
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "helpers" / "tools.py").write_text(
        "import json\nimport not_installed_xyz\n", encoding="utf-8"
    )
    return tmp_path


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    return subprocess.run(
        [str(WOW), "run", *args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.mark.parametrize("name", list(MODULES))
def test_an_error_in_the_users_module_is_one_line_naming_file_line_and_error(
    project: Path, name: str
) -> None:
    _, file, line, error = MODULES[name]
    result = _run(project, f"{name}:app")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (message,) = result.stderr.splitlines()
    assert message.startswith(f"wow run: {name}:app: "), message
    assert error in message
    # While the app is built a check of the framework raises: the place is the user's definition it names.
    if not line:
        source = (project / file).read_text().splitlines()
        line = next(i for i, text in enumerate(source) if text.startswith("class Second"))  # its decorator
    assert f"{project / file}, line {line}: " in message, message


def test_the_app_module_that_does_not_exist_is_named_without_a_file(project: Path) -> None:
    result = _run(project, "no_such_module_xyz:app")
    assert result.returncode == 2
    (message,) = result.stderr.splitlines()
    assert message == "wow run: cannot import 'no_such_module_xyz': No module named 'no_such_module_xyz'"


@pytest.mark.parametrize("flags", [["--debug"], ["--log-level", "DEBUG"]], ids=["debug", "log-level"])
def test_the_traceback_is_shown_only_on_request(project: Path, flags: list[str]) -> None:
    result = _run(project, *flags, "raises:app")
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("wow run: raises:app: ")


def test_a_frame_of_a_compiled_extension_is_not_taken_for_the_users_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Cython frame (dependency-injector's ``src/dependency_injector/providers.pxd``, a
    relative name of a file that is not on disk) between the framework's frames is not the
    user's code: the place named is a file that exists."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile("def call(f):\n    return f()\n", "src/fake_ext/providers.pxd", "exec"), namespace)
    try:
        namespace["call"](functools.partial(json.loads, "{"))
    except json.JSONDecodeError as error:
        location = error_location(error)
    assert "providers.pxd" not in location, location
    assert location.startswith(f"{__file__}, line "), location
