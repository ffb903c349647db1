"""Commands over HTTP: every row of the status table, every client mistake answered 4xx
with nothing sent, idempotent retries, the operator in the command's header."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.accounts import Account
from tests.wow_http.conftest import Served
from wow_core import WowApp, create_container
from wow_core.runtime.assembly import build_runtime, in_process_buses
from wow_http import bearer_token, every_route
from wow_http.settings import HttpSettings

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def events_of(served: Served, id: str) -> list[dict[str, Any]]:
    response = await served.client.get(f"/bank/account/{id}/events")
    if response.status_code == 404:
        return []
    streams: list[dict[str, Any]] = response.json()["streams"]
    return streams


# -- 200 -----------------------------------------------------------------------------------


async def test_a_creation_command_without_an_id_gets_a_new_aggregate(served: Served) -> None:
    response = await served.client.post("/bank/account/Open", json={"owner": "ada", "initial": 5})
    assert response.status_code == 200
    result = response.json()
    assert result["succeeded"] is True
    assert result["stage"] == result["wait_stage"] == "PROCESSED"
    assert result["aggregate_version"] == 1
    assert response.headers["Wow-Command-Id"] == result["command_id"]
    state = await served.client.get(f"/bank/account/{result['aggregate']['id']}/state")
    assert state.json()["state"] == {"owner": "ada", "balance": 5, "history": ["opened"]}


async def test_a_command_to_an_aggregate_returns_its_result(served: Served) -> None:
    id = await served.open(initial=5)
    response = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": 7})
    assert response.status_code == 200
    assert response.json()["result"] == {"balance": 12}
    assert response.json()["aggregate_version"] == 2


async def test_wait_stage_sent_answers_once_the_bus_took_it(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Deposit", json={"amount": 1}, headers={"Wow-Wait-Stage": "SENT"}
    )
    assert response.status_code == 200
    assert response.json()["stage"] == "SENT"
    assert response.json()["aggregate_version"] is None


async def test_a_void_command_is_sent_and_not_waited_for(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Deposit",
        json={"amount": 1},
        headers={"Wow-Wait-Stage": "SENT", "Wow-Void": "true"},
    )
    assert response.status_code == 200
    assert response.json()["stage"] == "SENT"


async def test_a_void_command_without_a_stage_is_waited_for_until_sent(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Deposit", json={"amount": 1}, headers={"Wow-Void": "true"}
    )
    assert response.status_code == 200
    assert (response.json()["stage"], response.json()["wait_stage"]) == ("SENT", "SENT")


async def test_a_retried_request_id_is_answered_as_a_duplicate_of_the_first(served: Served) -> None:
    id = await served.open()
    headers = {"Wow-Request-Id": "deposit-once-1"}
    first = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": 3}, headers=headers)
    again = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": 3}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert first.json()["duplicate"] is False
    assert again.json()["duplicate"] is True
    assert again.json()["aggregate_version"] == first.json()["aggregate_version"] == 2
    state = await served.client.get(f"/bank/account/{id}/state")
    assert state.json()["state"]["balance"] == 3


# -- the outcomes of the kernel ---------------------------------------------------------------


async def test_a_business_rule_refusal_is_422_with_its_code(served: Served) -> None:
    id = await served.open(initial=5)
    response = await served.client.post(f"/bank/account/{id}/Withdraw", json={"amount": 50})
    assert response.status_code == 422
    assert response.json()["error_code"] == "INSUFFICIENT_FUNDS"
    assert response.json()["error_msg"] == "balance 5 is below 50"


async def test_an_aggregate_that_does_not_exist_is_404(served: Served) -> None:
    response = await served.client.post("/bank/account/nobody/Deposit", json={"amount": 1})
    assert response.status_code == 404
    assert response.json()["error_code"] == "AGGREGATE_NOT_FOUND"


@pytest.mark.parametrize(
    "path", ["/bank/account/a-1/Fly", "/bank/vault/a-1/Deposit", "/bank/account/Deposit"]
)
async def test_an_unknown_command_or_aggregate_is_404_command_unhandled(served: Served, path: str) -> None:
    response = await served.client.post(path, json={"amount": 1})
    assert response.status_code == 404
    assert response.json()["error_code"] == "COMMAND_UNHANDLED"


async def test_creating_an_aggregate_twice_is_409(served: Served) -> None:
    await served.open(id="twice")
    response = await served.client.post("/bank/account/twice/Open", json={"owner": "bob"})
    assert response.status_code == 409
    assert response.json()["error_code"] == "DUPLICATE_AGGREGATE_ID"


async def test_an_expected_version_that_is_not_current_is_409(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Deposit", json={"amount": 1}, headers={"Wow-Aggregate-Version": "7"}
    )
    assert response.status_code == 409
    assert response.json()["error_code"] == "COMMAND_EXPECT_VERSION_CONFLICT"


async def test_a_command_function_that_raises_is_500_processing_error(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(f"/bank/account/{id}/Explode")
    assert response.status_code == 500
    assert response.json()["error_code"] == "PROCESSING_ERROR"


async def test_a_wait_past_its_deadline_is_504_naming_the_last_stage(served: Served) -> None:
    id = await served.open()
    # No projection runs in this service: PROJECTED is never reached.
    response = await served.client.post(
        f"/bank/account/{id}/Deposit",
        json={"amount": 1},
        headers={"Wow-Wait-Stage": "PROJECTED", "Wow-Wait-Timeout": "0.2"},
    )
    assert response.status_code == 504
    body = response.json()
    assert body["error_code"] == "WAIT_TIMEOUT"
    assert body["wait_stage"] == "PROJECTED"
    assert body["last_stage"] in {"PROCESSED", "SNAPSHOT"}  # snapshots run in parallel
    assert body["command_id"] == response.headers["Wow-Command-Id"]


async def test_a_command_the_bus_cannot_send_is_503(serve: Callable[..., Any]) -> None:
    container = create_container()
    in_process_buses(container)  # the in-memory bus itself: closed, its send raises
    runtime = build_runtime(WowApp("bank", aggregates=[Account]), container=container)
    async with serve(runtime=runtime) as served:
        id = await served.open()
        await served.runtime.command_bus.close()
        response = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": 1})
        assert response.status_code == 503
        assert response.json()["error_code"] == "SERVICE_UNAVAILABLE"
        assert "BusClosedError" in response.json()["error_msg"]


# -- client mistakes: 4xx, nothing sent --------------------------------------------------------


async def test_an_invalid_body_is_400_with_every_violation(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": 0})
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == "COMMAND_INVALID"
    assert body["errors"] == [{"path": "amount", "message": "Input should be greater than 0"}]
    missing = await served.client.post("/bank/account/Open", json={"initial": "many"})
    assert {e["path"] for e in missing.json()["errors"]} == {"owner", "initial"}
    assert len(await events_of(served, id)) == 1


async def test_a_body_refused_by_its_own_rule_is_400_like_the_gateway_refuses_it(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(f"/bank/account/{id}/Note", json={"text": "  "})
    assert response.status_code == 400
    assert response.json()["error_code"] == "COMMAND_INVALID"
    assert response.json()["errors"] == [{"path": "", "message": "text must not be blank"}]
    assert len(await events_of(served, id)) == 1


@pytest.mark.parametrize(
    ("content", "content_type", "status", "code"),
    [
        (b'{"amount": ', "application/json", 400, "MALFORMED_JSON"),
        (b"\xff\xfe", "application/json", 400, "MALFORMED_JSON"),
        (b"[1, 2]", "application/json", 400, "COMMAND_INVALID"),
        (b"amount=1", "application/x-www-form-urlencoded", 415, "UNSUPPORTED_MEDIA_TYPE"),
        (b'{"amount": 1}', "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
        (b'{"amount": 1}', "", 415, "UNSUPPORTED_MEDIA_TYPE"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_refused(
    served: Served, content: bytes, content_type: str, status: int, code: str
) -> None:
    id = await served.open()
    headers = {"Content-Type": content_type} if content_type else {}
    response = await served.client.post(f"/bank/account/{id}/Deposit", content=content, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error_code"] == code
    assert len(await events_of(served, id)) == 1


async def test_a_body_over_the_limit_is_413_declared_or_streamed(serve: Callable[..., Any]) -> None:
    async with serve(settings=HttpSettings(max_body_bytes=64)) as served:
        id = await served.open()
        big = b'{"amount": 1, "padding": "' + b"x" * 100 + b'"}'
        declared = await served.client.post(
            f"/bank/account/{id}/Deposit", content=big, headers={"Content-Type": "application/json"}
        )
        assert declared.status_code == 413
        assert declared.json()["error_code"] == "BODY_TOO_LARGE"

        async def chunks() -> Any:  # no Content-Length: chunked transfer
            for _ in range(4):
                yield big[:40]

        streamed = await served.client.post(
            f"/bank/account/{id}/Deposit", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert streamed.status_code == 413
        assert len(await events_of(served, id)) == 1


@pytest.mark.parametrize(
    ("headers", "where"),
    [
        ({"Wow-Wait-Stage": "DONE"}, "header.Wow-Wait-Stage"),
        ({"Wow-Wait-Stage": "processed"}, "header.Wow-Wait-Stage"),
        ({"Wow-Wait-Timeout": "1e9"}, "header.Wow-Wait-Timeout"),
        ({"Wow-Wait-Timeout": "0"}, "header.Wow-Wait-Timeout"),
        ({"Wow-Wait-Timeout": "-1"}, "header.Wow-Wait-Timeout"),
        ({"Wow-Wait-Timeout": "nan"}, "header.Wow-Wait-Timeout"),
        ({"Wow-Wait-Timeout": "soon"}, "header.Wow-Wait-Timeout"),
        ({"Wow-Request-Id": "has space"}, "header.Wow-Request-Id"),
        ({"Wow-Request-Id": "x" * 300}, "header.Wow-Request-Id"),
        ({"Wow-Aggregate-Version": "-1"}, "header.Wow-Aggregate-Version"),
        ({"Wow-Void": "perhaps"}, "header.Wow-Void"),
        ({"Wow-Wait-Function": "a.b.c.d"}, "header.Wow-Wait-Function"),
    ],
)
async def test_a_header_value_that_is_not_accepted_is_400_naming_it(
    served: Served, headers: dict[str, str], where: str
) -> None:
    id = await served.open()
    response = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": 1}, headers=headers)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error_code"] == "BAD_REQUEST"
    assert where in {e["path"] for e in body["errors"]}
    assert len(await events_of(served, id)) == 1


@pytest.mark.parametrize(
    "headers",
    [
        {"Wow-Wait-Function": "Summary.on_deposited"},  # a function with PROCESSED
        {"Wow-Void": "true", "Wow-Wait-Stage": "PROCESSED"},  # a Void command waited for past SENT
    ],
)
async def test_headers_that_do_not_go_together_are_400(served: Served, headers: dict[str, str]) -> None:
    id = await served.open()
    response = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": 1}, headers=headers)
    assert response.status_code == 400
    assert response.json()["error_code"] == "BAD_REQUEST"
    assert len(await events_of(served, id)) == 1


async def test_an_aggregate_id_over_255_characters_is_400(served: Served) -> None:
    response = await served.client.post(f"/bank/account/{'i' * 256}/Deposit", json={"amount": 1})
    assert response.status_code == 400


async def test_a_command_that_is_not_a_creation_command_sent_without_an_id_says_so(served: Served) -> None:
    response = await served.client.post("/bank/account/Deposit", json={"amount": 1})
    assert response.status_code == 404
    assert response.json()["error_msg"] == (
        "Deposit is not a creation command of bank.account: it goes to an aggregate, "
        "POST /bank/account/{id}/Deposit"
    )


async def test_a_query_of_an_aggregate_the_service_does_not_host_is_404(served: Served) -> None:
    response = await served.client.get("/bank/nope/acc-1/state")
    assert response.status_code == 404
    assert (response.json()["error_code"], response.json()["error_msg"]) == (
        "NOT_FOUND",
        "this service hosts no aggregate bank.nope",
    )
    unknown = await served.client.get("/bank/account/acc-1/nope")
    assert (unknown.status_code, unknown.json()["error_code"]) == (404, "NOT_FOUND")


async def test_a_method_or_path_the_api_does_not_have_is_answered_in_its_error_form(served: Served) -> None:
    assert (await served.client.get("/bank/account/x/Deposit")).json()["error_code"] == "METHOD_NOT_ALLOWED"
    missing = await served.client.post("/nowhere/at/all", json={})
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "COMMAND_UNHANDLED"


# -- who sends ------------------------------------------------------------------------------


async def test_each_token_of_the_settings_is_its_own_operator(serve: Callable[..., Any]) -> None:
    settings = HttpSettings.model_validate({"auth": {"bearer_tokens": ["t-one", "t-two"]}})
    async with serve(settings=settings) as served:
        for token in ("t-one", "t-two"):
            auth = {"Authorization": f"Bearer {token}"}
            opened = await served.client.post("/bank/account/Open", json={"owner": "ada"}, headers=auth)
            assert opened.status_code == 200, opened.text
            id = opened.json()["aggregate"]["id"]
            events = await served.client.get(f"/bank/account/{id}/events", headers=auth)
            assert [stream["operator"] for stream in events.json()["streams"]] == [
                {"t-one": "bearer:1", "t-two": "bearer:2"}[token]
            ]


async def test_the_operator_header_is_written_into_the_command(served: Served) -> None:
    id = await served.open()
    await served.client.post(
        f"/bank/account/{id}/Deposit", json={"amount": 1}, headers={"Wow-Operator": "eve"}
    )
    assert [stream["operator"] for stream in await events_of(served, id)] == ["", "eve"]


async def test_a_bearer_token_guards_every_route_and_names_the_operator(serve: Callable[..., Any]) -> None:
    tokens = {"t-ada": "ada"}
    async with serve(auth=every_route(bearer_token(tokens.get))) as served:
        refused = await served.client.post("/bank/account/Open", json={"owner": "ada"})
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"] == "Bearer"
        assert refused.json()["error_code"] == "UNAUTHORIZED"
        wrong = await served.client.get("/wow/metadata", headers={"Authorization": "Bearer t-eve"})
        assert wrong.status_code == 401
        auth = {"Authorization": "Bearer t-ada"}
        opened = await served.client.post(
            "/bank/account/Open", json={"owner": "ada"}, headers={**auth, "Wow-Operator": "mallory"}
        )
        assert opened.status_code == 200
        id = opened.json()["aggregate"]["id"]
        events = await served.client.get(f"/bank/account/{id}/events", headers=auth)
        assert [stream["operator"] for stream in events.json()["streams"]] == ["ada"]


async def test_the_server_stops_and_no_longer_answers(fresh: Served) -> None:
    assert (await fresh.client.get("/wow/metadata")).status_code == 200
    assert await fresh.server.stop() is True
    with pytest.raises(httpx.ConnectError):
        await fresh.client.get("/wow/metadata")


# -- streaming waits ----------------------------------------------------------------------------


def server_sent_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of every event of a ``text/event-stream`` body."""
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def test_a_streaming_wait_emits_each_stage_up_to_the_one_waited_for(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Deposit",
        json={"amount": 2},
        headers={"Accept": "text/event-stream", "Wow-Wait-Stage": "SNAPSHOT"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = server_sent_events(response.text)
    assert [name for name, _ in events] == ["SENT", "PROCESSED", "SNAPSHOT"]
    assert events[1][1]["result"] == {"balance": 2}
    assert {data["command_id"] for _, data in events} == {response.headers["Wow-Command-Id"]}


async def test_a_streaming_wait_past_its_deadline_ends_with_an_error_event(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Deposit",
        json={"amount": 2},
        headers={"Accept": "text/event-stream", "Wow-Wait-Stage": "PROJECTED", "Wow-Wait-Timeout": "0.3"},
    )
    events = server_sent_events(response.text)
    assert events[0][0] == "SENT"
    assert events[-1][0] == "error"
    assert events[-1][1]["error_code"] == "WAIT_TIMEOUT"
    assert events[-1][1]["last_stage"] in {"PROCESSED", "SNAPSHOT"}


async def test_a_streamed_rejection_ends_at_processed_with_its_code(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Withdraw",
        json={"amount": 9},
        headers={"Accept": "text/event-stream", "Wow-Wait-Stage": "SNAPSHOT"},
    )
    events = server_sent_events(response.text)
    assert [name for name, _ in events] == ["SENT", "PROCESSED"]
    assert events[-1][1]["error_code"] == "INSUFFICIENT_FUNDS"


async def test_a_streaming_request_refused_before_sending_is_a_plain_4xx(served: Served) -> None:
    id = await served.open()
    response = await served.client.post(
        f"/bank/account/{id}/Note", json={"text": " "}, headers={"Accept": "text/event-stream"}
    )
    assert response.status_code == 400
    assert response.json()["error_code"] == "COMMAND_INVALID"
