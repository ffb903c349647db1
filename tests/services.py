"""The loopback services the broker tests use (Redis, PostgreSQL): reachable or not.

A folder of tests for a service that is down skips, except with ``CI=true``, where its
tests run and fail (CI must never prove nothing).
"""

from __future__ import annotations

import os
import shutil
import socket

import pytest


def reachable(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def free_port() -> int:
    """A loopback port free now (bound, then released): nothing listens on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def installed(name: str) -> str:
    """The path of the server binary ``name`` (``redis-server``, ``nats-server``); a test
    that needs one skips without it, except with ``CI=true``, where it fails."""
    found = shutil.which(name)
    if found is None:
        if in_ci():
            pytest.fail(f"{name} is not installed")
        pytest.skip(f"{name} is not installed")
    return found


def skip_folder_unless_reachable(items: list[pytest.Item], folder: str, name: str, port: int) -> None:
    """Mark the tests under ``folder`` skipped when ``name`` is down and CI is not set."""
    if in_ci() or reachable(port):
        return
    skip = pytest.mark.skip(reason=f"{name} is not reachable on 127.0.0.1:{port}")
    for item in items:
        if folder in str(item.fspath):
            item.add_marker(skip)
