"""A Redis server killed (SIGKILL) and started again under running senders, receivers,
an event store and a service in another process (a server of the test's own, on
another port, with ``appendfsync always``; the shared one is never touched).

What is checked is what the docstrings promise across a lost connection: every send
that returned is delivered and acknowledged, none is left pending (stranded) once the
server is back; a send that could not be written fails with the connection error,
after its retries, and never hangs; an acknowledged append is kept; a waiting caller
gets its result or ``CommandWaitTimeoutError`` within its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.service_members import Member, journal
from tests.wait_members import caller, record, serving
from tests.wow_kafka.journal_app import AGGREGATE, CONTEXT
from tests.wow_redis.helpers import message
from tests.wow_redis.own_server import OwnServer, running_server
from wow_core.command import CommandResult, CommandStage, CommandWait, CommandWaitTimeoutError
from wow_core.eventsourcing import DuplicateRequestIdError
from wow_core.model import BodyTypeRegistry, DomainEventStream, MessageCodec
from wow_core.runtime.runtime import WowRuntime
from wow_core.testing import eventually, opened
from wow_core.testing.event_store import CONFORMANCE_BODY_TYPES, make_stream, new_aggregate_id
from wow_redis import RedisEventStore, RedisSettings, RedisStreamTransport
from wow_redis.connection import TRANSIENT_ERRORS
from wow_redis.wait_notifier import RedisWaitNotifier

pytestmark = [pytest.mark.redis, pytest.mark.slow]

OUTAGE = 2.0
"""Seconds the server stays down (from the kill to the start)."""


@pytest.fixture
def server() -> Iterator[OwnServer]:
    with running_server("wow-redis-") as made:
        yield made


def settings(server: OwnServer, **overrides: object) -> RedisSettings:
    values: dict[str, object] = {
        "url": server.url,
        "key_prefix": f"restart:{uuid.uuid4().hex[:8]}:",
        "block_time": 0.2,
        "socket_timeout": 2.0,
        "reconnect_backoff_max": 0.5,
    }
    values.update(overrides)
    return RedisSettings(**values)  # type: ignore[arg-type]


def _met_outage(caplog: pytest.LogCaptureFixture, *where: str) -> bool:
    """Some command of ``where`` failed on the connection and was retried: the outage was met."""
    return any(
        r.name == "wow_redis" and any(f"redis {w} failed" in r.getMessage() for w in where)
        for r in caplog.records
    )


@pytest.mark.parametrize("ack_confirmed", [False, True], ids=["queued-acks", "confirmed-acks"])
async def test_every_acknowledged_send_is_delivered_and_nothing_stays_pending_after_a_restart(
    server: OwnServer, caplog: pytest.LogCaptureFixture, ack_confirmed: bool
) -> None:
    """The consumer works 10 ms per entry, so it holds entries, and acknowledges them,
    while the server is down; with ``ack_confirmed`` each ``ack()`` waits for its reply."""
    caplog.set_level(logging.WARNING, "wow_redis")
    config = settings(server, ack_confirmed=ack_confirmed)
    sender = RedisStreamTransport(config)
    receiving = RedisStreamTransport(config)
    topic = f"{config.key_prefix}restart.note:command"
    group = "restart.group"
    total = 300
    acknowledged: list[str] = []
    failed: dict[str, BaseException] = {}
    received: dict[str, list[tuple[str, int]]] = defaultdict(list)
    """payload -> (entry id, delivery count) of each delivery"""
    halfway = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def send_one(payload: str) -> None:
        started = loop.time()
        try:
            await asyncio.wait_for(sender.send(message(topic, f"k{len(acknowledged) % 8}", payload)), 15)
        except TRANSIENT_ERRORS as error:
            failed[payload] = error
        else:
            acknowledged.append(payload)
        assert loop.time() - started < 15, "a send hung"

    async def send_all() -> None:
        for n in range(0, total, 5):  # five concurrent sends at a time, paced
            await asyncio.gather(*(send_one(f"r{m}") for m in range(n, n + 5)))
            if n >= total // 3:
                halfway.set()
            await asyncio.sleep(0.02)

    async def receive_all() -> None:
        async for entry in receiver:
            received[entry.payload].append((entry.entry_id, entry.delivery_count))
            await asyncio.sleep(0.01)  # the work: the receiver holds entries when the server dies
            await entry.ack()

    receiver = await opened(receiving, group, [topic])
    consumer = asyncio.create_task(receive_all())
    client = Redis.from_url(server.url)
    try:

        async def restart() -> float:
            await asyncio.wait_for(halfway.wait(), 30)
            return await server.restart_after(OUTAGE)

        _, down = await asyncio.wait_for(asyncio.gather(send_all(), restart()), 60)
        back = loop.time()

        async def all_acknowledged() -> bool:
            pending = (await client.xpending(topic, group))["pending"]
            return pending == 0 and set(acknowledged) <= set(received)

        with contextlib.suppress(Exception):  # the assertions below say what is missing
            await eventually(all_acknowledged, timeout=20)
        recovered = loop.time() - back
        pending = (await client.xpending(topic, group))["pending"]
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await receiving.close()
        await sender.close()
        await client.aclose()
    missing = [payload for payload in acknowledged if payload not in received]
    deliveries = [delivery for got in received.values() for delivery in got]
    by_entry: dict[str, list[int]] = defaultdict(list)
    for entry_id, count in deliveries:
        by_entry[entry_id].append(count)
    copies = {payload: got for payload, got in received.items() if len({i for i, _ in got}) > 1}
    print(
        f"outage {down:.2f}s, recovered {recovered:.2f}s after; sent {total}, acknowledged "
        f"{len(acknowledged)}, failed {len(failed)}, received {len(deliveries)} deliveries of "
        f"{len(received)} payloads ({len(deliveries) - len(by_entry)} redelivered, {len(copies)} written "
        f"twice), pending {pending}"
    )
    assert not missing, f"acknowledged sends never received: {missing}"
    assert pending == 0, f"{pending} entries stranded in the pending list after the restart"
    assert set(received) <= {*acknowledged, *failed}, "received what was never sent"
    for error in failed.values():  # the connection error, naming the server
        assert isinstance(error, RedisConnectionError | RedisTimeoutError), repr(error)
        assert f"{server.port}" in str(error) or "took longer" in str(error), repr(error)
    # at-least-once, visibly: an entry delivered again carries its delivery count, and an
    # entry written twice (a send batch retried after its reply was lost) can only be one
    # of the sends in flight when the server died
    unmarked = {i: counts for i, counts in by_entry.items() if counts.count(1) > 1}
    assert not unmarked, f"entries delivered again without a delivery count: {unmarked}"
    assert len(copies) <= 5, f"entries written twice: {copies}"
    met = _met_outage(caplog, "XREADGROUP", "XACK")
    assert met, "the receiver never met the outage: the test proves nothing"
    assert failed or _met_outage(caplog, "XADD"), "the sends never met the outage: the test proves nothing"


async def test_no_acknowledged_append_is_lost_and_appends_work_again_after_a_restart(
    server: OwnServer,
) -> None:
    store = RedisEventStore(settings(server), codec=MessageCodec(BodyTypeRegistry(CONFORMANCE_BODY_TYPES)))
    aggregate_id = new_aggregate_id()
    total = 120
    acknowledged: list[str] = []
    errors: list[BaseException] = []
    landed: list[tuple[int, int]] = []
    """(version the duplicate names, version appended) of each retry that found its append in"""
    halfway = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def append(stream: DomainEventStream) -> None:
        """Until it is in: an append that failed is sent again with its request id; a
        ``DuplicateRequestIdError`` naming this very append proves the first one landed."""
        while True:
            started = loop.time()
            try:
                await store.append(stream)
                return
            except DuplicateRequestIdError as duplicate:  # checked below: it names this append
                landed.append((duplicate.version, stream.version))
                return
            except TRANSIENT_ERRORS as error:
                errors.append(error)
                await asyncio.sleep(0.1)
            finally:
                assert loop.time() - started < 5, "an append hung"

    async def append_all() -> None:
        for version in range(1, total + 1):
            stream = make_stream(aggregate_id, version)
            await append(stream)
            acknowledged.append(stream.id)
            if version == total // 3:
                halfway.set()
            await asyncio.sleep(0.01)

    async def restart() -> float:
        await asyncio.wait_for(halfway.wait(), 30)
        return await server.restart_after(OUTAGE)

    try:
        _, down = await asyncio.wait_for(asyncio.gather(append_all(), restart()), 60)
        history = await store.load(aggregate_id)
    finally:
        await store.close()
    print(f"outage {down:.2f}s; {total} appends acknowledged, {len(errors)} failed attempts")
    assert [s.version for s in history] == list(range(1, total + 1))
    assert [s.id for s in history] == acknowledged
    assert all(named == appended for named, appended in landed), landed
    assert errors, "no append met the outage: the test proves nothing"
    for error in errors:  # the connection error, naming the server
        assert isinstance(error, RedisConnectionError | RedisTimeoutError), repr(error)
        assert f"{server.port}" in str(error) or "took longer" in str(error), repr(error)


async def test_a_service_in_another_process_keeps_processing_and_no_wait_hangs_across_a_restart(
    server: OwnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "redis",
        "WOW_EVENTSOURCING__STORE": "redis",
        "WOW_SERVICE_NAME": f"journal-{uuid.uuid4().hex[:8]}",
        "WOW_REDIS__URL": server.url,
        "WOW_REDIS__KEY_PREFIX": settings(server).key_prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_REDIS__SOCKET_TIMEOUT": "2",
        "WOW_REDIS__RECONNECT_BACKOFF_MAX": "0.5",
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
    }
    run = uuid.uuid4().hex[:6]
    member = Member("journal", env)
    runtime: WowRuntime | None = None
    loop = asyncio.get_running_loop()
    try:
        await serving(member)
        runtime = await caller(env, monkeypatch)
        gateway = runtime.gateway
        assert runtime.wait_notifier is not None
        notifier = runtime.wait_notifier.notifier
        assert isinstance(notifier, RedisWaitNotifier)

        async def processed(keys: list[str], timeout: float) -> list[CommandResult]:
            return await asyncio.gather(
                *(
                    gateway.send_and_wait(record(key), CommandWait.processed(), timeout=timeout)
                    for key in keys
                )
            )

        before = await processed([f"b-{run}-{n}" for n in range(20)], 30)
        assert all(r.succeeded for r in before), before

        # Waits in flight when the server dies: ten SENT to a member that is frozen
        # (SIGSTOP), so their PROCESSED can only come after the restart; then one started
        # every 75 ms for 3 s from the kill on (their sends meet the outage). Each ends
        # within its timeout: its result, CommandWaitTimeoutError (a signal published
        # while the caller was not subscribed), or the send's connection error.
        timeout = 8.0
        started = loop.time()
        member.process.send_signal(signal.SIGSTOP)
        frozen_keys = [f"f-{run}-{n}" for n in range(10)]
        during_keys = [f"d-{run}-{n}" for n in range(40)]

        async def wait_for(delay: float, key: str) -> CommandResult:
            await asyncio.sleep(delay)
            return await gateway.send_and_wait(record(key), CommandWait.processed(), timeout=timeout)

        topic = f"{env['WOW_REDIS__KEY_PREFIX']}{CONTEXT}.{AGGREGATE}:command"
        client = Redis.from_url(server.url)
        try:
            length = await client.xlen(topic)
            frozen = [asyncio.create_task(wait_for(0, key)) for key in frozen_keys]

            async def all_sent() -> bool:
                return bool(await client.xlen(topic) >= length + len(frozen_keys))

            await eventually(all_sent, timeout=5, what="the frozen member's commands to be SENT")
        finally:
            await client.aclose()
        assert not any(task.done() for task in frozen), "a wait ended while its member was frozen"
        waits = [*frozen, *(asyncio.create_task(wait_for(n * 0.075, k)) for n, k in enumerate(during_keys))]
        down = await server.restart_after(OUTAGE)
        member.process.send_signal(signal.SIGCONT)
        done, hung = await asyncio.wait(waits, timeout=3 + timeout + 2 - (loop.time() - started))
        for task in hung:
            task.cancel()
        assert not hung, f"{len(hung)} of {len(waits)} waits outlived their {timeout}s timeout"
        outcomes = Counter(_outcome(task) for task in done)
        for task in done:  # a wait whose signal was lost ends at its deadline, its command SENT
            error = task.exception()
            if isinstance(error, CommandWaitTimeoutError):
                assert error.last_stage is CommandStage.SENT, error
        assert set(outcomes) <= {"processed", "CommandWaitTimeoutError", "ConnectionError", "TimeoutError"}, [
            task.result() if task.exception() is None else task.exception() for task in done
        ]

        # once the caller receives again, later waits succeed: the member kept processing
        async def receiving() -> bool:
            return notifier.receiving

        await eventually(receiving, timeout=10, what="the caller to subscribe again")
        back = loop.time()
        after = await processed([f"a-{run}-{n}" for n in range(20)], 15)
        recovered = loop.time() - back
        assert all(r.succeeded for r in after), after
        keys = [*frozen_keys, *during_keys]
        sent = [key for key, task in zip(keys, waits, strict=True) if not _send_failed(task)]

        async def all_processed() -> bool:
            return set(sent) <= {key for key, _ in journal(journal_dir, member.process.pid)}

        await eventually(all_processed, timeout=20)
        print(
            f"outage {down:.2f}s; waits in flight: {dict(outcomes)}; 20 waits after the restart "
            f"succeeded in {recovered:.2f}s; {len(sent)} of {len(keys)} sends returned, all processed"
        )
        assert member.stop() == 0
    finally:
        if member.process.poll() is None:
            member.process.send_signal(signal.SIGCONT)
        if runtime is not None:
            await runtime.stop()
        member.stop()


async def test_a_command_that_failed_in_the_outage_in_another_process_is_processed_seconds_after_it(
    server: OwnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The member is frozen while commands are sent: its blocked read is answered into its
    # socket, so when it runs again, the server down, it has commands to process and
    # their processing fails (the store's load or append). Released, they must be
    # processed again within seconds of the restart, not after the claim idle time
    # (60 s here).
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    env = {
        **os.environ,
        "WOW_TRANSPORT": "redis",
        "WOW_EVENTSOURCING__STORE": "redis",
        "WOW_SERVICE_NAME": f"journal-{uuid.uuid4().hex[:8]}",
        "WOW_REDIS__URL": server.url,
        "WOW_REDIS__KEY_PREFIX": settings(server).key_prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_REDIS__SOCKET_TIMEOUT": "2",
        "WOW_REDIS__RECONNECT_BACKOFF_MAX": "0.5",
        "WOW_REDIS__CLAIM_IDLE_TIME": "60",
        "WOW_REDIS__RELEASE_DELAY": "0.5",
        "WOW_TEST_JOURNAL_DIR": str(journal_dir),
        "PYTHONUNBUFFERED": "1",
    }
    run = uuid.uuid4().hex[:6]
    member = Member("journal", env)
    runtime: WowRuntime | None = None
    try:
        await serving(member)
        runtime = await caller(env, monkeypatch)
        keys = [f"o-{run}-{n}" for n in range(10)]
        topic = f"{env['WOW_REDIS__KEY_PREFIX']}{CONTEXT}.{AGGREGATE}:command"
        client = Redis.from_url(server.url)
        try:
            member.process.send_signal(signal.SIGSTOP)
            for key in keys:
                sent = await runtime.gateway.send_and_wait(record(key), CommandWait.sent(), timeout=5)
                assert sent.error_code == "", sent
            for _ in range(20):  # frozen between two reads: let it read, freeze it again
                await asyncio.sleep(0.3)
                if (await client.xpending(topic, "journal.command"))["pending"]:
                    break  # its blocked read was answered: commands in its socket
                member.process.send_signal(signal.SIGCONT)
                await asyncio.sleep(0.01)
                member.process.send_signal(signal.SIGSTOP)
        finally:
            await client.aclose()
        server.kill()
        member.process.send_signal(signal.SIGCONT)
        failed = re.compile(r"command record \S+ to \S+@o-" + run + r"-\d+ failed")

        def appends_failed() -> bool:
            return any(failed.search(line) for line in list(member.lines))

        await asyncio.to_thread(member.wait_for, appends_failed, 15)
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(server.start)
        back = asyncio.get_running_loop().time()
        store = runtime.event_store
        aggregate_ids = [record(key).aggregate_id for key in keys]

        async def all_appended() -> bool:
            versions = await asyncio.gather(*(store.last_version(a) for a in aggregate_ids))
            return all(version == 1 for version in versions)

        await eventually(all_appended, timeout=20, what="every command appended once after the restart")
        took = asyncio.get_running_loop().time() - back
        assert took < 20, "within seconds, not the 60 s claim idle time"
        print(f"released during the outage, all {len(keys)} appended {took:.2f}s after the restart")
        assert member.stop() == 0
    finally:
        if member.process.poll() is None:
            member.process.send_signal(signal.SIGCONT)
        if runtime is not None:
            await runtime.stop()
        member.stop()


def _outcome(task: asyncio.Task[CommandResult]) -> str:
    """``processed``, or the name of the error the wait ended with (a wait that ended with
    a result that is not a success is named by its error code)."""
    error = task.exception()
    if error is not None:
        return type(error).__name__
    result = task.result()
    return "processed" if result.succeeded else f"result {result.error_code}"


def _send_failed(task: asyncio.Task[CommandResult]) -> bool:
    """The wait ended with the send's own error: nothing was SENT."""
    return isinstance(task.exception(), RedisConnectionError | RedisTimeoutError)


async def test_a_receiver_creates_its_group_again_when_the_server_comes_back_empty(
    server: OwnServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that comes back without its data (no persistence, a failover to a replica
    that had nothing): what it held is gone, but the receiver is not stuck on the group
    that vanished: it creates it again and receives every send made afterwards."""
    caplog.set_level(logging.WARNING, "wow_redis")
    config = settings(server)
    sender = RedisStreamTransport(config)
    receiving = RedisStreamTransport(config)
    topic = f"{config.key_prefix}restart.note:command"
    received: list[str] = []

    async def receive_all() -> None:
        async for entry in receiver:
            received.append(entry.payload)
            await entry.ack()

    receiver = await opened(receiving, "restart.group", [topic])
    consumer = asyncio.create_task(receive_all())
    try:
        await sender.send_many([message(topic, payload=f"before-{n}") for n in range(20)])

        async def got(count: int) -> bool:
            return len(received) >= count

        await eventually(lambda: got(20), timeout=10, what="the sends before the restart")
        await server.restart_after(OUTAGE, wipe=True)
        after = [f"after-{n}" for n in range(50)]
        for payload in after:
            await asyncio.wait_for(sender.send(message(topic, payload=payload)), 10)
        with contextlib.suppress(Exception):  # the assertion below says what is missing
            await eventually(lambda: got(70), timeout=15, what="the sends after the restart")
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await receiving.close()
        await sender.close()
    missing = [payload for payload in after if payload not in received]
    assert not missing, f"sends after the restart never received: {missing}"
    assert received[:20] == [f"before-{n}" for n in range(20)]
