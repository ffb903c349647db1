"""The operations page over HTTP (its ASGI app, in process): what it lists and shows,
who may act, and how it refuses bad input without changing anything."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from tests.service_members import Member
from tests.wow_compensation.page_support import TOKEN, PageService, page_service
from wow_compensation.model import ExecutionFailedStatus, Recoverable
from wow_compensation.store import Queue
from wow_compensation.ui import create_app
from wow_compensation.ui.app import SESSION_COOKIE


@pytest.fixture
async def service(
    fast_compensation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[PageService]:
    monkeypatch.setenv("WOW_COMPENSATION__SCHEDULER__ENABLED", "false")
    monkeypatch.setenv("WOW_COMPENSATION__RETRY__MIN_BACKOFF", "600")
    monkeypatch.setenv("WOW_COMPENSATION__RETRY__MAX_BACKOFF", "3600")
    async with page_service() as running:
        yield running


def client(service: PageService, token: str | None = TOKEN, mount: str = "") -> httpx.AsyncClient:
    app = create_app(service.recorder.operations(), token=token, refresh=1.0)
    if mount:
        app = Starlette(routes=[Mount(mount, app)])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://page")


async def signed_in(http: httpx.AsyncClient) -> httpx.AsyncClient:
    response = await http.post("/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303
    assert SESSION_COOKIE in response.cookies
    return http


def csrf(html: str) -> str:
    marker = 'name="csrf" value="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]


async def test_the_page_lists_the_queues_and_shows_a_record_read_only_without_a_token(
    service: PageService,
) -> None:
    record = await service.open_failing()
    async with client(service, token=None) as http:
        index = await http.get("/")
        assert index.status_code == 200
        html = index.text
        assert 'data-queue="next_retry">Next retry<span class="count">1</span>' in html
        for title in ("To retry", "Executing", "Non retryable", "Succeeded", "Unrecoverable"):
            assert f">{title}<span" in html
        assert f'data-record="{record.id}"' in html
        assert "Read-only" in html
        script = html.split("<script", 1)[1].split(">", 1)[0]
        assert 'src="/static/page.js"' in script  # served by the page itself: no CDN
        detail = (await http.get(f"/records/{record.id}")).text
        for shown in (
            "Broken",
            "the ledger database is down",
            "Traceback",
            "bank.account",
            "Ledger",
            "opened",
            "Max retries",
            "ExecutionFailedCreated",
            'data-status="FAILED"',
        ):
            assert shown in detail, shown
        assert "actions/prepare" not in detail  # no action without a token
        refused = await http.post(f"/records/{record.id}/actions/prepare", data={"expected_version": "1"})
        assert refused.status_code == 403
        assert "read-only" in refused.text
        assert (await service.record(record.id)).version == record.version
        api = (await http.get("/api/records", params={"processor": "Ledger"})).json()
        assert api["total"] == 1
        assert api["counts"]["next_retry"] == 1
        assert api["items"][0]["id"] == record.id


async def test_the_filters_are_exact_and_a_bad_one_is_refused(service: PageService) -> None:
    record = await service.open_failing()
    assert record.state.event is not None
    async with client(service) as http:
        for name, value in (
            ("id", record.id),
            ("event_id", record.state.event.event_id),
            ("aggregate_id", record.state.event.aggregate_id),
            ("aggregate", "bank.account"),
            ("processor", "Ledger"),
            ("function", "opened"),
        ):
            assert f'data-record="{record.id}"' in (await http.get("/", params={name: value})).text, name
            missed = (await http.get("/", params={name: value[:-1]})).text
            assert "No record matches." in missed, name  # exact, not a prefix
        assert "No record matches." in (await http.get("/", params={"queue": "succeeded"})).text
        bad = await http.get("/", params={"queue": "everything"})
        assert bad.status_code == 400
        assert "Unknown queue" in bad.text
        partial = await http.get("/", params={"partial": "1"})
        assert partial.text.startswith('<nav class="queues"')  # the live region alone


async def test_an_operator_retries_a_record_after_fixing_the_cause(service: PageService) -> None:
    record = await service.open_failing()
    async with client(service) as http:
        anonymous = await http.post(f"/records/{record.id}/actions/prepare", data={"expected_version": "1"})
        assert anonymous.status_code == 401
        wrong = await http.post("/login", data={"token": "not-the-operator-token"})
        assert wrong.status_code == 401
        await signed_in(http)
        page = (await http.get(f"/records/{record.id}")).text
        assert "actions/force-prepare" in page
        no_csrf = await http.post(f"/records/{record.id}/actions/prepare", data={"expected_version": "1"})
        assert no_csrf.status_code == 403
        service.ledger.switches.on.clear()
        done = await http.post(
            f"/records/{record.id}/actions/prepare",
            data={"expected_version": str(record.version), "csrf": csrf(page)},
        )
        assert done.status_code == 303
        assert done.headers["location"] == f"/records/{record.id}?done=prepare"
        succeeded = await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED)
        assert service.ledger.journal.count("opened") == 1
        # prepare on SUCCEEDED: refused by the record, nothing changed
        again = await http.post(
            f"/records/{record.id}/actions/prepare",
            data={"expected_version": str(succeeded.version), "csrf": csrf(page)},
        )
        assert again.status_code == 409
        assert "EXECUTION_SUCCEEDED" in again.text
        assert (await service.record(record.id)).version == succeeded.version


async def test_bad_actions_are_refused_and_change_nothing(service: PageService) -> None:
    record = await service.open_failing()
    version = str(record.version)
    async with client(service) as http:
        await signed_in(http)
        token = csrf((await http.get(f"/records/{record.id}")).text)
        cases = [
            (
                "prepare",
                {"expected_version": str(record.version + 5)},
                409,
                "changed since the page showed it",
            ),
            ("prepare", {"expected_version": "one"}, 400, "expected_version must be a whole number"),
            ("reboot", {"expected_version": version}, 400, "Unknown action"),
            (
                "apply-retry-spec",
                {
                    "expected_version": version,
                    "max_retries": "ten",
                    "min_backoff": "1",
                    "max_backoff": "2",
                    "execution_timeout": "3",
                },
                400,
                "max_retries",
            ),
            (
                "apply-retry-spec",
                {
                    "expected_version": version,
                    "max_retries": "3",
                    "min_backoff": "5",
                    "max_backoff": "2",
                    "execution_timeout": "3",
                },
                400,
                "max_backoff",
            ),
            ("mark-recoverable", {"expected_version": version, "recoverable": "MAYBE"}, 400, "RECOVERABLE"),
            (
                "mark-recoverable",
                {"expected_version": version, "recoverable": "RECOVERABLE"},
                409,
                "UNCHANGED",
            ),
            (
                "change-function",
                {
                    "expected_version": version,
                    "context": "",
                    "processor": "P",
                    "function": "f",
                    "kind": "EVENT",
                },
                400,
                "context",
            ),
            ("force-prepare", {"expected_version": version}, 400, "must be confirmed"),
        ]
        for action, data, status, why in cases:
            response = await http.post(f"/records/{record.id}/actions/{action}", data={**data, "csrf": token})
            assert response.status_code == status, (action, data, response.text)
            assert why in response.text, (action, why)
        unknown = await http.post(
            "/records/no-such-id/actions/prepare", data={"expected_version": "1", "csrf": token}
        )
        assert unknown.status_code == 404
        assert "No execution failure has the id no-such-id" in unknown.text
        assert (await service.record(record.id)).version == record.version
        assert (await http.get("/records/no-such-id")).status_code == 404


async def test_force_prepare_is_confirmed_twice_and_the_other_actions_apply(service: PageService) -> None:
    record = await service.open_failing()
    async with client(service) as http:
        await signed_in(http)
        token = csrf((await http.get(f"/records/{record.id}")).text)
        url = f"/records/{record.id}/actions/"

        async def post(action: str, **data: str) -> httpx.Response:
            version = str((await service.record(record.id)).version)
            return await http.post(url + action, data={"expected_version": version, "csrf": token, **data})

        assert (
            await post(
                "apply-retry-spec",
                max_retries="4",
                min_backoff="1",
                max_backoff="8",
                execution_timeout="30",
                enabled="yes",
            )
        ).status_code == 303
        assert (await service.record(record.id)).state.retry_spec.max_retries == 4
        assert (await post("mark-recoverable", recoverable="UNRECOVERABLE")).status_code == 303
        assert (await service.record(record.id)).state.recoverable is Recoverable.UNRECOVERABLE
        assert (
            await post(
                "change-function", context="bank", processor="Ledger", function="opened", kind="STATE_EVENT"
            )
        ).status_code == 303
        assert (
            await post("change-function", context="bank", processor="Ledger", function="opened", kind="EVENT")
        ).status_code == 303
        # UNRECOVERABLE: a retry is refused, a force retry asks once more before it runs
        assert (await post("prepare")).status_code == 409
        before = (await service.record(record.id)).version
        confirm = await post("force-prepare", confirm="yes")
        assert confirm.status_code == 200
        assert "Yes, force the retry" in confirm.text
        assert (await service.record(record.id)).version == before
        service.ledger.switches.on.clear()
        assert (await post("force-prepare", confirm="yes", confirmed="yes")).status_code == 303
        done = await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED)
        history = (await http.get(f"/records/{record.id}")).text
        for event in (
            "RetrySpecApplied",
            "RecoverableMarked",
            "FunctionChanged",
            "CompensationPrepared",
            "ExecutionSuccessApplied",
        ):
            assert event in history, event
        assert done.state.retry_state.retries == 1


async def test_a_script_applies_a_partial_retry_spec_and_unset_fields_keep_their_values(
    service: PageService,
) -> None:
    """As ``wow compensation apply-retry-spec ID --max-retries 4``: a field that is missing
    (or blank) keeps its value."""
    record = await service.open_failing()
    before = record.state.retry_spec
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with client(service) as http:

        async def post(**data: str | list[str]) -> httpx.Response:
            version = str((await service.record(record.id)).version)
            return await http.post(
                f"/records/{record.id}/actions/apply-retry-spec",
                data={"expected_version": version, **data},
                headers=bearer,
            )

        assert (await post(max_retries="4")).status_code == 303
        spec = (await service.record(record.id)).state.retry_spec
        assert spec == dataclasses.replace(before, max_retries=4)
        assert (await post(enabled="no", min_backoff=" ", execution_timeout="")).status_code == 303
        spec = (await service.record(record.id)).state.retry_spec
        assert spec == dataclasses.replace(before, max_retries=4, enabled=False)
        # the page's form: a hidden "no", then the ticked checkbox's "yes"
        assert (await post(enabled=["no", "yes"], max_backoff="7200")).status_code == 303
        spec = (await service.record(record.id)).state.retry_spec
        assert spec == dataclasses.replace(before, max_retries=4, max_backoff=7200.0)
        for data, why in [
            ({"enabled": "maybe"}, "enabled must be yes or no"),
            ({"max_retries": "ten"}, "max_retries must be a whole number"),
            ({"max_backoff": "1"}, "max_backoff must be &gt;= min_backoff"),
            ({}, "UNCHANGED"),
        ]:
            version = (await service.record(record.id)).version
            refused = await post(**data)
            assert refused.status_code in (400, 409), (data, refused.text)
            assert why in refused.text, (data, refused.text)
            assert (await service.record(record.id)).version == version, "a refusal changes nothing"


async def test_the_page_form_sends_every_field_and_an_unticked_enabled_as_no(service: PageService) -> None:
    record = await service.open_failing()
    async with client(service) as http:
        await signed_in(http)
        html = (await http.get(f"/records/{record.id}")).text
        form = html.split('id="a-apply-retry-spec"', 1)[1].split("</form>", 1)[0]
        assert '<input type="hidden" name="enabled" value="no">' in form
        assert form.index('name="enabled" value="no"') < form.index('name="enabled" value="yes"')


async def test_mounted_under_a_prefix_with_a_bearer_token(service: PageService) -> None:
    record = await service.open_failing()
    async with client(service, mount="/ops") as http:
        index = (await http.get("/ops/")).text
        assert f'href="/ops/records/{record.id}"' in index
        assert 'href="/ops/static/page.css"' in index
        assert (await http.get("/ops/static/page.js")).headers["content-type"].startswith("text/javascript")
        service.ledger.switches.on.clear()
        done = await http.post(
            f"/ops/records/{record.id}/actions/prepare",
            data={"expected_version": str(record.version)},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert done.status_code == 303
        assert done.headers["location"].startswith("/ops/records/")
        await service.settled(record.id, ExecutionFailedStatus.SUCCEEDED)


async def test_a_runtime_serves_the_page_when_enabled(
    fast_compensation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOW_COMPENSATION__SCHEDULER__ENABLED", "false")
    monkeypatch.setenv("WOW_COMPENSATION__UI__ENABLED", "true")
    monkeypatch.setenv("WOW_COMPENSATION__UI__PORT", "0")
    async with page_service() as service:
        server = service.recorder.page_server
        assert server is not None
        async with httpx.AsyncClient() as http:
            response = await http.get(server.url, timeout=5)
        assert response.status_code == 200
        assert "Event compensation" in response.text


def test_a_short_operator_token_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from wow_compensation.settings import UiSettings

    with pytest.raises(ValueError, match="at least 16 characters"):
        UiSettings(token="short")  # type: ignore[arg-type]


@pytest.mark.slow
async def test_wow_run_serves_the_page_and_stops_with_the_service() -> None:
    env = {
        **os.environ,
        "WOW_FAILURE_RECORDER": "compensation",
        "WOW_COMPENSATION__UI__ENABLED": "true",
        "WOW_COMPENSATION__UI__PORT": "0",
        "WOW_COMPENSATION__UI__TOKEN": TOKEN,
        "PYTHONUNBUFFERED": "1",
    }
    served = re.compile(r"operations page on (http://\S+)")
    member = Member("page", env, "tests.wow_compensation.domain:app")
    try:
        member.wait_for(lambda: any(served.search(line) for line in member.lines), 30)
        [url] = [m.group(1) for line in member.lines if (m := served.search(line))]
        async with httpx.AsyncClient() as http:
            page = await http.get(url, timeout=5)
            assert page.status_code == 200
            assert "Operator token" in page.text  # a token is configured: the sign-in form
            api = await http.get(url + "api/records", timeout=5)
            assert api.json() == {
                "total": 0,
                "counts": dict.fromkeys([q.value for q in Queue], 0),
                "items": [],
            }
        assert member.stop() == 0
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient() as http:
                await http.get(url, timeout=2)
    finally:
        member.kill()
