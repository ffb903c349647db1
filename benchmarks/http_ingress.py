"""HTTP figures: ``POST`` with ``Wow-Wait-Stage: PROCESSED`` on the embedded service,
beside a bare FastAPI endpoint that returns a constant, measured in the same run.

The service (the embedded in-memory runtime, 1,000 accounts, served by ``wow-http`` on
uvicorn) runs in a process of its own; this process is the client: 64 concurrent
keep-alive connections (a minimal HTTP/1.1 client: a load generator, like wrk). Each
round posts ``Add`` commands round-robin over the accounts and waits for PROCESSED, then
the same number of posts to ``/bare`` on the same server (a FastAPI route answering
``{"ok": true}``). Figures: requests per second, p50/p99 latency of one request, and the
ratio of the two throughputs (what the framework costs above HTTP; the client's own cost
is in both). Best of ``--repeat`` rounds.

    python -m benchmarks.http_ingress          # JSON in benchmarks/results/http_ingress.json
    python -m benchmarks.http_ingress --quick  # a short run
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from benchmarks._harness import Figure, Harness
from wow_core import Emit, WowApp, aggregate, on_command, on_sourcing

CLIENTS = 64
ACCOUNTS = 1000
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class BenchState:
    balance: int = 0


@dataclass(frozen=True, slots=True)
class Open:
    initial: int = 0


@dataclass(frozen=True, slots=True)
class Add:
    amount: Annotated[int, Field(gt=0)]


@dataclass(frozen=True, slots=True)
class Opened:
    initial: int


@dataclass(frozen=True, slots=True)
class Added:
    amount: int


@aggregate("bench", "account", state=BenchState)
class BenchAccount:
    @on_command(create=True)
    def open(self, state: BenchState, body: Open) -> Opened:
        return Opened(body.initial)

    @on_command
    def add(self, state: BenchState, body: Add) -> Emit[Added]:
        return Emit(Added(body.amount), result={"balance": state.balance + body.amount})

    @on_sourcing
    def opened(self, state: BenchState, event: Opened) -> BenchState:
        return BenchState(event.initial)

    @on_sourcing
    def added(self, state: BenchState, event: Added) -> BenchState:
        return BenchState(state.balance + event.amount)


async def serve() -> None:
    """The server process: the embedded service plus ``/bare``, until stdin closes."""
    from wow_http import HttpServer, create_app

    runtime = WowApp("bench", aggregates=[BenchAccount]).runtime()
    async with runtime:
        app = create_app(runtime)

        @app.post("/bare")
        async def bare() -> dict[str, bool]:
            return {"ok": True}

        server = HttpServer(app, port=0)
        await server.start()
        print(server.url, flush=True)
        await asyncio.to_thread(sys.stdin.read)  # the client closes it when done
        await server.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


class Connection:
    """One keep-alive HTTP/1.1 connection: a minimal client (a load generator, like wrk),
    so that the figures measure the server rather than a client library's pool."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader = reader
        self.writer = writer
        self.host = host

    @classmethod
    async def open(cls, url: str) -> Connection:
        address = url.removeprefix("http://").split("/", 1)[0]
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, address)

    async def post(self, path: str, body: bytes, headers: str = "") -> tuple[int, bytes]:
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n".encode()
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


Request = tuple[str, bytes, str]


async def load(connections: list[Connection], requests: list[Request]) -> tuple[float, list[float]]:
    """Seconds for ``requests`` over the connections (one worker each), and each one's latency."""
    latencies: list[float] = []
    next_index = iter(range(len(requests)))

    async def worker(connection: Connection) -> None:
        for index in next_index:
            path, body, headers = requests[index]
            started = time.perf_counter()
            status, answer = await connection.post(path, body, headers)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"{path} answered {status}: {answer[:200]!r}")

    started = time.perf_counter()
    await asyncio.gather(*(worker(connection) for connection in connections))
    return time.perf_counter() - started, latencies


async def run(h: Harness) -> list[Figure]:
    count = h.n(20_000)
    server = subprocess.Popen(  # noqa: ASYNC220 (started once, before the clock)
        [sys.executable, "-m", "benchmarks.http_ingress", "--serve"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = (await asyncio.to_thread(server.stdout.readline)).strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the server did not start (printed {url!r})")
        connections = [await Connection.open(url) for _ in range(CLIENTS)]
        try:
            await load(connections, [(f"/bench/account/a{i}/Open", b"{}", "") for i in range(ACCOUNTS)])
            wait = "Wow-Wait-Stage: PROCESSED\r\n"
            add = b'{"amount": 1}'
            commands = [(f"/bench/account/a{i % ACCOUNTS}/Add", add, wait) for i in range(count)]
            bare = [("/bare", b"{}", "") for _ in range(count)]
            best: dict[str, tuple[float, list[float]]] = {}
            for _ in range(h.repeat):
                for name, requests in (("wow", commands), ("bare", bare)):
                    seconds, latencies = await load(connections, requests)
                    if name not in best or seconds < best[name][0]:
                        best[name] = (seconds, latencies)
        finally:
            for connection in connections:
                await connection.close()
        rates = {name: count / seconds for name, (seconds, _) in best.items()}
        figures = []
        for name, label in (
            ("wow", "HTTP POST, wait PROCESSED"),
            ("bare", "HTTP POST, bare FastAPI constant"),
        ):
            seconds, latencies = best[name]
            detail = {"clients": CLIENTS, "requests": count}
            figures += [
                Figure(
                    f"{label}: throughput",
                    rates[name],
                    "requests/s",
                    ratio=rates["wow"] / rates["bare"] if name == "wow" else None,
                    ratio_of="bare FastAPI" if name == "wow" else None,
                    detail=detail,
                ),
                Figure(f"{label}: latency p50", percentile(latencies, 50) * 1e3, "ms"),
                Figure(f"{label}: latency p99", percentile(latencies, 99) * 1e3, "ms"),
            ]
        return figures
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


if __name__ == "__main__":
    if "--serve" in sys.argv:
        asyncio.run(serve())
    else:
        Harness.main("http_ingress", run, __doc__)
