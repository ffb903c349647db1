"""How a runtime is served: the settings (``WOW_HTTP__*``), the runtime installer that
``wow run`` uses, the warning beyond loopback, root path and CORS, and mounting into an
application of one's own."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from tests.accounts import Account
from wow_core import WowApp, WowRuntime
from wow_core.runtime.settings import SettingsError, WowSettings
from wow_http import HttpServer, bearer_token, every_route, router, server_of, use_auth
from wow_http.settings import HttpSettings


def http_settings(monkeypatch: pytest.MonkeyPatch, **values: str) -> HttpSettings:
    for name, value in values.items():
        monkeypatch.setenv(f"WOW_HTTP__{name.upper()}", value)
    return WowSettings.load().section("http", HttpSettings)


def test_the_settings_are_read_from_wow_http_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = http_settings(
        monkeypatch,
        enabled="true",
        port="9000",
        root_path="/api",
        max_body_bytes="2048",
        cors__allow_origins="https://a.example,https://b.example",
        auth__bearer_tokens='["s3cret"]',
    )
    assert (settings.enabled, settings.port, settings.root_path, settings.max_body_bytes) == (
        True, 9000, "/api", 2048,
    )  # fmt: skip
    assert settings.cors.allow_origins == ["https://a.example", "https://b.example"]
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("name", "value"),
    [("port", "70000"), ("max_body_bytes", "0"), ("max_body_bytes", str(1 << 30)), ("root_path", "api/")],
)
def test_a_wrong_setting_names_its_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=f"WOW_HTTP__{name.upper()}"):
        http_settings(monkeypatch, **{name: value})


def test_without_enabled_the_runtime_serves_no_http(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = WowApp("bank", aggregates=[Account]).runtime()
    assert server_of(runtime) is None


def test_enabled_adds_the_server_as_the_last_dispatcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_HTTP__ENABLED", "true")
    runtime = WowApp("bank", aggregates=[Account]).runtime()
    server = server_of(runtime)
    assert server is not None
    assert runtime.dispatchers[-1] is server


def test_binding_beyond_loopback_without_auth_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("WOW_HTTP__ENABLED", "true")
    monkeypatch.setenv("WOW_HTTP__HOST", "0.0.0.0")
    with caplog.at_level(logging.WARNING, "wow.http"):
        WowApp("bank", aggregates=[Account]).runtime()
    assert "beyond loopback, and no auth guards the routes" in caplog.text
    caplog.clear()
    monkeypatch.setenv("WOW_HTTP__AUTH__BEARER_TOKENS", "t")
    with caplog.at_level(logging.WARNING, "wow.http"):
        WowApp("bank", aggregates=[Account]).runtime()
    assert "no auth" not in caplog.text


async def test_wow_run_serves_on_its_settings_with_the_apps_auth_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_HTTP__ENABLED", "true")
    monkeypatch.setenv("WOW_HTTP__PORT", "0")
    monkeypatch.setenv("WOW_HTTP__CORS__ALLOW_ORIGINS", "https://shop.example")
    app = WowApp("bank", aggregates=[Account])
    use_auth(app, every_route(bearer_token(["let-me-in"])))
    runtime = app.runtime()
    server = server_of(runtime)
    assert server is not None
    async with runtime, httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/wow/metadata")).status_code == 401
        answer = await client.get(
            "/wow/metadata",
            headers={"Authorization": "Bearer let-me-in", "Origin": "https://shop.example"},
        )
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "https://shop.example"
    assert server.port > 0


async def test_an_address_in_use_is_a_start_error_naming_it() -> None:
    first = HttpServer(FastAPI(), port=0)
    await first.start()
    try:
        second = HttpServer(FastAPI(), port=first.port)
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            await second.start()
    finally:
        await first.stop()


async def test_the_router_mounts_into_an_application_of_ones_own() -> None:
    runtime = WowApp("bank", aggregates=[Account]).runtime()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with runtime:
            yield

    shop = FastAPI(lifespan=lifespan)

    @shop.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    shop.include_router(router(runtime), prefix="/wow-api")
    async with lifespan(shop):
        server = HttpServer(shop, port=0)
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url) as client:
                assert (await client.get("/health")).json() == {"status": "ok"}
                opened = await client.post("/wow-api/bank/account/Open", json={"owner": "ada"})
                assert opened.status_code == 200
                refused = await client.post("/wow-api/bank/account/Open", json={"owner": 7})
                assert refused.status_code == 400
                assert refused.json()["error_code"] == "COMMAND_INVALID"
                paths = (await client.get("/openapi.json")).json()["paths"]
                assert "/wow-api/bank/account/{id}/Deposit" in paths
                assert "/health" in paths
        finally:
            await server.stop()


@asynccontextmanager
async def own_application(runtime: WowRuntime, api_router: APIRouter) -> AsyncIterator[httpx.AsyncClient]:
    """``api_router`` in an application of one's own, under uvicorn, the runtime started."""
    shop = FastAPI()
    shop.include_router(api_router, prefix="/bank-api")
    async with runtime:
        server = HttpServer(shop, port=0)
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url + "/bank-api") as client:
                yield client
        finally:
            await server.stop()


async def test_the_router_is_guarded_by_the_apps_auth_hook_and_refuses_in_the_error_form() -> None:
    app = WowApp("bank", aggregates=[Account])
    use_auth(app, every_route(bearer_token({"t-ada": "ada"}.get)))
    runtime = app.runtime()
    async with own_application(runtime, router(runtime)) as client:
        refused = await client.post("/bank/account/Open", json={"owner": "eve"})
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"] == "Bearer"
        assert (refused.json()["error_code"], refused.json()["error_msg"]) == (
            "UNAUTHORIZED",
            "a bearer token is required",
        )
        auth = {"Authorization": "Bearer t-ada"}
        opened = await client.post("/bank/account/Open", json={"owner": "ada"}, headers=auth)
        assert opened.status_code == 200
        id = opened.json()["aggregate"]["id"]
        events = await client.get(f"/bank/account/{id}/events", headers=auth)
        assert [stream["operator"] for stream in events.json()["streams"]] == ["ada"]


async def test_use_auth_after_the_runtime_was_built_still_guards_its_router() -> None:
    app = WowApp("bank", aggregates=[Account])
    runtime = app.runtime()  # built first: the hook reaches it all the same
    use_auth(app, every_route(bearer_token({"t-ada": "ada"}.get)))
    async with own_application(runtime, router(runtime)) as client:
        assert (await client.post("/bank/account/Open", json={"owner": "eve"})).status_code == 401


def test_use_auth_after_the_routes_were_made_is_refused_rather_than_leaving_them_open() -> None:
    app = WowApp("bank", aggregates=[Account])
    runtime = app.runtime()
    router(runtime)  # its guard is taken now: the settings' tokens, none here
    with pytest.raises(RuntimeError, match="comes after the routes of a runtime of this app were made"):
        use_auth(app, every_route(bearer_token({"t-ada": "ada"}.get)))


async def test_the_router_is_guarded_by_the_bearer_tokens_of_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_HTTP__AUTH__BEARER_TOKENS", "t-ops")
    runtime = WowApp("bank", aggregates=[Account]).runtime()
    async with own_application(runtime, router(runtime)) as client:
        assert (await client.get("/wow/metadata")).status_code == 401
        allowed = await client.get("/wow/metadata", headers={"Authorization": "Bearer t-ops"})
        assert allowed.status_code == 200


async def test_a_router_given_a_hook_of_public_routes_is_public(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_HTTP__AUTH__BEARER_TOKENS", "t-ops")
    runtime = WowApp("bank", aggregates=[Account]).runtime()
    async with own_application(runtime, router(runtime, auth=lambda route: None)) as client:
        assert (await client.get("/wow/metadata")).status_code == 200


def test_the_http_wait_notifier_without_an_http_server_is_a_settings_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WOW_COMMAND__WAIT__NOTIFIER", "http")
    with pytest.raises(SettingsError, match=r"WOW_COMMAND__WAIT__NOTIFIER=http needs WOW_HTTP__ENABLED=true"):
        WowApp("bank", aggregates=[Account]).runtime(WowSettings.load())
