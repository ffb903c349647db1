"""The OpenAPI document: the real body schemas and error responses, and Schemathesis run
against the live app (valid and invalid requests generated from the document) finding no
server error and no answer the document does not describe."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, positive_data_acceptance

from tests.accounts import Account
from wow_core import WowApp
from wow_core.runtime.settings import WowSettings
from wow_http import HttpServer, create_app
from wow_http.settings import HttpSettings


@pytest.fixture(scope="module")
def live() -> Iterator[str]:
    """The bank served on a free loopback port from a thread of its own (Schemathesis calls
    synchronously); short waits, so that a stage no function of the bank reaches ends fast."""
    ready = threading.Event()
    url: list[str] = []
    stopping: list[asyncio.Event] = []
    loop: list[asyncio.AbstractEventLoop] = []

    async def serve() -> None:
        settings = WowSettings.load(command={"wait_timeout": 0.2})
        runtime = WowApp("bank", aggregates=[Account]).runtime(settings)
        async with runtime:
            server = HttpServer(create_app(runtime, HttpSettings(max_wait_timeout=0.1)), port=0)
            await server.start()
            stop = asyncio.Event()
            stopping.append(stop)
            loop.append(asyncio.get_running_loop())
            url.append(server.url)
            ready.set()
            await stop.wait()
            await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(30), "the server did not start"
    yield url[0]
    loop[0].call_soon_threadsafe(stopping[0].set)
    thread.join(30)


def test_every_command_has_its_body_schema_headers_and_error_responses(live: str) -> None:
    document = httpx.get(live + "/openapi.json").json()
    deposit = document["paths"]["/bank/account/{id}/Deposit"]["post"]
    schema = deposit["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["amount"] == {"exclusiveMinimum": 0, "title": "Amount", "type": "integer"}
    assert schema["required"] == ["amount"]
    headers = {p["name"] for p in deposit["parameters"] if p["in"] == "header"}
    assert {"Wow-Wait-Stage", "Wow-Wait-Timeout", "Wow-Wait-Function", "Wow-Request-Id"} <= headers
    assert set(deposit["responses"]) == {
        "200", "400", "401", "404", "409", "413", "415", "422", "500", "503", "504",
    }  # fmt: skip
    assert "/bank/account/Open" in document["paths"]  # a creation command, without an id
    assert "/bank/account/Deposit" not in document["paths"]
    for query in ("state", "events", "snapshot"):
        assert "get" in document["paths"][f"/bank/account/{{id}}/{query}"]
    assert "/wow/metadata" in document["paths"]


def test_the_metadata_names_what_is_registered(live: str) -> None:
    metadata = httpx.get(live + "/wow/metadata").json()
    (account,) = metadata["aggregates"]
    assert (account["context"], account["aggregate"], account["state"]) == ("bank", "account", "AccountState")
    assert {"Open", "Deposit", "Withdraw"} <= {command["name"] for command in account["commands"]}
    assert {"Opened", "Deposited"} <= set(account["events"])


def not_a_500(ctx: Any, response: Any, case: Any) -> bool:
    """No server error but the two the table names for a request that was valid: a wait
    past its deadline (504 WAIT_TIMEOUT: no function of the bank reaches PROJECTED)."""
    if response.status_code >= 500:
        body = response.json()
        assert (response.status_code, body["error_code"]) == (504, "WAIT_TIMEOUT"), response.text
    return True


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(live: str) -> None:
    schema = schemathesis.openapi.from_url(live + "/openapi.json")
    tested = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path.endswith("/Explode"):
            continue  # its command function raises on purpose: the documented 500 PROCESSING_ERROR
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=4,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                case.call_and_validate(
                    # A request valid for the schema may still be refused: an aggregate that
                    # does not exist (404), headers that do not go together (a Void command
                    # waited for past SENT: 400), which a schema cannot say.
                    excluded_checks=[not_a_server_error, positive_data_acceptance],
                    additional_checks=[not_a_500],
                    timeout=10,
                )

            try:
                run()
            except Unsatisfiable:
                # Nothing invalid can be sent to it (GET /wow/metadata takes no input).
                assert mode is GenerationMode.NEGATIVE, operation.path
                continue
            tested += 1
    assert tested >= 20  # every operation but Explode, valid and invalid (metadata: valid only)
