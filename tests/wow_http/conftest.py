"""A real uvicorn on a free loopback port, serving a runtime of the test bank account."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.accounts import Account
from wow_core import WowApp, WowRuntime
from wow_http import AuthHook, HttpServer, create_app
from wow_http.settings import HttpSettings


@dataclass
class Served:
    runtime: WowRuntime
    server: HttpServer
    client: httpx.AsyncClient

    async def open(self, owner: str = "ada", initial: int = 0, id: str | None = None) -> str:
        """Open an account; its id."""
        path = f"/bank/account/{id}/Open" if id else "/bank/account/Open"
        response = await self.client.post(path, json={"owner": owner, "initial": initial})
        assert response.status_code == 200, response.text
        opened: str = response.json()["aggregate"]["id"]
        return opened


@asynccontextmanager
async def serving(
    app: WowApp | None = None,
    settings: HttpSettings | None = None,
    auth: AuthHook | None = None,
    runtime: WowRuntime | None = None,
) -> AsyncIterator[Served]:
    runtime = runtime or (app or WowApp("bank", aggregates=[Account])).runtime()
    async with runtime:
        server = HttpServer(create_app(runtime, settings or HttpSettings(), auth=auth), port=0)
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=10.0) as client:
                yield Served(runtime, server, client)
        finally:
            await server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served() -> AsyncIterator[Served]:
    """One service for a whole module (tests use ids of their own); a test that changes
    the service itself (closes its bus, its limits, its auth) starts its own with ``serve``."""
    async with serving() as served:
        yield served


@pytest_asyncio.fixture(loop_scope="module")
async def fresh() -> AsyncIterator[Served]:
    """A service of its own, in the module's event loop (as ``served``)."""
    async with serving() as served:
        yield served


@pytest.fixture
def serve() -> Callable[..., Any]:
    return serving
