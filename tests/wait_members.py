"""Waits across real processes, the same scenario on every transport.

The test process is the *caller*: a runtime that hosts nothing and sends the journal
ledger's commands (:mod:`tests.wow_kafka.journal_app`) through the transport. Two or
three ``wow run`` instances of the journal service process them (one consumer group:
each command goes to one of them), and another process, the reactor
(:mod:`tests.wait_apps`), projects and sagas their events; its saga sends commands of
its own for chain waits. Every wait the caller makes past ``SENT`` is completed by a
signal from another process, through the transport's ``CommandWaitNotifier``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import pytest

from tests.service_members import Member, journal
from tests.wow_kafka.journal_app import AGGREGATE, CONTEXT, Record
from wow_core.command import CommandResult, CommandStage, CommandWait, CommandWaitTimeoutError
from wow_core.model import AggregateId, CommandMessage, NamedAggregate
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import WowRuntime

SERVING = re.compile(r"serving (\S+); SIGINT or SIGTERM stops")
LEDGER = NamedAggregate(CONTEXT, AGGREGATE)
REACTOR = "tests.wait_apps:reactor"


def local_first(enabled: bool) -> dict[str, str]:
    """Local-first on or off for every bus of a process."""
    value = "true" if enabled else "false"
    return {
        "WOW_COMMAND__BUS__LOCAL_FIRST__ENABLED": value,
        "WOW_EVENT__BUS__LOCAL_FIRST__ENABLED": value,
        "WOW_EVENTSOURCING__STATE__BUS__LOCAL_FIRST__ENABLED": value,
    }


async def serving(member: Member, timeout: float = 60) -> None:
    def started() -> bool:
        return any(SERVING.search(line) for line in list(member.lines))

    await asyncio.to_thread(member.wait_for, started, timeout)


def record(key: str) -> CommandMessage[Record]:
    return CommandMessage(AggregateId(LEDGER, key), Record(key, 0), "record", allow_create=True)


async def caller(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> WowRuntime:
    """The caller's runtime, started, over ``env`` (set in this process's environment)."""
    for name, value in env.items():
        if name.startswith("WOW_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("WOW_SERVICE_NAME", f"caller-{uuid.uuid4().hex[:6]}")
    runtime = WowApp("", body_types=[Record]).runtime()
    await runtime.start()
    return runtime


async def waits_across_processes(
    env: dict[str, str],
    journal_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    commands: int = 40,
    instances: int = 2,
) -> None:
    """The whole scenario; see the module doc. ``env`` configures every process;
    ``instances`` journal instances serve the commands."""
    members: list[Member] = []
    runtime: WowRuntime | None = None
    try:
        serving_members = [Member(f"journal-{n}", env) for n in range(instances)]
        reactor = Member("reactor", env, REACTOR)
        members += [*serving_members, reactor]
        for member in members:
            await serving(member)
        runtime = await caller(env, monkeypatch)
        gateway = runtime.gateway
        run = uuid.uuid4().hex[:6]

        # PROCESSED, whichever instance processed the command
        keys = [f"p-{run}-{n}" for n in range(commands)]
        results = await asyncio.gather(
            *(gateway.send_and_wait(record(key), CommandWait.processed(), timeout=30) for key in keys)
        )
        assert all(r.succeeded and r.stage is CommandStage.PROCESSED for r in results), results
        assert [r.aggregate_version for r in results] == [1] * commands
        by_member = {
            member.name: {key for key, _ in journal(journal_dir, member.process.pid)}
            for member in serving_members
        }
        assert set().union(*by_member.values()) >= set(keys)
        split = {name: len(found & set(keys)) for name, found in by_member.items()}
        assert min(split.values()) > 0, f"an instance processed no command, nothing crossed: {split}"

        # PROJECTED and SAGA_HANDLED, reached in the reactor: a third process
        projected = await asyncio.gather(
            *(
                gateway.send_and_wait(
                    record(f"j-{run}-{n}"), CommandWait.projected(CONTEXT, "LedgerTotals"), timeout=30
                )
                for n in range(10)
            )
        )
        sagas = await asyncio.gather(
            *(
                gateway.send_and_wait(record(f"s-{run}-{n}"), CommandWait.saga_handled(), timeout=30)
                for n in range(10)
            )
        )
        check_stage(projected, CommandStage.PROJECTED, "LedgerTotals")
        check_stage(sagas, CommandStage.SAGA_HANDLED, "LedgerSaga")

        # chains: journal -> the reactor's saga -> its command processed by a journal
        # instance (and projected by the reactor), each hop in another process
        saga = CommandWait.saga_handled(CONTEXT, "LedgerSaga")
        chained = await asyncio.gather(
            *(
                gateway.send_and_wait(
                    record(f"c-{run}-{n}"), CommandWait.chain(saga, CommandWait.processed())
                )
                for n in range(5)
            ),
            gateway.send_and_wait(
                record(f"c-{run}-p"), CommandWait.chain(saga, CommandWait.projected(CONTEXT, "LedgerTotals"))
            ),
        )
        for n, result in enumerate(chained):
            echo = f"c-{run}-{n if n < 5 else 'p'}-echo"
            assert result.succeeded, result
            assert result.aggregate_id == AggregateId(LEDGER, echo), result
            assert result.chain_command_id, result
        assert [r.stage for r in chained] == [CommandStage.PROCESSED] * 5 + [CommandStage.PROJECTED]
        processed_echoes = set().union(
            *({key for key, _ in journal(journal_dir, m.process.pid)} for m in serving_members)
        )
        assert {f"c-{run}-{n}-echo" for n in range(5)} <= processed_echoes

        # a streaming wait yields each stage in order, the last one from the reactor;
        # PROCESSED (from a journal instance) may arrive after PROJECTED (from the
        # reactor): it is then not yielded, the later stage proves it
        streamed = [
            (r.stage, r.processor_name)
            async for r in gateway.send_and_wait_stream(
                record(f"t-{run}"), CommandWait.projected(CONTEXT, "LedgerTotals"), timeout=30
            )
        ]
        assert streamed[0] == (CommandStage.SENT, "")
        assert streamed[-1] == (CommandStage.PROJECTED, "LedgerTotals")
        assert streamed[1:-1] in ([], [(CommandStage.PROCESSED, "")]), streamed

        # the reactor dies mid-wait: the caller fails at its deadline, naming PROCESSED
        reactor.kill()
        started = asyncio.get_running_loop().time()
        with pytest.raises(CommandWaitTimeoutError) as timed_out:
            await gateway.send_and_wait(record(f"k-{run}"), CommandWait.projected(), timeout=3)
        assert asyncio.get_running_loop().time() - started >= 3
        assert timed_out.value.last_stage is CommandStage.PROCESSED
        assert "last stage reached: PROCESSED" in str(timed_out.value)

        # restarted, it projects again and later waits succeed
        reactor = Member("reactor-again", env, REACTOR)
        members.append(reactor)
        await serving(reactor)
        again = await gateway.send_and_wait(record(f"r-{run}"), CommandWait.projected(), timeout=30)
        check_stage([again], CommandStage.PROJECTED, "LedgerTotals")
        assert len(runtime.coordinator) == 0
    finally:
        if runtime is not None:
            await runtime.stop()
        for member in members:
            member.stop()


def check_stage(results: list[CommandResult], stage: CommandStage, processor: str) -> None:
    for result in results:
        assert result.succeeded, result
        assert result.stage is stage, result
        assert (result.processor_name, result.function_name) == (processor, "recorded"), result
