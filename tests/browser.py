"""The headless browser of the browser tests: Debian's ``chromium``, driven by Playwright.

Playwright downloads no browser here: the tests launch ``/usr/bin/chromium`` through
``executable_path``. Without it a test skips with the reason, unless ``CI=true``
(``.ci/run`` installs the package), where it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu"]


def chromium_path() -> Path:
    """The chromium executable, or skip (fail on CI) saying how to install it."""
    if not CHROMIUM.exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{CHROMIUM} is missing on CI (.ci/run installs the chromium package)")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y --no-install-recommends chromium)")
    return CHROMIUM
