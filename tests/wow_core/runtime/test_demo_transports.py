"""``wow demo`` runs unchanged over the broker transports (the broker issues' end-to-end check).

A broker that is unreachable skips its case, except with ``CI=true`` where it fails.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from wow_core.runtime.cli import main

REPO = Path(__file__).parents[3]
BROKERS = {"redis": ("127.0.0.1", 6379), "nats": ("127.0.0.1", 4222)}


def _reachable(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=1):
            return True
    except OSError:
        return False


def _drop_redis_streams(prefix: str) -> None:
    import redis

    client = redis.Redis(*BROKERS["redis"])
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def _drop_nats_streams(prefix: str) -> None:
    import asyncio

    import nats

    async def drop() -> None:
        connection = await nats.connect(f"nats://{BROKERS['nats'][0]}:{BROKERS['nats'][1]}")
        try:
            js = connection.jetstream()
            # the streams are named after the topic prefix, its dots made underscores
            stream_prefix = prefix.replace(".", "_")
            for info in await js.streams_info():
                if info.config.name and info.config.name.startswith(stream_prefix):
                    await js.delete_stream(info.config.name)
        finally:
            await connection.close()

    asyncio.run(drop())


@pytest.mark.slow
@pytest.mark.parametrize("transport", sorted(BROKERS))
def test_the_demo_runs_unchanged_over_a_broker(
    transport: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _reachable(BROKERS[transport]) and os.environ.get("CI") != "true":
        pytest.skip(f"{transport} is not reachable on {BROKERS[transport]}")
    monkeypatch.chdir(REPO)
    for key in [k for k in os.environ if k.startswith("WOW_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("WOW_TRANSPORT", transport)
    prefix = f"wowdemo{uuid.uuid4().hex[:10]}."
    monkeypatch.setenv("WOW_MESSAGING__TOPIC_PREFIX", prefix)  # streams of this run only
    # Redis keeps the reference stream names (<context>.<aggregate>:<kind>) under its own prefix
    monkeypatch.setenv("WOW_REDIS__KEY_PREFIX", prefix)
    try:
        assert main(["demo", "--accounts", "4", "--transfers", "8", "--concurrency", "4"]) == 0
    finally:
        if transport == "redis":
            _drop_redis_streams(prefix)
        elif transport == "nats":
            _drop_nats_streams(prefix)
    out = capsys.readouterr().out
    assert f"transport {transport}" in out
    assert "duplicate of version" in out
    assert "conserved" in out
