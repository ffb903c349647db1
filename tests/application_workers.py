"""``wow worker`` processes for the end-to-end tests of application commands, and the
scenario every transport runs: a worker killed with SIGKILL mid-stream, a second one
finishing the stream, then stopped with SIGTERM.

What it proves: nothing is lost (every operation has its effect), nothing has two
effects (the handler is idempotent by the producer's operation id), and a command
delivered twice is one the killed worker had started and not acknowledged; the caller
bounds how many (by the concurrency, where the transport acknowledges each record).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis

from tests.application_app import build
from tests.service_members import Member
from tests.wow_core.application.commands import ChargeCard
from wow_core.application import TransportRegistry
from wow_core.runtime.worker import READY
from wow_core.testing.support import eventually

ROOT = Path(__file__).resolve().parents[1]
APP = "tests.application_app:commands"
CONCURRENCY = 4


class Worker(Member):
    """One ``wow worker`` process; its output lines are kept and can be waited on."""

    def __init__(self, name: str, env: Mapping[str, str]) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "wow"), "worker", APP, "--transport", "payments"],
            cwd=ROOT,
            env={**env, "WOW_TEST_WORKER_NAME": name},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name=f"{name}-log", daemon=True).start()

    def ready(self) -> bool:
        return any(READY in line for line in self.lines)

    def terminate(self, timeout: float = 60) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


def worker_env(prefix: str, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "WOW_SERVICE_NAME": f"app-{uuid.uuid4().hex[:8]}",
        "WOW_APPLICATION__WORKER__CONCURRENCY": str(CONCURRENCY),
        "WOW_APPLICATION__WORKER__RETRY_BACKOFF": "0.05",
        "WOW_TEST_APP_PREFIX": prefix,
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@dataclass(frozen=True)
class Outcome:
    repeated: set[str]
    """Operations whose handler ran more than once."""
    started_by_the_killed_worker: set[str]
    """Operations whose handler the killed worker had started when it died."""
    acknowledged_by_the_killed_worker: int = 0
    """What ``after_kill`` counted of those as durably acknowledged (Kafka: committed offsets)."""


async def killed_mid_stream(
    registry: TransportRegistry,
    env: Mapping[str, str],
    redis: Redis,
    total: int,
    after_kill: Callable[[], Awaitable[int]] | None = None,
) -> Outcome:
    """Run the scenario; return what the caller bounds the repeated deliveries with."""
    prefix = env["WOW_TEST_APP_PREFIX"]
    bus, _ = build(registry)
    doomed = Worker("doomed", env)
    survivor: Worker | None = None
    try:
        await asyncio.to_thread(doomed.wait_for, doomed.ready, 90)
        ids = [
            (
                await bus.dispatch(ChargeCard(f"card-{n}", n), attributes={"tenant_id": f"t{n % 3}"})
            ).operation_id
            for n in range(total)
        ]

        async def some_effects() -> bool:
            return int(await redis.scard(f"{prefix}effects")) >= total // 4

        await eventually(some_effects, timeout=60)
        doomed.kill()
        effects_at_kill = int(await redis.scard(f"{prefix}effects"))
        assert effects_at_kill < total, "the worker was killed mid-stream"
        acknowledged = await after_kill() if after_kill is not None else 0

        survivor = Worker("survivor", env)
        await asyncio.to_thread(survivor.wait_for, survivor.ready, 90)

        async def all_effects() -> bool:
            return int(await redis.scard(f"{prefix}effects")) == total

        try:
            await eventually(all_effects, timeout=90)
        except AssertionError:
            raise AssertionError("".join(survivor.lines[-40:])) from None
        assert await asyncio.to_thread(survivor.terminate) == 0, "SIGTERM stops the worker gracefully"
        assert any("worker stopped" in line for line in survivor.lines)
    finally:
        doomed.kill()
        if survivor is not None:
            survivor.kill()
    # Read at the end: by now every write the killed worker sent before it died has landed.
    started = {member.decode() for member in await redis.smembers(f"{prefix}started:{doomed.name}")}
    effects = {member.decode() for member in await redis.smembers(f"{prefix}effects")}
    assert effects == set(ids), (sorted(effects - set(ids))[:3], sorted(set(ids) - effects)[:3])
    assert int(await redis.get(f"{prefix}applied") or 0) == total, "no command had its effect twice"
    tenants = {
        key.decode(): value.decode() for key, value in (await redis.hgetall(f"{prefix}tenants")).items()
    }
    assert tenants == {operation_id: f"t{n % 3}" for n, operation_id in enumerate(ids)}, (
        "the allowlisted context"
    )
    deliveries = {
        key.decode(): int(value) for key, value in (await redis.hgetall(f"{prefix}deliveries")).items()
    }
    assert set(deliveries) == set(ids)
    assert max(deliveries.values()) <= 2, "a command comes again once at most, after the one crash"
    repeated = {operation_id for operation_id, count in deliveries.items() if count > 1}
    assert repeated <= started, "only commands the killed worker had started come again"
    return Outcome(repeated, started, acknowledged)
