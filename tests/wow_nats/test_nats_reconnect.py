"""A NATS server restarted under a running transport: sends and receivers carry on.

Runs a private ``nats-server -js`` on a free loopback port (the shared one is never
restarted); skipped when the binary is missing, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import nats.errors
import pytest
from pydantic import SecretStr

from tests.services import free_port, installed
from tests.wow_nats.support import message, next_record, opened
from wow_nats import NatsSettings, NatsTransport

pytestmark = [pytest.mark.nats, pytest.mark.slow]


class PrivateServer:
    def __init__(self, binary: str, store: Path, *extra: str) -> None:
        self.binary = binary
        self.store = store
        self.extra = extra
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store), *self.extra,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(200):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.05)  # the server is starting
        raise RuntimeError("nats-server did not start")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[PrivateServer]:
    private = PrivateServer(installed("nats-server"), tmp_path / "js")
    await private.start()
    yield private
    await private.stop()


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[PrivateServer]:
    """A server that wants a user and password."""
    private = PrivateServer(installed("nats-server"), tmp_path / "js", "--user", "wow", "--pass", "s3cret")
    await private.start()
    yield private
    await private.stop()


async def test_user_and_password_come_from_the_settings(guarded: PrivateServer) -> None:
    good = NatsTransport(NatsSettings(servers=[guarded.url], user="wow", password=SecretStr("s3cret")))
    try:
        receiver = await opened(good, "g", ["wow.auth.agg.command"])
        await good.send(message("wow.auth.agg.command", "k"))
        assert (await next_record(aiter(receiver))).key == "k"
    finally:
        await good.close()
    bad = NatsTransport(
        NatsSettings(servers=[guarded.url], user="wow", password=SecretStr("wrong"), connect_timeout=2.0)
    )
    try:
        with pytest.raises((ConnectionError, nats.errors.Error)):
            await bad.start()
    finally:
        await bad.close()


async def test_sends_and_receivers_survive_a_server_restart(server: PrivateServer) -> None:
    settings = NatsSettings(
        servers=[server.url], reconnect_time_wait=0.1, fetch_timeout=0.5, publish_timeout=5
    )
    transport = NatsTransport(settings)
    topic = "wow.restart.agg.command"
    receiver = await opened(transport, "g", [topic])
    records = aiter(receiver)
    try:
        await transport.send(message(topic, "before"))
        first = await next_record(records)
        assert first.key == "before"
        await first.ack()
        await (await transport.connection()).flush()

        await server.stop()
        # a send while the server is down completes once it is back (within the timeout)
        during = asyncio.create_task(transport.send(message(topic, "during")))
        await server.start()
        await asyncio.wait_for(during, 15)
        await transport.send(message(topic, "after"))

        got = [await next_record(records, timeout=15) for _ in range(2)]
        assert [r.key for r in got] == ["during", "after"]
        for record in got:
            await record.ack()
    finally:
        await transport.close()


async def test_the_ack_inbox_survives_a_restart_and_every_send_is_stored_once(server: PrivateServer) -> None:
    settings = NatsSettings(servers=[server.url], reconnect_time_wait=0.1, publish_timeout=5)
    transport = NatsTransport(settings)
    topic = "wow.restart.agg.command"
    try:
        stream = await transport.ensure_stream(topic)
        await transport.send(message(topic, "before"))
        await server.stop()
        during = [asyncio.create_task(transport.send(message(topic, f"during-{n}"))) for n in range(5)]
        await asyncio.sleep(0.2)
        await server.start()
        await asyncio.wait_for(asyncio.gather(*during), 15)
        for n in range(5):  # acked through the inbox subscribed again after the reconnect
            await asyncio.wait_for(transport.send(message(topic, f"after-{n}")), 15)
        info = await (await transport.jetstream()).stream_info(stream)
        assert info.state.messages == 11, "each send stored once"
        assert len(transport._acks) == 0, "no ack left awaited"
    finally:
        await transport.close()


async def test_wait_signals_notified_while_the_caller_reconnects_after_a_restart_arrive(
    server: PrivateServer,
) -> None:
    """The server restarts; a service notifies the caller's subject as soon as the server
    is back, before the caller has reconnected: the file-stored wait stream keeps the
    signals and the caller reads them when it is back (core pub/sub lost them)."""
    from wow_core.command import CommandStage, CommandWait, WaitCoordinator, WaitSignal
    from wow_core.command.notifier import WaitSignalSink
    from wow_core.model import AggregateId, CommandMessage, NamedAggregate
    from wow_nats.wait_notifier import NatsWaitNotifier

    account = AggregateId(NamedAggregate("bank", "account"), "a-1")
    caller = NatsWaitNotifier(NatsSettings(servers=[server.url], reconnect_time_wait=4.0))
    coordinator = WaitCoordinator()
    endpoint = await caller.start(WaitSignalSink(coordinator.receive))
    client = await caller._connection.client()
    sender: NatsWaitNotifier | None = None
    try:
        await server.stop()
        await server.start()
        sender = NatsWaitNotifier(NatsSettings(servers=[server.url]))
        waiters = [
            coordinator.register(CommandMessage(account, {"n": n}, "deposit"), CommandWait.processed())
            for n in range(5)
        ]
        for n, waiter in enumerate(waiters):
            await sender.notify(endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, account, n))
        await (await sender._connection.client()).flush()
        assert not client.is_connected, "notified before the caller was back"
        results = await asyncio.wait_for(asyncio.gather(*(w.future for w in waiters)), 20)
        assert [r.aggregate_version for r in results] == [0, 1, 2, 3, 4]
        assert caller.received == 5
    finally:
        await caller.close()
        if sender is not None:
            await sender.close()
