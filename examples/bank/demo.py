"""The bank demo: a realistic batch of commands, then what happened per stage.

It opens accounts, deposits, withdraws and transfers money between them concurrently.
Some commands are refused on purpose: withdrawals and transfers beyond the balance
(``INSUFFICIENT_FUNDS``), a deposit to an account that does not exist
(``AGGREGATE_NOT_FOUND``), bodies that break their constraints (refused by the gateway
before sending, ``COMMAND_INVALID``), a command type the service does not host
(``COMMAND_UNHANDLED``). One deposit is sent twice with the same request id: the second
answer is the first one's, marked duplicate. One Void command is sent, which can only be
waited for until SENT. At the end the money is counted: transfers move it, they never
create or destroy it.

Commands wait for different stages: an opening until the projection saw it, a
transfer's end until the notice saga handled it, cash movements until PROCESSED, until an
event processor handled them or until their snapshot was taken; a rejected command ends
its wait at PROCESSED whatever stage it asked for.

It only talks to a :class:`~wow_core.runtime.WowRuntime`, so it runs unchanged over
whatever transport the settings select (``WOW_TRANSPORT=...``).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from wow_core import (
    AggregateId,
    CommandMessage,
    CommandResult,
    CommandStage,
    CommandValidationError,
    CommandWait,
    CommandWaitTimeoutError,
    NamedAggregate,
    WowRuntime,
)

from .domain import (
    Account,
    AccountState,
    CompleteTransfer,
    Deposit,
    FailTransfer,
    Loan,
    OpenAccount,
    Ping,
    PrepareTransfer,
    Withdraw,
)


class DemoAborted(RuntimeError):
    """The batch cannot go on (no account could be opened); the message says why."""


@dataclass
class Outcome:
    name: str
    stage: str
    latency: float
    status: str  # ok, rejected, duplicate, invalid, timeout
    code: str = ""
    message: str = ""


@dataclass
class DemoReport:
    outcomes: list[Outcome] = field(default_factory=list)
    concurrency: int = 0
    elapsed: float = 0.0
    expected_total: int = 0
    actual_total: int = 0
    transfers: Counter[str] = field(default_factory=Counter)
    duplicate_line: str = ""

    @property
    def conserved(self) -> bool:
        return self.expected_total == self.actual_total

    @property
    def unexpected(self) -> int:
        return sum(1 for o in self.outcomes if o.status == "timeout")


class Driver:
    """Sends commands through the runtime's gateway, timing and classifying each answer."""

    def __init__(self, runtime: WowRuntime, report: DemoReport, timeout: float) -> None:
        self.runtime = runtime
        self.report = report
        self.timeout = timeout

    async def send(self, command: CommandMessage[Any], wait: Any = None) -> CommandResult | None:
        plan = wait or CommandWait.processed()
        started = time.perf_counter()
        try:
            result = await self.runtime.gateway.send_and_wait(command, plan, timeout=self.timeout)
        except CommandValidationError as error:
            self._record(command, plan.stage.value, started, "invalid", error.code, str(error.violations[0]))
            return None
        except CommandWaitTimeoutError as error:
            self._record(command, plan.stage.value, started, "timeout", "TIMEOUT", str(error))
            return None
        if result.duplicate:
            status = "duplicate"
        elif result.succeeded:
            status = "ok"
        else:
            status = "rejected"
        self._record(command, result.stage.value, started, status, result.error_code, result.error_msg)
        return result

    def _record(
        self, command: CommandMessage[Any], stage: str, started: float, status: str, code: str, message: str
    ) -> None:
        latency = time.perf_counter() - started
        self.report.outcomes.append(Outcome(command.name, stage, latency, status, code, message))


async def _bounded(concurrency: int, jobs: list[Callable[[], Awaitable[None]]]) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with slots:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


async def run_demo(
    runtime: WowRuntime,
    *,
    accounts: int = 40,
    transfers: int = 400,
    concurrency: int = 64,
    seed: int = 7,
    timeout: float = 10.0,
) -> DemoReport:
    """Run the batch against a started runtime and return what happened."""
    rng = random.Random(seed)
    report = DemoReport(concurrency=concurrency)
    driver = Driver(runtime, report, timeout)
    build = runtime.aggregates.command
    started = time.perf_counter()

    # 1. open the accounts
    ids: list[str] = []
    initial = [rng.randrange(0, 50_000) for _ in range(accounts)]

    async def open_account(index: int) -> None:
        result = await driver.send(
            build(OpenAccount(f"owner-{index}", initial[index])), CommandWait.projected()
        )
        if result is not None and result.succeeded and result.aggregate_id is not None:
            ids.append(result.aggregate_id.id)
            report.expected_total += initial[index]

    await _bounded(concurrency, [lambda i=i: open_account(i) for i in range(accounts)])  # type: ignore[misc]
    if len(ids) < 3:
        failed = [o for o in report.outcomes if o.status != "ok"]
        why = f"{failed[0].code}: {failed[0].message}" if failed else "no answer"
        raise DemoAborted(
            f"only {len(ids)} of {accounts} accounts could be opened (the demo needs 3); "
            f"{len(failed)} openings failed, the first with {why}"
        )

    # 2. deposits and withdrawals, some beyond the balance
    async def move(account_id: str, deposit: bool, amount: int, wait: Any = None) -> None:
        body: Any = Deposit(amount, "cash") if deposit else Withdraw(amount, "cash")
        result = await driver.send(build(body, account_id), wait)
        if result is not None and result.succeeded and not result.duplicate:
            report.expected_total += amount if deposit else -amount

    stages = [CommandWait.processed(), CommandWait.event_handled(), CommandWait.snapshot()]
    moves = [
        (rng.choice(ids), rng.random() < 0.6, rng.randrange(1, 30_000), stages[index % 3])
        for index in range(accounts * 3)
    ]
    await _bounded(concurrency, [lambda m=m: move(*m) for m in moves])  # type: ignore[misc]

    # 3. transfers: prepare, withdraw from the source, deposit to the target, complete
    async def transfer(source: str, target: str, amount: int) -> None:
        prepared = await driver.send(build(PrepareTransfer(source, target, amount)))
        if prepared is None or not prepared.succeeded or prepared.aggregate_id is None:
            report.transfers["refused"] += 1
            return
        transfer_id = prepared.aggregate_id.id
        taken = await driver.send(build(Withdraw(amount, transfer_id), source))
        if taken is None or not taken.succeeded:
            reason = taken.error_code if taken is not None else "invalid"
            await driver.send(build(FailTransfer(reason), transfer_id), CommandWait.saga_handled())
            report.transfers["failed"] += 1
            return
        await driver.send(build(Deposit(amount, transfer_id), target))
        await driver.send(build(CompleteTransfer(), transfer_id), CommandWait.saga_handled())
        report.transfers["completed"] += 1

    pairs = []
    for index in range(transfers):
        source, target = rng.sample(ids, 2)
        if index % 97 == 0:
            target = source  # refused by the gateway: source and target must differ
        pairs.append((source, target, rng.randrange(1, 40_000)))
    await _bounded(concurrency, [lambda p=p: transfer(*p) for p in pairs])  # type: ignore[misc]

    # 4. the odd ones: not found, invalid, unhandled, a duplicate request, a Void command
    await move("no-such-account", True, 100)
    await driver.send(build(Deposit(-5), ids[0]))  # invalid: amount must be > 0
    unhosted = CommandMessage(
        aggregate_id=AggregateId(NamedAggregate("bank", "account"), ids[0]), body=Loan(10), name="Loan"
    )
    await driver.send(unhosted)
    # Request ids are unique per aggregate type and kept by a durable event store: a fixed
    # id would be answered as the duplicate of an earlier run's deposit (on Redis).
    request_id = f"salary-{uuid.uuid4().hex[:8]}"
    first = await driver.send(build(Deposit(700, "salary"), ids[1], request_id=request_id))
    again = await driver.send(build(Deposit(700, "salary"), ids[1], request_id=request_id))
    if first is not None and first.succeeded and not first.duplicate:
        report.expected_total += 700
    if first is not None and again is not None:
        version = first.aggregate_version
        answer = f"duplicate of version {version} (NOT new)" if first.duplicate else f"version {version}"
        second = f"duplicate of version {again.aggregate_version}" if again.duplicate else "NOT a duplicate"
        report.duplicate_line = f"request {request_id!r} sent twice: first -> {answer}; second -> {second}"
    await driver.send(build(Ping(), ids[2], is_void=True), CommandWait.sent())
    report.elapsed = time.perf_counter() - started

    # 5. count the money
    metadata = runtime.aggregates.get(Account.__wow_aggregate__[0])  # type: ignore[attr-defined]
    assert metadata is not None
    for account_id in ids:
        aggregate_id = AggregateId(metadata.named_aggregate, account_id)
        _, state = await runtime.kernel.load_state(metadata, aggregate_id)
        assert isinstance(state, AccountState)
        report.actual_total += state.balance
    return report


# -- printing ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _table(rows: list[list[str]], out: TextIO, right: int = 1) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for number, row in enumerate(rows):
        cells = [
            cell.ljust(width) if i < right else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        out.write("  " + "  ".join(cells).rstrip() + "\n")
        if number == 0:
            out.write("  " + "  ".join("-" * w for w in widths) + "\n")


def print_report(report: DemoReport, runtime: WowRuntime, out: TextIO) -> None:
    outcomes = report.outcomes
    out.write("\nPer stage reached (a rejection ends any wait at PROCESSED)\n")
    by_stage: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_stage[outcome.stage].append(outcome)
    rows = [["STAGE", "COMMANDS", "OK", "REJECTED", "DUPLICATE", "INVALID", "TIMEOUT", "P50 MS", "P99 MS"]]
    order = {stage.value: rank for rank, stage in enumerate(CommandStage)}
    for stage, items in sorted(by_stage.items(), key=lambda item: order.get(item[0], len(order))):
        counts = Counter(o.status for o in items)
        latencies = [o.latency * 1000 for o in items]
        rows.append(
            [
                stage,
                str(len(items)),
                str(counts["ok"]),
                str(counts["rejected"]),
                str(counts["duplicate"]),
                str(counts["invalid"]),
                str(counts["timeout"]),
                f"{percentile(latencies, 50):.2f}",
                f"{percentile(latencies, 99):.2f}",
            ]
        )
    _table(rows, out)

    out.write("\nPer command\n")
    by_name: dict[str, Counter[str]] = defaultdict(Counter)
    for outcome in outcomes:
        by_name[outcome.name][outcome.status] += 1
    rows = [["COMMAND", "COMMANDS", "OK", "REJECTED", "DUPLICATE", "INVALID", "TIMEOUT"]]
    for name, counts in sorted(by_name.items()):
        rows.append(
            [
                name,
                str(sum(counts.values())),
                str(counts["ok"]),
                str(counts["rejected"]),
                str(counts["duplicate"]),
                str(counts["invalid"]),
                str(counts["timeout"]),
            ]
        )
    _table(rows, out)

    out.write("\nRefusals by code (business rules and framework checks)\n")
    refusals: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.status in ("rejected", "invalid", "timeout"):
            refusals[outcome.code].append(outcome)
    rows = [["CODE", "COUNT", "FIRST MESSAGE"]]
    for code, items in sorted(refusals.items()):
        message = items[0].message
        rows.append([code, str(len(items)), message if len(message) < 70 else message[:67] + "..."])
    _table(rows, out, right=99)

    latencies = [o.latency * 1000 for o in outcomes]
    throughput = len(outcomes) / report.elapsed if report.elapsed else 0.0
    out.write("\nSummary\n")
    rows = [
        ["WHAT", "VALUE"],
        ["commands", str(len(outcomes))],
        ["elapsed", f"{report.elapsed:.3f} s"],
        [
            "throughput",
            f"{throughput:,.0f} commands/s ({report.concurrency} at once, a transfer's steps in sequence)",
        ],
        [
            "latency p50 / p90 / p99 / max",
            " / ".join(f"{percentile(latencies, q):.2f}" for q in (50, 90, 99, 100)) + " ms",
        ],
        [
            "transfers",
            ", ".join(f"{k} {v}" for k, v in sorted(report.transfers.items())) or "none",
        ],
        ["duplicate request", report.duplicate_line or "not observed"],
        [
            "money",
            f"expected {report.expected_total / 100:,.2f}, accounts hold {report.actual_total / 100:,.2f}: "
            + ("conserved" if report.conserved else "NOT CONSERVED"),
        ],
    ]
    _table(rows, out, right=99)
