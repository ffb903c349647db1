"""Fixtures of the wow_nats tests: a real JetStream server on loopback, isolated names.

Every test gets its own topic prefix and stream prefix; the streams it created are
deleted afterwards. Without a server the tests skip, except under ``CI=true`` where
they fail.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import nats
import pytest

from wow_nats import NatsSettings, NatsTransport

NATS_URL = os.environ.get("WOW_TEST_NATS_URL", "nats://127.0.0.1:4222")


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 4222), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def nats_url() -> str:
    if not _reachable(NATS_URL):
        message = f"NATS JetStream is not reachable at {NATS_URL} (start `nats-server -js`)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return NATS_URL


@dataclass
class Names:
    """Unique names of one test: topics under ``t<ns>.``, streams under ``wowt<ns>_``."""

    ns: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    @property
    def topic_prefix(self) -> str:
        return f"t{self.ns}."

    @property
    def stream_prefix(self) -> str:
        return f"wowt{self.ns}_"

    def topic(self, context: str = "ctx", aggregate: str = "agg", kind: str = "command") -> str:
        return f"{self.topic_prefix}{context}.{aggregate}.{kind}"

    def group(self, name: str = "g") -> str:
        return f"{name}.{self.ns}"


@pytest.fixture
def names() -> Names:
    return Names()


MakeTransport = Callable[..., NatsTransport]


async def delete_streams(url: str, part: str) -> None:
    """Delete every stream whose name contains ``part``."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for info in await js.streams_info():
            if info.config.name and part in info.config.name:
                await js.delete_stream(info.config.name)
    finally:
        await nc.close()


@pytest.fixture
async def make_transport(nats_url: str, names: Names) -> AsyncIterator[MakeTransport]:
    created: list[NatsTransport] = []

    def make(**overrides: Any) -> NatsTransport:
        values: dict[str, Any] = {"servers": [nats_url], "stream_prefix": names.stream_prefix}
        values.update(overrides)
        transport = NatsTransport(NatsSettings(**values), topic_prefix=names.topic_prefix)
        created.append(transport)
        return transport

    yield make
    for transport in created:
        await transport.close()
    await delete_streams(nats_url, names.stream_prefix)


@pytest.fixture
async def raw_js(nats_url: str) -> AsyncIterator[nats.js.JetStreamContext]:
    """A plain nats-py JetStream context, to look behind the transport's back."""
    nc = await nats.connect(nats_url)
    yield nc.jetstream()
    await nc.close()
