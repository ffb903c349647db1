"""A command body over HTTP is checked by the rules a receiver applies to it from the wire
(the codec's validator, WOW_COMMAND__STRICT_BODIES): nothing is dropped, nothing converted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.accounts import Account
from tests.wow_http.conftest import Served
from wow_core import WowApp
from wow_core.runtime.settings import WowSettings

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def balance_of(served: Served, id: str) -> int:
    state = (await served.client.get(f"/bank/account/{id}/state")).json()
    return int(state["state"]["balance"])


async def test_an_unknown_field_is_400_command_invalid_naming_it(served: Served) -> None:
    response = await served.client.post("/bank/account/acc-9/Open", json={"owner": "bob", "intial": 100})
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == "COMMAND_INVALID"
    assert [error["path"] for error in body["errors"]] == ["intial"]
    assert (await served.client.get("/bank/account/acc-9/state")).status_code == 404


@pytest.mark.parametrize("amount", ["5", True, 1.0], ids=["text", "bool", "float"])
async def test_a_value_of_another_type_is_400_and_nothing_is_withdrawn(
    served: Served, amount: object
) -> None:
    id = await served.open(initial=100)
    response = await served.client.post(f"/bank/account/{id}/Withdraw", json={"amount": amount})
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == "COMMAND_INVALID"
    assert body["errors"] == [{"path": "amount", "message": "Input should be a valid integer"}]
    assert await balance_of(served, id) == 100


async def test_the_lax_mode_is_pydantics_for_http_too(
    serve: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOW_COMMAND__STRICT_BODIES", "false")
    runtime = WowApp("bank", aggregates=[Account]).runtime(WowSettings.load())
    async with serve(runtime=runtime) as served:
        opened = await served.client.post("/bank/account/Open", json={"owner": "bob", "intial": 100})
        assert opened.status_code == 200
        id = opened.json()["aggregate"]["id"]
        withdrawn = await served.client.post(f"/bank/account/{id}/Deposit", json={"amount": "5"})
        assert withdrawn.status_code == 200
        assert await balance_of(served, id) == 5
