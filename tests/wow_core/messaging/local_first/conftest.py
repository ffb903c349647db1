from __future__ import annotations

import pytest

from tests.wow_core.messaging.local_first.local_first_doubles import (
    ControlledLocalBus,
    RecordingDistributedBus,
)
from wow_core.context import MetricsSourceCapture
from wow_core.messaging.local_first import LocalFirstCommandBus
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import MetricsMiddleware
from wow_core.model import TopicKind
from wow_core.runtime.settings import LocalFirstSettings


@pytest.fixture
def local() -> ControlledLocalBus:
    return ControlledLocalBus()


@pytest.fixture
def distributed() -> RecordingDistributedBus:
    return RecordingDistributedBus()


@pytest.fixture
def metrics() -> InMemoryMetrics:
    return InMemoryMetrics()


@pytest.fixture
def settings() -> LocalFirstSettings:
    return LocalFirstSettings()


@pytest.fixture
def bus(
    local: ControlledLocalBus,
    distributed: RecordingDistributedBus,
    metrics: InMemoryMetrics,
    settings: LocalFirstSettings,
) -> LocalFirstCommandBus:
    return LocalFirstCommandBus(
        local,  # type: ignore[arg-type]
        distributed,  # type: ignore[arg-type]
        settings=settings,
        observer=MetricsMiddleware(metrics).observe_local_first(TopicKind.COMMAND),
        captures=[MetricsSourceCapture()],
    )


# The Kafka scenarios of test_integration reuse the session broker of the Kafka tests.
from tests.wow_kafka.conftest import kafka_bootstrap  # noqa: E402, F401
