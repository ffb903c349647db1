"""The PostgreSQL wait notifier on the real server: a LISTEN channel per caller, listened
to again after a lost connection; and waits across ``wow run`` processes on the
``postgres`` transport (the caller, two or three journal instances and the reactor are
separate processes)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.wait_members import local_first, waits_across_processes
from tests.wow_postgres.conftest import POSTGRES_DSN
from wow_core.command import CommandStage, CommandWait, WaitCoordinator, WaitSignal
from wow_core.command.notifier import WaitSignalSink
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.plugins import load_plugins
from wow_core.runtime.container import create_wait_notifier
from wow_core.runtime.settings import WowSettings
from wow_core.spi import WaitEndpoint, encode_signal
from wow_core.testing import eventually
from wow_postgres import PostgresSettings, PostgresWaitNotifier
from wow_postgres.wait_notifier import MAX_PAYLOAD

pytestmark = pytest.mark.postgres

AGG = AggregateId(NamedAggregate("bank", "account"), "a-1")


def command() -> CommandMessage[Any]:
    return CommandMessage(AGG, {"n": 1}, "deposit")


class Caller:
    """A started caller (its coordinator and sink) and a sender, closed after the test."""

    def __init__(self, settings: PostgresSettings) -> None:
        self.notifier = PostgresWaitNotifier(settings)
        self.sender = PostgresWaitNotifier(settings)
        self.coordinator = WaitCoordinator()
        self.sink = WaitSignalSink(self.coordinator.receive)
        self.endpoint = WaitEndpoint("postgres", self.notifier.channel)

    async def notify_processed(self, version: int = 1) -> None:
        waiter = self.coordinator.register(command(), CommandWait.processed())
        await self.sender.notify(
            self.endpoint, WaitSignal(waiter.command.id, CommandStage.PROCESSED, AGG, version)
        )
        result = await asyncio.wait_for(waiter.future, 10)
        assert (result.stage, result.aggregate_version) == (CommandStage.PROCESSED, version)


@pytest.fixture
async def caller(settings_for: Callable[..., PostgresSettings]) -> AsyncIterator[Caller]:
    started = Caller(settings_for(retry_backoff=0.05))
    started.endpoint = await started.notifier.start(started.sink)
    try:
        yield started
    finally:
        await started.notifier.close()
        await started.sender.close()


async def test_a_signal_notified_to_an_endpoint_completes_the_wait_there(caller: Caller) -> None:
    assert caller.endpoint == WaitEndpoint("postgres", caller.notifier.channel)
    assert caller.notifier.channel.startswith("wow_wait_")
    assert (caller.notifier.receiving, caller.notifier.subscriptions) == (True, 1)
    await caller.notify_processed(4)


async def test_concurrent_notifications_all_arrive(caller: Caller) -> None:
    waiters = [caller.coordinator.register(command(), CommandWait.processed()) for _ in range(600)]
    await asyncio.gather(
        *(
            caller.sender.notify(caller.endpoint, WaitSignal(w.command.id, CommandStage.PROCESSED, AGG, n))
            for n, w in enumerate(waiters)
        )
    )
    results = await asyncio.wait_for(asyncio.gather(*(w.future for w in waiters)), 30)
    assert [r.aggregate_version for r in results] == list(range(600))


async def test_hostile_payloads_are_dropped_and_the_channel_keeps_working(caller: Caller) -> None:
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        for payload in ("\x01", "{}", "[1, 2]", '{"v": 1}', "x" * 7000):
            await connection.execute("SELECT pg_notify($1, $2)", caller.notifier.channel, payload)
    finally:
        await connection.close()
    await caller.notify_processed()
    assert caller.sink.malformed == 5


async def test_other_addresses_and_oversized_signals_are_refused(caller: Caller) -> None:
    nobody = WaitEndpoint("postgres", "wow_wait_" + "d" * 32)  # nobody listens: nothing kept
    await caller.sender.notify(nobody, WaitSignal("c-1", CommandStage.PROCESSED))
    for address in ("wow_transport", "wow_wait_x", 'wow_wait_"; DROP TABLE x; --'):
        with pytest.raises(ValueError, match="not a wait channel"):
            await caller.sender.notify(
                WaitEndpoint("postgres", address), WaitSignal("c-2", CommandStage.PROCESSED)
            )
    big = WaitSignal("c-3", CommandStage.PROCESSED, result={"blob": "x" * MAX_PAYLOAD})
    with pytest.raises(ValueError, match=rf"c-3 is \d+ bytes: NOTIFY takes at most {MAX_PAYLOAD}"):
        await caller.sender.notify(caller.endpoint, big)
    fits = WaitSignal("c-4", CommandStage.PROCESSED, result={"blob": "x" * 7000})
    assert len(encode_signal(fits).encode()) <= MAX_PAYLOAD
    await caller.sender.notify(caller.endpoint, fits)  # just under the limit: sent


async def test_a_lost_listening_connection_is_listened_on_again(caller: Caller) -> None:
    await caller.notify_processed(1)
    listening = caller.notifier._listening
    assert listening is not None
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        sender_pid = caller.sender._sending.get_server_pid() if caller.sender._sending else 0
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY($1::int[])",
            [listening.get_server_pid(), sender_pid],
        )
    finally:
        await connection.close()

    async def listening_again() -> bool:
        return caller.notifier.subscriptions == 2 and caller.notifier.receiving

    await eventually(listening_again, timeout=15, what="the notifier to listen again")
    await caller.notify_processed(2)  # the sender's terminated connection is replaced too


async def test_the_notifier_is_the_default_with_the_postgres_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_TRANSPORT", "postgres")
    notifier = create_wait_notifier(load_plugins(), WowSettings.load())
    assert isinstance(notifier, PostgresWaitNotifier)
    assert load_plugins().get("wait_notifier", "postgres").origin.distribution == "wow-postgres"


async def test_start_fails_clearly_when_the_server_cannot_be_reached() -> None:
    notifier = PostgresWaitNotifier(
        PostgresSettings(
            dsn="postgresql://app:hunter2@127.0.0.1:1/test", retry_attempts=1, retry_backoff=0.01
        )
    )
    with pytest.raises(ConnectionError, match=r"app:\*\*\*@127.0.0.1:1/test: wait LISTEN connect failed"):
        await notifier.start(WaitSignalSink(WaitCoordinator().receive))
    await notifier.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "local", [True, False], ids=["local-first-2-instances", "no-local-first-3-instances"]
)
async def test_every_stage_is_waited_for_from_another_process(
    local: bool, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "postgres",
        "WOW_POSTGRES__DSN": POSTGRES_DSN,
        "WOW_POSTGRES__SCHEMA_NAME": schema,
        "WOW_POSTGRES__POOL_MAX_SIZE": "4",
        "WOW_POSTGRES__CLAIM_BATCH": "1",  # spread the commands over every instance
        "WOW_POSTGRES__READ_AHEAD": "1",
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
        **local_first(local),
    }
    await waits_across_processes(env, journal_dir, monkeypatch, instances=2 if local else 3)
