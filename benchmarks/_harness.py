"""A tiny harness for wow-py benchmark modules: yardstick, timing, result files.

A benchmark module is ``benchmarks/<name>.py``, runnable as ``python -m benchmarks.<name>``
and found by ``python -m benchmarks``. With this harness it looks like::

    from benchmarks._harness import Figure, Harness

    async def run(h: Harness) -> list[Figure]:
        # best of --repeat runs, each right after a measurement of the queue hop
        seconds, hop = await h.paired(lambda: work(n))
        return [Figure("my thing: throughput", n / seconds, "messages/s", hops=seconds / n / hop)]

    if __name__ == "__main__":
        Harness.main("my_thing", run, __doc__)

``Harness.main`` parses ``--quick`` / ``--repeat``, runs, prints every figure and writes
``benchmarks/results/<name>.json`` (``benchmarks/results/quick/<name>.json`` with
``--quick``) in the shape ``python -m benchmarks`` plots:
``{"benchmark", "machine", "yardstick", "figures": [{"name", "value", "unit",
"hops"?, "goal_hops"?, "ratio"?, "ratio_of"?, ...}]}``. ``hops`` is the cost of one
operation in asyncio-queue hops measured in the same run; ``ratio`` is the figure over
another measure of the same run, which ``ratio_of`` names (the raw client, a peer, the
same run without a feature, a CPU-time ratio...), 1.0 meaning "equal".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from wow_core.model import AggregateId, BodyTypeRegistry, CommandMessage, MessageCodec, NamedAggregate

RESULTS = Path(__file__).parent / "results"
QUICK_RESULTS = RESULTS / "quick"
"""Where ``--quick`` runs write (not tracked by git)."""

T = TypeVar("T")


@dataclass
class Figure:
    """One measured figure; ``value`` in ``unit`` (``ops/s`` unless said otherwise)."""

    name: str
    value: float
    unit: str = "ops/s"
    hops: float | None = None
    """Cost of one operation in queue hops of the same run (lower is better)."""
    goal_hops: float | None = None
    ratio: float | None = None
    """This figure over another measure of the same run (1.0 = equal), named by ``ratio_of``."""
    ratio_of: str | None = None
    """What ``ratio`` is against (``"raw redis-py"``, ``"local-first off"``, ``"otel off, per CPU
    second"``...); required with a ratio, printed by :meth:`line`."""
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ratio is not None and not self.ratio_of:
            raise ValueError(f"{self.name}: a ratio says what it is against (ratio_of)")

    @property
    def meets_goal(self) -> bool | None:
        if self.goal_hops is None or self.hops is None:
            return None
        return self.hops <= self.goal_hops

    def as_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if v is not None and v != {}}
        if self.meets_goal is not None:
            data["meets_goal"] = self.meets_goal
        return data

    def line(self) -> str:
        text = f"{self.name}: {self.value:,.0f} {self.unit}"
        if self.hops is not None:
            text += f", {self.hops:.2f} queue hops"
            if self.goal_hops is not None:
                text += f" (goal <= {self.goal_hops:g}: {'met' if self.meets_goal else 'missed'})"
        if self.ratio is not None:
            text += f", ratio {self.ratio:.2f} of {self.ratio_of}"
        return text


class Harness:
    """Timing helpers and the yardstick, for one run of one benchmark module."""

    def __init__(
        self, *, quick: bool = False, repeat: int = 5, options: argparse.Namespace | None = None
    ) -> None:
        self.quick = quick
        self.repeat = max(1, repeat)
        self.options = options or argparse.Namespace()
        """The module's own command-line options (``Harness.main(..., options=...)``)."""
        self.failures: list[str] = []
        """What could not be measured (a broker that is down): the exit status is 1."""
        self._hop_pipelined: float | None = None
        self._hop_latency: float | None = None

    def n(self, full: int) -> int:
        """``full`` operations, or a tenth of them with ``--quick``."""
        return max(100, full // 10) if self.quick else full

    async def best_of(self, once: Callable[[], Awaitable[float | None]]) -> float:
        """The best of ``repeat`` runs, in seconds.

        ``once`` either returns its own measured seconds or ``None`` (then the whole call
        is timed). The best run is the least disturbed one on a shared machine.
        """
        best = float("inf")
        for _ in range(self.repeat):
            best = min(best, await self._timed(once))
        return best

    async def _timed(self, once: Callable[[], Awaitable[float | None]]) -> float:
        start = time.perf_counter()
        measured = await once()
        return measured if measured is not None else time.perf_counter() - start

    async def hop_once(self, latency: bool = False) -> float:
        """One measurement of the yardstick: seconds per queue hop.

        Pipelined (default): items through one ``asyncio.Queue`` from a producer to a
        consumer task, the producer not waiting. Latency: one item crossing a queue to a
        waiting task and waking it (ping-pong over two queues, halved).
        """
        if latency:
            rounds = self.n(20_000)
            ping: asyncio.Queue[int] = asyncio.Queue()
            pong: asyncio.Queue[int] = asyncio.Queue()

            async def echo() -> None:
                for _ in range(rounds):
                    pong.put_nowait(await ping.get())

            echoer = asyncio.create_task(echo())
            start = time.perf_counter()
            for i in range(rounds):
                ping.put_nowait(i)
                await pong.get()
            elapsed = time.perf_counter() - start
            await echoer
            hop = elapsed / (2 * rounds)
            self._hop_latency = min(self._hop_latency or hop, hop)
            return hop
        count = self.n(200_000)
        queue: asyncio.Queue[int] = asyncio.Queue()

        async def consume() -> None:
            for _ in range(count):
                await queue.get()

        consumer = asyncio.create_task(consume())
        start = time.perf_counter()
        for i in range(count):
            queue.put_nowait(i)
            if i % 64 == 63:
                await asyncio.sleep(0)
        await consumer
        hop = (time.perf_counter() - start) / count
        self._hop_pipelined = min(self._hop_pipelined or hop, hop)
        return hop

    async def paired(
        self, once: Callable[[], Awaitable[float | None]], *, latency: bool = False
    ) -> tuple[float, float]:
        """``(seconds of once, seconds per queue hop)`` of the best of ``repeat`` pairs.

        The yardstick is measured right before each run of the subject, so a busy
        neighbour disturbs both alike; the pair with the lowest subject-to-hop ratio is
        kept (the least disturbed comparison).
        """
        best: tuple[float, float] | None = None
        for _ in range(self.repeat):
            hop = await self.hop_once(latency)
            run = await self._timed(once)
            if best is None or run / hop < best[0] / best[1]:
                best = (run, hop)
        assert best is not None
        return best

    async def queue_hop(self) -> float:
        """Best seconds per pipelined queue hop so far (measuring it if never measured)."""
        if self._hop_pipelined is None:
            for _ in range(self.repeat):
                await self.hop_once()
        assert self._hop_pipelined is not None
        return self._hop_pipelined

    async def queue_hop_latency(self) -> float:
        """Best seconds per queue-hop latency so far (measuring it if never measured)."""
        if self._hop_latency is None:
            for _ in range(self.repeat):
                await self.hop_once(latency=True)
        assert self._hop_latency is not None
        return self._hop_latency

    def yardstick(self) -> dict[str, float]:
        data: dict[str, float] = {}
        if self._hop_pipelined is not None:
            data["queue_hops_per_second"] = round(1 / self._hop_pipelined)
            data["queue_hop_ns"] = round(self._hop_pipelined * 1e9, 1)
        if self._hop_latency is not None:
            data["queue_hop_latency_ns"] = round(self._hop_latency * 1e9, 1)
        return data

    @staticmethod
    def machine() -> dict[str, Any]:
        return {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "system": platform.system(),
            "cpus": os.cpu_count(),
        }

    @staticmethod
    def write(benchmark: str, figures: list[Figure], report: dict[str, Any], *, quick: bool = False) -> Path:
        """Write ``benchmarks/results/<benchmark>.json``; a ``--quick`` run (a tenth of the
        operations) ``benchmarks/results/quick/<benchmark>.json`` instead, never over the
        recorded figures."""
        folder = QUICK_RESULTS if quick else RESULTS
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{benchmark}.json"
        data = {
            "benchmark": benchmark,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **report,
            "figures": [figure.as_json() for figure in figures],
        }
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def main(
        cls,
        benchmark: str,
        run: Callable[[Harness], Coroutine[Any, Any, list[Figure]]],
        description: str | None = None,
        options: Callable[[argparse.ArgumentParser], None] | None = None,
        *,
        repeat: int = 5,
    ) -> None:
        """The command line of a benchmark module; ``options`` adds the module's own.

        Exits 1 when the run recorded failures (the figures measured are written)."""
        parser = argparse.ArgumentParser(
            prog=f"python -m benchmarks.{benchmark}",
            description=description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("--quick", action="store_true", help="a tenth of the operations")
        parser.add_argument("--repeat", type=int, default=repeat, help="runs per figure; the best is kept")
        if options is not None:
            options(parser)
        args = parser.parse_args()
        harness = cls(quick=args.quick, repeat=args.repeat, options=args)
        figures = asyncio.run(run(harness))
        report = {"machine": cls.machine(), "yardstick": harness.yardstick(), "repeat": harness.repeat}
        path = cls.write(benchmark, figures, report, quick=args.quick)
        for key, value in harness.yardstick().items():
            print(f"yardstick {key}: {value:,}")
        for figure in figures:
            print(figure.line())
        print(f"wrote {path}", file=sys.stderr)
        for failure in harness.failures:
            print(f"failed: {failure}", file=sys.stderr)
        if harness.failures:
            raise SystemExit(1)


def per_op(seconds: float, count: int) -> float:
    return seconds / count


class Ackable(Protocol):
    """An exchange or a transport record: what a consumer acknowledges."""

    async def ack(self) -> None: ...


async def ack_each(
    receiver: AsyncIterable[Ackable], count: int, answers: asyncio.Queue[int] | None = None
) -> None:
    """Iterate ``receiver`` acknowledging every item, until ``count`` were acknowledged.

    With ``answers``, the number acknowledged before each one is put on it right after
    its ack: a round-trip benchmark's sender waits on it.
    """
    if count <= 0:
        return
    seen = 0
    async for item in receiver:
        await item.ack()
        if answers is not None:
            answers.put_nowait(seen)
        seen += 1
        if seen == count:
            return


async def send_then_drain(
    send: Callable[[T], Awaitable[None]], items: Sequence[T], receivers: Sequence[AsyncIterable[Ackable]]
) -> float:
    """Seconds from the first ``send`` to the last ack: every receiver acknowledges
    ``len(items)`` items (consumer tasks start before the clock, sends are pipelined)."""
    consumers = [asyncio.create_task(ack_each(receiver, len(items))) for receiver in receivers]
    start = time.perf_counter()
    for item in items:
        await send(item)
    await asyncio.gather(*consumers)
    return time.perf_counter() - start


async def round_trips(
    send: Callable[[T], Awaitable[None]], items: Sequence[T], receiver: AsyncIterable[Ackable]
) -> float:
    """Seconds for ``items`` sent one at a time, each awaiting the consumer's answer
    (through an ``asyncio.Queue``) after its ack before the next is sent."""
    answers: asyncio.Queue[int] = asyncio.Queue()
    consumer = asyncio.create_task(ack_each(receiver, len(items), answers))
    start = time.perf_counter()
    for item in items:
        await send(item)
        await answers.get()
    elapsed = time.perf_counter() - start
    await consumer
    return elapsed


# -- the workload of the bus benchmarks --------------------------------------------------

ACCOUNT = NamedAggregate("bench", "account")
"""The one aggregate type the bus benchmarks send to."""


@dataclass
class Deposit:
    """The command (and event) body of the bus benchmarks."""

    amount: int
    note: str = "bench"


def commands(count: int, note: str = "bench") -> list[CommandMessage[Any]]:
    """``count`` deposit commands spread round-robin over 64 aggregate ids."""
    ids = [AggregateId(ACCOUNT, f"a-{n}") for n in range(64)]
    return [CommandMessage(ids[n % 64], Deposit(n, note), "deposit") for n in range(count)]


def codec() -> MessageCodec:
    """A codec that knows :class:`Deposit`."""
    return MessageCodec(BodyTypeRegistry([Deposit]))
