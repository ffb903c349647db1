"""Fixtures of the wow-otel tests: in-memory OpenTelemetry and the switches."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wow_otel.testing import OtelCapture


@pytest.fixture
def otel() -> Iterator[OtelCapture]:
    with OtelCapture() as capture:
        yield capture


@pytest.fixture
def tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_OTEL__TRACING", "true")
