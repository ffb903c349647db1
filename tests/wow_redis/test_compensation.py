"""Event compensation over Redis with separate ``wow run`` processes.

Two instances of the ``bank`` service of :mod:`tests.wow_compensation.domain` share the
Redis transport, event store and compensation store; a failing projection function is
switched by a file, so the test fixes the cause while the processes run.

- both instances run the scheduler: every record is compensated, and no record is
  prepared twice for one attempt (each preparation is followed by its outcome before
  the next), the function handled each event exactly once across both processes;
- a record exists after its service is SIGKILLed right after recording it, and a
  restarted instance compensates it;
- the ``wow compensation`` command line lists, shows and acts on the records;
- an unrecoverable failure is never retried by either instance's scheduler, until an
  operator forces it; a redelivered failure of the same event stays one record;
- a command the ``Sweep`` saga (a service of its own) sent and the accounts service
  rejected is recorded by the accounts service and retried by the saga's service, which
  waits across processes for the retried command to be processed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.accounts import ACCOUNT, Account, AccountState, Deposit, Open
from tests.service_members import Member
from tests.wow_compensation.conftest import FAST
from wow_compensation.model import (
    EXECUTION_FAILED,
    CompensationPrepared,
    ExecutionFailed,
    ExecutionFailedApplied,
    ExecutionFailedCreated,
    ExecutionFailedStatus,
    ExecutionSuccessApplied,
)
from wow_compensation.redis_store import RedisCompensationStore
from wow_compensation.store import ExecutionRecord
from wow_core.model import AggregateId, BodyTypeRegistry, MessageCodec
from wow_core.modeling.registry import AggregateRegistry
from wow_core.testing import eventually
from wow_core.transport.bus import TransportCommandBus, TransportDomainEventBus
from wow_redis import RedisEventStore, RedisSettings, RedisStreamTransport

pytestmark = [pytest.mark.redis, pytest.mark.slow]

APP = "tests.wow_compensation.domain:app"
ROOT = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"started|running|ready", re.IGNORECASE)
RECORDED = re.compile(r"recorded execution failure (\w+)")


def _env(settings: RedisSettings, prefix: str, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "switches").mkdir(exist_ok=True)
    (tmp_path / "journals").mkdir(exist_ok=True)
    return {
        **os.environ,
        **FAST,
        "WOW_COMPENSATION__SCHEDULER__INTERVAL": "0.2",
        "WOW_COMPENSATION__RETRY__MIN_BACKOFF": "0.2",
        "WOW_TRANSPORT": "redis",
        "WOW_EVENTSOURCING__STORE": "redis",
        "WOW_EVENTSOURCING__SNAPSHOT": "redis",
        "WOW_REDIS__URL": settings.url,
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_TEST_SWITCH_DIR": str(tmp_path / "switches"),
        "WOW_TEST_JOURNAL_DIR": str(tmp_path / "journals"),
        "PYTHONUNBUFFERED": "1",
    }


def _handled(journals: Path, function: str) -> list[str]:
    return [
        event_id
        for path in journals.glob("*.log")
        for name, event_id in (line.split() for line in path.read_text().splitlines())
        if name == function
    ]


class Client:
    """Sends the bank's commands over the transport and reads the records."""

    def __init__(self, settings: RedisSettings, prefix: str) -> None:
        self.aggregates = AggregateRegistry([Account, ExecutionFailed])
        codec = MessageCodec(self.aggregates.register_body_types(BodyTypeRegistry()))
        self.transport = RedisStreamTransport(settings)
        self.bus = TransportCommandBus(self.transport, codec)
        self.event_bus = TransportDomainEventBus(self.transport, codec)
        self.events = RedisEventStore(settings, codec=codec)
        self.store = RedisCompensationStore(settings.url, prefix)

    async def __aenter__(self) -> Client:
        await self.transport.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.bus.close()
        await self.event_bus.close()
        await self.transport.close()
        await self.events.close()
        await self.store.close()

    async def send(self, body: object, aggregate_id: str) -> None:
        await self.bus.send(self.aggregates.command(body, aggregate_id))

    async def open(self, accounts: list[str]) -> None:
        """Open ``accounts`` and wait until each is in the event store.

        Two members of a group share the command stream without keyed ownership (see
        docs/transports/redis.md, Order): a ``Deposit`` sent right after its ``Open`` may
        be decided by the other member first, and rejected (AGGREGATE_NOT_FOUND).
        """
        for account in accounts:
            await self.send(Open("ann"), account)

        async def opened() -> bool:
            return all([await self.events.load(AggregateId(ACCOUNT, account)) for account in accounts])

        await eventually(opened, 30, "every account opened")

    async def history(self, record_id: str) -> list[type[Any]]:
        streams = await self.events.load(AggregateId(EXECUTION_FAILED, record_id))
        return [type(event.body) for stream in streams for event in stream.events]

    async def records(self) -> list[ExecutionRecord]:
        return await self.store.records()

    async def of(self, function: str) -> list[ExecutionRecord]:
        return [
            r for r in await self.records() if r.state.function and r.state.function.function_name == function
        ]

    async def balance(self, account: str) -> int:
        metadata = self.aggregates.get(ACCOUNT)
        assert metadata is not None
        state: Any = metadata.initial_state(AggregateId(ACCOUNT, account))
        for stream in await self.events.load(AggregateId(ACCOUNT, account)):
            for event in stream.events:
                state = metadata.sourcing[type(event.body)](state, event.body)
        assert isinstance(state, AccountState)
        return state.balance


def _started(member: Member) -> None:
    """Until ``wow run`` says it serves (its start-up line; any line with "started" came
    by chance). 90 s: a start-up costs about 1.6 s of CPU, which took 17-36 s of wall time
    at a load of 20 on 2 cores (two members start at once here)."""
    member.wait_for(lambda: any("wow.run: serving" in line for line in member.lines), 90)


async def test_two_instances_compensate_every_record_once(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis, tmp_path: Path
) -> None:
    env = _env(settings_for(), prefix, tmp_path)
    # the first attempt and the first retry fail, on every event: the cause is fixed
    # when every record was retried once, whatever the pace of the two schedulers
    (tmp_path / "switches" / "deposited").write_text("2")
    members = [Member("first", env, APP), Member("second", env, APP)]
    try:
        for member in members:
            _started(member)
        accounts = [f"acc-{uuid.uuid4().hex[:8]}" for _ in range(8)]
        async with Client(settings_for(), prefix) as client:
            await client.open(accounts)
            for account in accounts:
                await client.send(Deposit(5), account)

            async def all_recorded() -> bool:
                return len(
                    [
                        r
                        for r in await client.records()
                        if r.state.function and r.state.function.function_name == "deposited"
                    ]
                ) == len(accounts)

            await eventually(all_recorded, 30, "a record per failed deposit")

            async def all_succeeded() -> bool:
                found = await client.records()
                return bool(found) and all(r.state.status is ExecutionFailedStatus.SUCCEEDED for r in found)

            await eventually(all_succeeded, 30, "every record SUCCEEDED")
            for record in await client.records():
                history = await client.history(record.id)
                # every preparation is followed by its outcome before the next one: no
                # record was prepared twice for one attempt, by either instance
                outcomes = [
                    t
                    for t in history
                    if t in (CompensationPrepared, ExecutionFailedApplied, ExecutionSuccessApplied)
                ]
                assert outcomes[0::2] == [CompensationPrepared] * len(outcomes[0::2]), history
                assert all(t is not CompensationPrepared for t in outcomes[1::2]), history
                assert outcomes[-1] is ExecutionSuccessApplied
                # retried, failed again, retried and succeeded: within the cap of 2
                assert outcomes.count(ExecutionFailedApplied) == 1, history
                assert record.state.retry_state.retries == outcomes.count(CompensationPrepared) == 2
        deposited = _handled(tmp_path / "journals", "deposited")
        assert len(deposited) == len(set(deposited)) == len(accounts)
        # the other function of the event was never replayed
        assert len(_handled(tmp_path / "journals", "audit_deposit")) == len(accounts)
        for member in members:
            assert member.stop() == 0
    finally:
        for member in members:
            member.kill()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "wow"), "compensation", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_record_survives_sigkill_and_the_cli_acts_on_it(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis, tmp_path: Path
) -> None:
    env = {**_env(settings_for(), prefix, tmp_path), "WOW_COMPENSATION__SCHEDULER__ENABLED": "false"}
    (tmp_path / "switches" / "opened").touch()
    account = f"acc-{uuid.uuid4().hex[:8]}"
    member = Member("victim", env, APP)
    try:
        _started(member)
        async with Client(settings_for(), prefix) as client:
            await client.send(Open("ann"), account)
            member.wait_for(lambda: any(RECORDED.search(line) for line in member.lines), 30)
            member.kill()  # SIGKILL right after the record was written
            [record_id] = [m.group(1) for line in member.lines if (m := RECORDED.search(line))]
            assert (await client.history(record_id))[:1] == [ExecutionFailedCreated]
            # the command line lists and shows it, from the shared store
            listed = _cli(env, "list", "--json", "--aggregate-id", account)
            assert listed.returncode == 0, listed.stderr
            data = json.loads(listed.stdout)
            assert [item["id"] for item in data["items"]] == [record_id]
            assert data["items"][0]["status"] == "FAILED"
            shown = _cli(env, "show", record_id)
            assert shown.returncode == 0, shown.stderr
            assert "Broken" in shown.stdout
            assert "stack trace:" in shown.stdout
            # bad input: an unknown id is refused, nothing changes
            unknown = _cli(env, "prepare", "no-such-record")
            assert unknown.returncode == 1
            assert "AGGREGATE_NOT_FOUND" in unknown.stdout
            assert (await client.history("no-such-record")) == []
            # a restarted instance replays what the operator prepares, once fixed
            (tmp_path / "switches" / "opened").unlink()
            member = Member("restarted", env, APP)
            _started(member)
            prepared = _cli(env, "prepare", record_id)
            assert prepared.returncode == 0, prepared.stdout + prepared.stderr
            assert "PREPARED" in prepared.stdout

            async def succeeded() -> bool:
                found = await client.store.get(record_id)
                return found is not None and found.state.status is ExecutionFailedStatus.SUCCEEDED

            await eventually(succeeded, 30, "the record SUCCEEDED")
            # a stale action: prepare on SUCCEEDED is refused, nothing written
            before = await client.history(record_id)
            stale = _cli(env, "prepare", record_id)
            assert stale.returncode == 1
            assert "EXECUTION_SUCCEEDED" in stale.stdout
            assert await client.history(record_id) == before
        assert _handled(tmp_path / "journals", "opened") != []
        assert member.stop() == 0
    finally:
        member.kill()


async def test_unrecoverable_and_redelivered_failures_over_two_instances(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis, tmp_path: Path
) -> None:
    env = _env(settings_for(), prefix, tmp_path)
    for switch in ("balance", "deposited"):
        (tmp_path / "switches" / switch).touch()
    members = [Member("first", env, APP), Member("second", env, APP)]
    try:
        for member in members:
            _started(member)
        account = f"acc-{uuid.uuid4().hex[:8]}"
        async with Client(settings_for(), prefix) as client:
            await client.open([account])
            await client.send(Deposit(5), account)

            async def both_recorded() -> bool:
                return len(await client.of("balance")) == 1 and len(await client.of("deposited")) == 1

            await eventually(both_recorded, 30, "the balance and deposited records")
            [deposited] = await client.of("deposited")

            async def retried_twice() -> bool:
                [record] = await client.of("deposited")
                return record.state.retry_state.retries >= 2  # @retry(max_retries=2): its cap

            # the schedulers run meanwhile (they retried the recoverable record to its cap)...
            await eventually(retried_twice, 30, "the recoverable record retried to its cap")
            [balance] = await client.of("balance")
            # ...but never the unrecoverable one
            assert balance.state.recoverable.value == "UNRECOVERABLE"
            assert balance.state.retry_state.retries == 0
            assert await client.history(balance.id) == [ExecutionFailedCreated]
            # the broker redelivers the deposit: the function fails again on either
            # instance, and the record of that event and function stays the one it was
            assert deposited.state.event is not None
            [stream] = await client.events.load(AggregateId(ACCOUNT, account), 2, 2)
            await client.event_bus.send(stream.copy())

            def audits() -> int:
                return len(_handled(tmp_path / "journals", "audit_deposit"))

            await eventually(lambda: _true(audits() == 2), 30, "the redelivered deposit handled")
            assert [r.id for r in await client.of("deposited")] == [deposited.id]
            assert (await client.history(deposited.id)).count(ExecutionFailedCreated) == 1
            # the operator fixes the cause and forces the unrecoverable record
            (tmp_path / "switches" / "balance").unlink()
            forced = _cli(env, "force-prepare", balance.id)
            assert forced.returncode == 0, forced.stdout + forced.stderr

            async def succeeded() -> bool:
                found = await client.store.get(balance.id)
                return found is not None and found.state.status is ExecutionFailedStatus.SUCCEEDED

            await eventually(succeeded, 30, "the forced record SUCCEEDED")
        assert len(_handled(tmp_path / "journals", "balance")) == 1
        for member in members:
            assert member.stop() == 0
    finally:
        for member in members:
            member.kill()


async def _true(value: bool) -> bool:
    return value


async def test_a_rejected_saga_command_is_retried_across_services(
    settings_for: Callable[..., RedisSettings], prefix: str, redis: Redis, tmp_path: Path
) -> None:
    into, source, fees = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("into", "source", "fees"))
    env = {**_env(settings_for(), prefix, tmp_path), "WOW_TEST_SWEEP": f"{into}:{source}:{fees}"}
    members = [
        Member("accounts", env, "tests.wow_compensation.domain:accounts"),
        Member("sweeper", env, "tests.wow_compensation.domain:sweeper"),
    ]
    try:
        for member in members:
            _started(member)
        async with Client(settings_for(), prefix) as client:
            for account in (into, source, fees):
                await client.send(Open(account), account)
            await client.send(Deposit(5), into)

            async def recorded() -> bool:
                return len(await client.of("swept")) == 1

            await eventually(recorded, 30, "the record of the rejected withdrawal")
            [record] = await client.of("swept")
            assert record.state.error is not None
            assert record.state.error.error_type == "INSUFFICIENT_FUNDS"
            # recorded by the accounts service, which does not host the saga
            members[0].wait_for(lambda: any(RECORDED.search(line) for line in members[0].lines), 10)
            assert not any(RECORDED.search(line) for line in members[1].lines)

            async def retried() -> bool:
                found = await client.store.get(record.id)
                return (
                    found is not None
                    and found.state.retry_state.retries >= 1
                    and (found.state.status is ExecutionFailedStatus.FAILED)
                )

            # the saga's service replays it (a record's events reach every service), the
            # accounts service rejects the withdrawal again, the saga's wait sees it
            await eventually(retried, 30, "a retry rejected again")
            await client.send(Deposit(10), source)  # the operator's fix

            async def succeeded() -> bool:
                found = await client.store.get(record.id)
                return found is not None and found.state.status is ExecutionFailedStatus.SUCCEEDED

            await eventually(succeeded, 30, "the saga's record SUCCEEDED")
            assert await client.balance(source) == 5
            assert await client.balance(fees) == 1  # the fee went through once, whatever the retries
        for member in members:
            assert member.stop() == 0
    finally:
        for member in members:
            member.kill()
