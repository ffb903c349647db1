"""The cluster intake on Kafka: throughput with receipts for 1, 2 and 3 node processes, and
the latency of each command to its committed receipt (p50, p99).

For each node count, N ``wow run benchmarks._intake_app:app`` processes run the intake of
``tally`` (``WOW_CLUSTER__INTAKE__ENABLED``) over a 6-partition command topic, the event
store in memory in each node (each aggregate is owned by one node; the figure is the
intake's, not a store's). Once every node owns partitions, this process sends ``count``
commands over ``aggregates`` aggregates, all at once in batches (a backlog: the figure is
the intake's capacity), each asking for its committed receipt; it reads the receipts on
``<prefix>bench.receipts``. Throughput is the commands over the time from the first send
to the last receipt; latency is from a command's send to its receipt, so under a backlog
it includes the wait in the queue. A second run per node count sends 1 000 commands at a
paced 100 a second, so its latency is a command's own path, without a queue.

Each command costs a node: one record read, the kernel's decision, three broker sends
(event, state, receipt) acknowledged, one commit. The broker is a ``tansu`` started here
(memory storage) unless ``WOW_BENCH_KAFKA_BOOTSTRAP`` names one; it shares the machine
with the nodes.

    python -m benchmarks.cluster_intake [--quick] [--repeat R] [--commands N]

``--commands`` (6,000) sets the backlog of each round (a tenth as many aggregates). On a
quiet machine 6,000 commands take about a second and a half per round, too short a
window to compare node counts; 30,000 give windows of several seconds.

Each figure also says where the machine's CPU went during the measured window (from
``/proc``): the CPU seconds of each node, of the broker and of this sending process, and
the whole machine's busy CPU (every process, other users' included) against the two
cores' capacity, with the load average. ``node_cpu_ms_per_command`` is the nodes' CPU per
command: when it stays flat from 1 to 2 nodes while the machine is saturated, the missing
speed-up is the machine's, not the intake's.

The CPU-normalised figure stands beside the wall figure, so scaling can be judged apart
from what other processes take: ``commands_per_node_cpu_s`` is the commands over the CPU
seconds the node processes used in the window, and ``cpu_normalised_ratio_over_1_node``
that figure of N nodes over the one of 1 node (1.0: a second node costs nothing more per
command). The wall speed-up factors into that ratio times the ratio of the CPU the nodes
were given (``node_cores``: their CPU seconds over the wall seconds), which is the
scheduler's, not the intake's. ``speedup_at_the_1_node_cpu_share`` is N times the ratio:
the speed-up if each of the N nodes got the CPU the single node got (a projection: it
assumes the broker and the sender keep up).

The node counts run in rounds (1, 2, 3 nodes, then again), ``min(--repeat, 3)`` rounds,
so a change of the machine's load falls on every count; each figure is the median of its
rounds, and every round's values are in the detail.

``WOW_BENCH_PROFILE=DIR`` runs each node under ``py-spy record`` (install it with ``uv pip
install py-spy``; not a dependency) and writes its collapsed stacks to
``DIR/node-<pid>.txt``: where a node's time goes under the backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._harness import Figure, Harness
from benchmarks._intake_app import Add, Added, CounterState
from benchmarks.kafka_transport import bootstrap_or_tansu, settings_for
from wow_core.cluster import CommandReceipt, CommandWire, ReplyTo
from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, NamedAggregate
from wow_core.transport.spi import TransportMessage
from wow_kafka import KafkaTransport

ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` used so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, every core."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / _TICK, sum(values[:8]) / _TICK


APP = "benchmarks._intake_app:app"
PARTITIONS = 6
BATCH = 500
PACED_RATE = 100.0
"""Commands per second of the latency runs: well below one node's capacity here."""
_ASSIGNED = re.compile(r"tally\.intake'?: assigned \[(.*)\]")


class Node:
    """One ``wow run`` process; its intake's latest assignment is read from its log."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "wow"), "run", APP],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.owned = 0
        self.lines: list[str] = []
        self.profiler: subprocess.Popen[bytes] | None = None
        profile = os.environ.get("WOW_BENCH_PROFILE")
        if profile:  # py-spy attaches; it writes its stacks when the node exits
            Path(profile).mkdir(parents=True, exist_ok=True)
            out = Path(profile) / f"node-{self.process.pid}.txt"
            spy = str(Path(sys.executable).parent / "py-spy")
            self.profiler = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--format",
                    "raw",
                    "--rate",
                    "250",
                    "-o",
                    str(out),
                    "--pid",
                    str(self.process.pid),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            match = _ASSIGNED.search(line)
            if match:
                self.owned = match.group(1).count("partition=")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.profiler is not None:
            self.profiler.wait(60)


def node_env(bootstrap: str, prefix: str) -> dict[str, str]:
    env = {
        **os.environ,
        "WOW_TRANSPORT": "kafka",
        "WOW_SERVICE_NAME": f"bench-{uuid.uuid4().hex[:6]}",
        "WOW_CLUSTER__INTAKE__ENABLED": "true",
        "WOW_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "WOW_KAFKA__TOPIC_PREFIX": prefix,
        "WOW_KAFKA__PARTITIONS": str(PARTITIONS),
        "WOW_KAFKA__SESSION_TIMEOUT_MS": "3000",
        "WOW_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
        "WOW_KAFKA__FETCH_MAX_WAIT_MS": "20",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("WOW_TEST_KAFKA_BOOTSTRAP", None)
    return env


async def one_run(
    bootstrap: str,
    nodes: int,
    count: int,
    aggregates: int,
    rate: float | None = None,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    """Send ``count`` commands (all at once, or ``rate`` a second in batches of 20) to
    ``nodes`` fresh node processes; the throughput and latency percentiles."""
    settings = settings_for(bootstrap, partitions=PARTITIONS)
    prefix = settings.topic_prefix or ""
    client = KafkaTransport(settings)
    bodies = BodyTypeRegistry([Add, Added, CounterState])
    commands_topic = f"{prefix}tally.commands"
    receipts_topic = f"{prefix}bench.receipts"
    await client.topics.ensure([commands_topic, receipts_topic])
    receipts = client.open("bench", [receipts_topic])
    await receipts.ready()
    receipts.open_processing()
    members = [Node(node_env(bootstrap, prefix)) for _ in range(nodes)]
    try:
        async with asyncio.timeout(120):
            while not (all(m.owned for m in members) and sum(m.owned for m in members) == PARTITIONS) or any(
                m.process.poll() is not None for m in members
            ):
                if any(m.process.poll() is not None for m in members):
                    raise RuntimeError("a node exited:\n" + "".join(members[0].lines[-20:]))
                await asyncio.sleep(0.1)  # polling other processes' logs
        await asyncio.sleep(2)  # let the group settle: no rebalance while measuring
        named = NamedAggregate("tally", "counter")
        sent_at: dict[str, float] = {}
        latencies: list[float] = []
        batches = []
        size = BATCH if rate is None else 20
        for first in range(0, count, size):
            batch = []
            for n in range(first, min(count, first + size)):
                command = CommandMessage(
                    AggregateId(named, f"a{n % aggregates}"), Add(n), "add", allow_create=True
                )
                wire = CommandWire(command, ReplyTo("bench", committed=True))
                batch.append((command.id, TransportMessage(commands_topic, wire.key, wire.encode(bodies), 0)))
            batches.append(batch)

        async def read() -> float:
            async for record in receipts:
                receipt = CommandReceipt.decode(record.payload)
                await record.ack()
                sent = sent_at.pop(receipt.command_id, None)
                if sent is not None:
                    latencies.append(time.perf_counter() - sent)
                if len(latencies) == count:
                    return time.perf_counter()
            raise RuntimeError("receipts ended early")

        reader = asyncio.create_task(read())
        pids = [m.process.pid for m in members]
        cpu_before = [process_cpu(pid) for pid in pids]
        broker_before = process_cpu(broker_pid) if broker_pid else 0.0
        client_before = time.process_time()
        machine_before = machine_cpu()
        started = time.perf_counter()
        for index, batch in enumerate(batches):
            if rate is not None:
                ahead = started + index * size / rate - time.perf_counter()
                if ahead > 0:
                    await asyncio.sleep(ahead)  # pacing the load, not synchronising
            now = time.perf_counter()
            for command_id, _ in batch:
                sent_at[command_id] = now
            await client.send_many([message for _, message in batch])
        ended = await asyncio.wait_for(reader, 300)
        node_cpu = [process_cpu(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
        busy, total = (after - before for after, before in zip(machine_cpu(), machine_before, strict=True))
        ours = sum(node_cpu) + (process_cpu(broker_pid) - broker_before if broker_pid else 0.0)
        ours += time.process_time() - client_before
        latencies.sort()
        wall = ended - started
        return {
            "commands_per_node_cpu_s": count / sum(node_cpu),
            "cpu": {
                "node_cpu_s": [round(c, 2) for c in node_cpu],
                "node_cpu_ms_per_command": round(1000 * sum(node_cpu) / count, 3),
                "node_cores": round(sum(node_cpu) / wall, 2),
                "broker_cpu_s": round(process_cpu(broker_pid) - broker_before, 2) if broker_pid else None,
                "client_cpu_s": round(time.process_time() - client_before, 2),
                "machine_busy_cores": round(busy / (ended - started), 2),
                "machine_cores": round(total / (ended - started), 2),
                "others_cpu_s": round(max(0.0, busy - ours), 2),
                "load_average": [round(v, 2) for v in os.getloadavg()],
                "wall_s": round(ended - started, 2),
            },
            "throughput": count / (ended - started),
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        }
    finally:
        for member in members:
            member.stop()
        await receipts.close()
        await client.close()


async def run(h: Harness) -> list[Figure]:
    bootstrap, broker = bootstrap_or_tansu()
    broker_pid = broker.process.pid if broker is not None and broker.process is not None else None
    counts = (1, 2, 3)
    try:
        count = h.n(getattr(h.options, "commands", None) or 6_000)
        aggregates = max(60, count // 10)
        rounds: dict[int, list[dict[str, Any]]] = {nodes: [] for nodes in counts}
        for _ in range(max(1, min(h.repeat, 3))):
            for nodes in counts:
                rounds[nodes].append(
                    await one_run(bootstrap, nodes, count, aggregates, broker_pid=broker_pid)
                )
        paced = {
            nodes: await one_run(bootstrap, nodes, h.n(1_000), aggregates, rate=PACED_RATE)
            for nodes in counts
        }
        wall = {nodes: statistics.median(r["throughput"] for r in rounds[nodes]) for nodes in counts}
        per_cpu = {
            nodes: statistics.median(r["commands_per_node_cpu_s"] for r in rounds[nodes]) for nodes in counts
        }
        figures: list[Figure] = []
        for nodes in counts:
            runs = rounds[nodes]
            # the round whose throughput is the median stands for the CPU detail
            middle = sorted(runs, key=lambda r: r["throughput"])[(len(runs) - 1) // 2]
            ratio = per_cpu[nodes] / per_cpu[1]
            detail: dict[str, Any] = {
                "nodes": nodes,
                "commands": count,
                "aggregates": aggregates,
                "partitions": PARTITIONS,
                "rounds": len(runs),
                "backlog_p50_ms_to_committed_receipt": round(middle["p50_ms"], 1),
                "backlog_p99_ms_to_committed_receipt": round(middle["p99_ms"], 1),
                "paced_rate": PACED_RATE,
                "paced_p50_ms_to_committed_receipt": round(paced[nodes]["p50_ms"], 1),
                "paced_p99_ms_to_committed_receipt": round(paced[nodes]["p99_ms"], 1),
                "speedup_over_1_node": round(wall[nodes] / wall[1], 2),
                "commands_per_node_cpu_s": round(per_cpu[nodes], 1),
                "cpu_normalised_ratio_over_1_node": round(ratio, 2),
                "speedup_at_the_1_node_cpu_share": round(nodes * ratio, 2),
                "throughput_rounds": [round(r["throughput"], 1) for r in runs],
                "commands_per_node_cpu_s_rounds": [round(r["commands_per_node_cpu_s"], 1) for r in runs],
                "node_cores_rounds": [r["cpu"]["node_cores"] for r in runs],
                "others_cpu_s_rounds": [r["cpu"]["others_cpu_s"] for r in runs],
                "load_average_rounds": [r["cpu"]["load_average"][0] for r in runs],
                **middle["cpu"],
            }
            if nodes == 2:
                detail["goal_speedup"] = 1.6
            figures.append(
                Figure(
                    f"cluster intake on Kafka, {nodes} node(s): commands with receipts",
                    wall[nodes],
                    "commands/s",
                    detail=detail,
                )
            )
            figures.append(
                Figure(
                    f"cluster intake on Kafka, {nodes} node(s): commands per CPU-second of the nodes",
                    per_cpu[nodes],
                    "commands/node-CPU-s",
                    detail={
                        "nodes": nodes,
                        "cpu_normalised_ratio_over_1_node": round(ratio, 2),
                        "speedup_at_the_1_node_cpu_share": round(nodes * ratio, 2),
                        "rounds": [round(r["commands_per_node_cpu_s"], 1) for r in runs],
                    },
                )
            )
        return figures
    finally:
        if broker is not None:
            broker.stop()


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--commands", type=int, default=None, help="commands per round (6,000)")


if __name__ == "__main__":
    Harness.main("cluster_intake", run, __doc__, options=_options)
