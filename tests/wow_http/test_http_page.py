"""The "Serving over HTTP" page, run as a reader runs it: ``accounts.py`` of Getting
started (the Account of the Aggregates page) under ``wow run`` with HTTP enabled, then
every ``<!-- http: run -->`` example of the page (curl and ``wow send``) against it, each
answer compared with the one the page shows."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.docs.test_snippets import ROOT
from tests.service_members import Member
from tests.services import free_port
from tests.wow_http.test_http_processes import url_of

pytestmark = pytest.mark.slow

PAGE = ROOT / "docs" / "http.md"
EXAMPLE = re.compile(
    r"<!-- http: run -->\n```bash\n(?P<command>.*?)```\n\n```(?P<kind>json|text)\n(?P<answer>.*?)```", re.S
)


def examples() -> list[tuple[str, str, str]]:
    return [
        (m.group("command"), m.group("kind"), m.group("answer")) for m in EXAMPLE.finditer(PAGE.read_text())
    ]


def accounts_module() -> str:
    """``accounts.py`` as Getting started has the reader write it."""
    page = (ROOT / "docs" / "domain" / "aggregates.md").read_text()
    aggregate = re.search(r"```python[^\n]*\n(.*?)```", page, re.S)
    assert aggregate is not None
    return (
        aggregate.group(1) + '\nfrom wow_core import WowApp\n\napp = WowApp("bank", aggregates=[Account])\n'
    )


def contains(actual: Any, documented: Any) -> bool:
    """Whether ``actual`` has everything ``documented`` shows (the page abridges)."""
    if isinstance(documented, dict):
        return isinstance(actual, dict) and all(
            key in actual and contains(actual[key], value) for key, value in documented.items()
        )
    return bool(actual == documented)


def test_the_page_has_examples_of_commands_queries_streams_and_wow_send() -> None:
    commands = " ".join(command for command, _, _ in examples())
    assert len(examples()) >= 8
    for needed in ("/state", "Wow-Request-Id", "text/event-stream", "wow send"):
        assert needed in commands


def test_every_example_of_the_page_answers_as_shown(tmp_path: Path) -> None:
    (tmp_path / "accounts.py").write_text(accounts_module())
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    env |= {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(tmp_path),
        "WOW_HTTP__ENABLED": "true",
        "WOW_HTTP__PORT": str(port),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    }
    member = Member("accounts", env, app="accounts:app")
    try:
        asyncio.run(url_of(member))
        for command, kind, answer in examples():
            script = command.replace("localhost:8080", f"127.0.0.1:{port}")
            ran = subprocess.run(
                ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
            )
            assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
            if kind == "json":
                documented = [json.loads(line) for line in _json_values(answer)]
                actual = [json.loads(line) for line in _json_values(ran.stdout)]
                assert len(actual) == len(documented), (command, ran.stdout)
                for got, shown in zip(actual, documented, strict=True):
                    assert contains(got, shown), (command, got, shown)
            else:
                shown = [line for line in answer.splitlines() if line.startswith("event:")]
                got = [line for line in ran.stdout.splitlines() if line.startswith("event:")]
                assert got == shown, (command, ran.stdout)
    finally:
        assert member.stop() == 0, "".join(member.lines[-20:])


def _json_values(text: str) -> list[str]:
    """The JSON values of ``text``, one after the other (each may span lines)."""
    decoder = json.JSONDecoder()
    values, index, text = [], 0, textwrap.dedent(text).strip()
    while index < len(text):
        value, end = decoder.raw_decode(text, index)
        values.append(json.dumps(value))
        index = end
        while index < len(text) and text[index].isspace():
            index += 1
    return values
