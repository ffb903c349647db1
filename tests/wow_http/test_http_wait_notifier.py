"""The http wait notifier: a caller process waits for a command that a ``wow run``
process handles, and the stages come back as posts to the caller's wait route; the route
refuses what is not a signal for a process waiting here."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from tests.service_members import Member
from tests.services import free_port
from tests.wait_members import record, serving
from tests.wow_http.test_http_processes import JOURNAL, _delete, base_env
from tests.wow_kafka.journal_app import Record
from wow_core import WowApp, WowRuntime
from wow_core.command import CommandStage, CommandWait
from wow_core.spi import WaitEndpoint, WaitSignal
from wow_http import server_of
from wow_http.settings import HttpSettings
from wow_http.wait_notifier import HttpWaitNotifier, advertised_url

pytestmark = [pytest.mark.redis, pytest.mark.slow]
in_the_modules_loop = pytest.mark.asyncio(loop_scope="module")  # the loop of caller_and_member


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def caller_and_member(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WowRuntime]:
    """The caller (this process, hosting nothing, serving HTTP) and one ``wow run``
    member processing the journal ledger, for the whole module."""
    monkeypatch = pytest.MonkeyPatch()
    tmp_path = tmp_path_factory.mktemp("journals")
    prefix = f"wowtest:{uuid.uuid4().hex[:10]}:"
    shared = {
        "WOW_TRANSPORT": "redis",
        "WOW_REDIS__URL": "redis://127.0.0.1:6379/0",
        "WOW_REDIS__KEY_PREFIX": prefix,
        "WOW_REDIS__BLOCK_TIME": "0.2",
        "WOW_COMMAND__WAIT__NOTIFIER": "http",
        "WOW_TEST_JOURNAL_DIR": str(tmp_path),
    }
    member = Member("journal", {**base_env(WOW_HTTP__PORT=str(free_port())), **shared}, app=JOURNAL)
    try:
        await serving(member)
        for name, value in {
            **shared,
            "WOW_HTTP__ENABLED": "true",
            "WOW_HTTP__PORT": str(free_port()),
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("WOW_SERVICE_NAME", f"caller-{uuid.uuid4().hex[:6]}")
        runtime = WowApp("", body_types=[Record]).runtime()  # hosts nothing: the member processes
        async with runtime:
            yield runtime
    finally:
        monkeypatch.undo()
        assert member.stop() == 0, "".join(member.lines[-20:])
        await _delete(prefix)


@in_the_modules_loop
async def test_stages_reached_in_another_process_come_back_over_http(caller_and_member: WowRuntime) -> None:
    runtime = caller_and_member
    assert runtime.wait_notifier is not None
    assert str(runtime.wait_notifier.endpoint).startswith("http:http://127.0.0.1:")
    processed = await runtime.gateway.send_and_wait(record("k-1"), CommandWait.processed(), timeout=20)
    assert (processed.stage, processed.succeeded, processed.aggregate_version) == (
        CommandStage.PROCESSED,
        True,
        1,
    )
    snapshot = await runtime.gateway.send_and_wait(record("k-2"), CommandWait.snapshot(), timeout=20)
    assert snapshot.stage is CommandStage.SNAPSHOT
    assert runtime.wait_notifier.sink.received >= 2
    assert runtime.wait_notifier.sink.malformed == 0


@in_the_modules_loop
async def test_the_wait_route_refuses_what_is_not_a_signal_for_a_waiting_process(
    caller_and_member: WowRuntime,
) -> None:
    runtime = caller_and_member
    server = server_of(runtime)
    assert server is not None
    assert runtime.wait_notifier is not None
    own = str(runtime.wait_notifier.endpoint).removeprefix("http:")
    async with httpx.AsyncClient(timeout=5) as client:
        stranger = await client.post(server.url + "/wow/waits/" + "0" * 32, json={})
        assert (stranger.status_code, stranger.json()["error_code"]) == (404, "NOT_WAITING")
        assert (await client.post(server.url + "/wow/waits/not-a-process", json={})).status_code == 400
        text = await client.post(own, content=b"v=1", headers={"Content-Type": "text/plain"})
        assert text.status_code == 415
        garbage = await client.post(own, content=b'{"v": 99}', headers={"Content-Type": "application/json"})
        assert garbage.status_code == 202  # taken, then dropped and counted by the sink
    assert runtime.wait_notifier.sink.malformed == 1


async def test_the_notifier_posts_only_to_wait_routes() -> None:
    notifier = HttpWaitNotifier("http://127.0.0.1:1")
    signal = WaitSignal("c-1", CommandStage.PROCESSED)
    with pytest.raises(ValueError, match="not an http wait endpoint"):
        await notifier.notify(WaitEndpoint("http", "http://169.254.169.254/latest/meta-data"), signal)


def test_the_advertised_url_needs_a_reachable_address() -> None:
    assert advertised_url(HttpSettings(port=8081, root_path="/api")) == "http://127.0.0.1:8081/api"
    assert advertised_url(HttpSettings(port=0, advertised_url="http://svc-a:8080/")) == "http://svc-a:8080"
    with pytest.raises(ValueError, match="WOW_HTTP__ADVERTISED_URL"):
        advertised_url(HttpSettings(port=0))
    with pytest.raises(ValueError, match="WOW_HTTP__ADVERTISED_URL"):
        advertised_url(HttpSettings(host="0.0.0.0"))
