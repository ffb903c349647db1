"""A PostgreSQL server crashed and restarted mid-stream (a server of the test's own, on
another port) loses no acknowledged append and no acknowledged send: the store and the
transport retry through the outage with backoff."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.wow_postgres import own_server
from wow_core.model import AggregateId, BodyTypeRegistry, MessageCodec
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, make_stream, new_aggregate_id
from wow_core.transport import TransportMessage
from wow_postgres import PostgresEventStore, PostgresSettings, PostgresTransport

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(not own_server.available(), reason="initdb/pg_ctl not found"),
]


@pytest.fixture
def server() -> Iterator[own_server.OwnServer]:
    # Not under pytest's tmp_path: its parents are closed to the postgres user.
    folder = Path(tempfile.mkdtemp(prefix="wow-pg-"))
    try:
        made = own_server.OwnServer(folder)
        made.init()
        made.start()
        try:
            yield made
        finally:
            with contextlib.suppress(Exception):
                made.stop("immediate")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def settings(server: own_server.OwnServer) -> PostgresSettings:
    return PostgresSettings(
        dsn=server.dsn,
        schema_name="restart",
        pool_max_size=3,
        retry_attempts=200,
        retry_backoff=0.05,
        retry_backoff_max=0.5,
        connect_timeout=5,
        poll_interval=0.5,
        lease_time=5,
    )


async def _restart_when(server: own_server.OwnServer, reached: asyncio.Event) -> None:
    await asyncio.wait_for(reached.wait(), 60)
    await asyncio.to_thread(server.restart, "immediate")


def _retried(caplog: pytest.LogCaptureFixture) -> bool:
    """The outage was met: some operation failed and was retried."""
    return any("retry" in r.getMessage() for r in caplog.records if r.name == "wow_postgres")


async def test_no_acknowledged_append_is_lost_across_a_server_crash(
    server: own_server.OwnServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "wow_postgres")
    store = PostgresEventStore(settings(server), codec=MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES)))
    aggregate_id: AggregateId = new_aggregate_id()
    acknowledged: list[str] = []
    halfway = asyncio.Event()
    total = 80

    async def append_all() -> None:
        for version in range(1, total + 1):
            stream = make_stream(aggregate_id, version)
            await store.append(stream)  # retried through the outage
            acknowledged.append(stream.id)
            if version == total // 2:
                halfway.set()

    try:
        await asyncio.wait_for(asyncio.gather(append_all(), _restart_when(server, halfway)), 120)
        history = await store.load(aggregate_id)
    finally:
        await store.close()
    assert [s.version for s in history] == list(range(1, total + 1))
    assert [s.id for s in history] == acknowledged
    assert _retried(caplog), "the appends never met the outage: the test proves nothing"


async def test_no_acknowledged_send_is_lost_across_a_server_crash(
    server: own_server.OwnServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "wow_postgres")
    sender = PostgresTransport(settings(server))
    receiving = PostgresTransport(settings(server))
    topic = "wow.restart.note.command"
    receiver = receiving.open("restart.group", [topic])
    await asyncio.wait_for(receiver.ready(), 60)
    receiver.open_processing()
    acknowledged: list[str] = []
    received: set[str] = set()
    halfway = asyncio.Event()
    total = 80

    async def send_all() -> None:
        for n in range(total):
            await sender.send(TransportMessage(topic, f"k{n % 4}", f"r{n}", n))
            acknowledged.append(f"r{n}")
            if n == total // 2:
                halfway.set()

    async def receive_all() -> None:
        async for record in receiver:
            received.add(record.payload)
            await record.ack()
            if len(received) == total:
                return

    try:
        consumer = asyncio.create_task(receive_all())  # consuming and acknowledging through the crash
        await asyncio.wait_for(asyncio.gather(send_all(), _restart_when(server, halfway)), 120)
        await asyncio.wait({consumer}, timeout=60)  # what is missing is reported below
        consumer.cancel()
    finally:
        await receiver.close()
        await receiving.close()
        await sender.close()
    missing = [payload for payload in acknowledged if payload not in received]
    assert not missing, f"acknowledged sends never received: {missing}"
    assert _retried(caplog), "the sends never met the outage: the test proves nothing"
