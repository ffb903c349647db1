"""The runtime makes its receivers ready at once: a start that joins several consumer
groups waits for one group join, not for one per group (each join waits for the broker's
rebalance delay: tansu holds a joining group for half the session timeout, Kafka for
``group.initial.rebalance.delay.ms``)."""

from __future__ import annotations

import importlib
import time

import pytest

from tests.wow_kafka.conftest import unique
from wow_core.runtime.assembly import build_runtime
from wow_kafka import KafkaSettings, KafkaTransport

pytestmark = pytest.mark.kafka


async def _one_join(settings: KafkaSettings) -> float:
    """Seconds one receiver of a new group takes to be ready (its topic made beforehand)."""
    transport = KafkaTransport(settings)
    try:
        topic = f"{settings.topic_prefix}startup.alone.command"
        await transport.topics.ensure([topic])
        receiver = transport.open(unique("alone"), [topic])
        began = time.monotonic()
        await receiver.ready()
        took = time.monotonic() - began
        await receiver.close()
        return took
    finally:
        await transport.close()


async def test_the_runtime_joins_its_consumer_groups_at_once(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    join = await _one_join(kafka_settings)
    settings = kafka_settings
    monkeypatch.setenv("WOW_TRANSPORT", "kafka")
    monkeypatch.setenv("WOW_KAFKA__BOOTSTRAP_SERVERS", settings.bootstrap_servers)
    monkeypatch.setenv("WOW_KAFKA__TOPIC_PREFIX", unique("startup") + ".")
    for name in ("session_timeout_ms", "heartbeat_interval_ms", "request_timeout_ms", "poll_timeout_ms"):
        monkeypatch.setenv(f"WOW_KAFKA__{name.upper()}", str(getattr(settings, name)))
    monkeypatch.setenv("WOW_KAFKA__FETCH_MAX_WAIT_MS", "20")
    app = importlib.import_module("wow_core.examples.bank.app").app
    runtime = build_runtime(app)
    began = time.monotonic()
    await runtime.start()
    took = time.monotonic() - began
    try:
        (transport,) = [t for t in runtime.transports if isinstance(t, KafkaTransport)]
        groups = {receiver.group for receiver in transport._open_receivers()}
        # the command dispatcher, the event processors, the saga, the projection, the snapshots
        assert len(groups) >= 4, groups
        # one after another: about len(groups) joins
        assert took < 2 * join + 1.0, f"{len(groups)} groups joined in {took:.2f}s, one alone in {join:.2f}s"
    finally:
        assert await runtime.stop()
