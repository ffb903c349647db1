from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``WOW_*`` variable of the calling shell and no stray ``.env`` leak into a test."""
    for name in list(os.environ):
        if name.startswith("WOW_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path
