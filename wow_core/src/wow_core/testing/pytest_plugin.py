"""The pytest plugin of wow-core (entry point ``pytest11: wow_conformance``).

It is loaded by every pytest run where wow-core is installed and only defines fixtures;
tests run only where a module subclasses a suite:

* ``wow_transport_factory``: override it; returns a callable that makes a new transport
  (a new client of the same broker) on each call, sync or async.
* ``wow_bus_factory``: the :class:`~wow_core.testing.support.BusFactory` of
  ``MessageBusConformance``; by default the ``Transport*Bus`` buses over
  ``wow_transport_factory``.
* ``wow_conformance_timeout``: seconds every wait of the suite may take
  (``WOW_CONFORMANCE_TIMEOUT``, default 10); raise it for a slow broker.
* ``wow_conformance_context``: the unique bounded context of one test; every topic and
  group of the test is named under it, so a fixture can clean up by that prefix.
* ``wow_test_runtime``: a factory of started in-process runtimes of a ``WowApp`` on the
  in-memory default (:class:`~wow_core.testing.spec.TestRuntime`):
  ``runtime = await wow_test_runtime(app)``; each is stopped after the test.
* ``wow_rig``: the :class:`~wow_core.testing.support.Rig` a test works with; it closes
  every receiver, bus and transport it handed out.

The suites and ``wow_test_runtime`` need pytest-asyncio (``pip install "wow-py[test]"``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

TIMEOUT_ENV = "WOW_CONFORMANCE_TIMEOUT"
DEFAULT_TIMEOUT = 10.0


@pytest.fixture
def wow_transport_factory() -> Any:
    """Override in your test class or conftest: ``return lambda: MyTransport(...)``."""
    pytest.fail(
        "the wow conformance suite needs a transport: override the `wow_transport_factory` fixture "
        "to return a callable that makes a new transport (see docs/transports/conformance.md)",
        pytrace=False,
    )


@pytest.fixture
def wow_bus_factory() -> Any:
    from wow_core.testing.support import TransportBusFactory

    return TransportBusFactory()


@pytest.fixture
def wow_conformance_timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "")
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise pytest.UsageError(f"{TIMEOUT_ENV}={raw!r} is not accepted: give seconds, e.g. 30") from None
    if value <= 0:
        raise pytest.UsageError(f"{TIMEOUT_ENV}={raw!r} is not accepted: it must be positive")
    return value


@pytest.fixture
def wow_conformance_context() -> str:
    return "conf" + uuid.uuid4().hex[:12]


NEEDS_PYTEST_ASYNCIO = (
    'the fixture {name} needs pytest-asyncio: pip install "wow-py[test]" (or pytest-asyncio)'
)


def needs_pytest_asyncio(name: str) -> None:
    """Fail the test that asked for ``name``, saying what to install."""
    pytest.fail(NEEDS_PYTEST_ASYNCIO.format(name=name), pytrace=False)


try:
    import pytest_asyncio
except ImportError:  # the suites and the runtime fixture need it; the specifications do not

    def _without_pytest_asyncio(name: str) -> Any:
        """A fixture named ``name`` that fails saying what to install (not "fixture not found")."""

        @pytest.fixture(name=name)
        def fixture() -> None:
            needs_pytest_asyncio(name)

        return fixture

    wow_rig_without_pytest_asyncio = _without_pytest_asyncio("wow_rig")
    wow_test_runtime_without_pytest_asyncio = _without_pytest_asyncio("wow_test_runtime")

else:

    @pytest_asyncio.fixture
    async def wow_rig(
        wow_transport_factory: Any, wow_conformance_timeout: float, wow_conformance_context: str
    ) -> AsyncIterator[Any]:
        from wow_core.testing.support import Rig

        rig = Rig(wow_transport_factory, wow_conformance_timeout, wow_conformance_context)
        try:
            yield rig
        finally:
            await rig.aclose()

    @pytest_asyncio.fixture
    async def wow_test_runtime() -> AsyncIterator[Any]:
        """Start in-process runtimes of apps (``await wow_test_runtime(app, **overrides)``,
        typed :class:`~wow_core.testing.spec.WowTestRuntime`); every one is stopped when the
        test ends. A pytest-asyncio fixture: it works in its strict mode and in auto mode."""
        from wow_core.testing.spec import TestRuntime

        started: list[TestRuntime] = []

        async def start(app: Any, **overrides: Any) -> Any:
            test_runtime = TestRuntime(app, **overrides)
            runtime = await test_runtime.__aenter__()
            started.append(test_runtime)
            return runtime

        try:
            yield start
        finally:
            for test_runtime in reversed(started):
                await test_runtime.__aexit__(None, None, None)
