"""``wow run`` serving HTTP as a separate process: commands and queries with httpx, ``wow
send`` and ``wow openapi`` as a user runs them, and two instances behind one Redis
transport whose HTTP waits complete wherever the command ran."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.service_members import Member, journal
from tests.wait_members import local_first
from wow_core.runtime.cli import main

pytestmark = pytest.mark.slow

HTTP_SERVING = re.compile(r"serving HTTP on (http://\S+)")
BANK = "tests.wow_http.bank_app:app"
JOURNAL = "tests.wow_kafka.journal_app:app"


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WOW_")}
    return {**env, "PYTHONUNBUFFERED": "1", "WOW_HTTP__ENABLED": "true", "WOW_HTTP__PORT": "0", **extra}


async def url_of(member: Member, timeout: float = 60) -> str:
    """The base URL a member serves HTTP on, once it logged it."""

    def found() -> bool:
        return any(HTTP_SERVING.search(line) for line in list(member.lines))

    await asyncio.to_thread(member.wait_for, found, timeout)
    return next(m.group(1) for line in member.lines if (m := HTTP_SERVING.search(line)))


@pytest.fixture(scope="module")
def bank() -> Iterator[tuple[Member, str]]:
    member = Member("bank", base_env(WOW_SERVICE_NAME=f"bank-{uuid.uuid4().hex[:6]}"), app=BANK)
    try:
        url = asyncio.run(url_of(member))
        yield member, url
    finally:
        assert member.stop() == 0, "".join(member.lines[-20:])


@pytest.fixture
async def client(bank: tuple[Member, str]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=bank[1], timeout=10) as client:
        yield client


async def test_wow_run_serves_commands_and_queries_over_http(client: httpx.AsyncClient) -> None:
    opened = await client.post("/bank/account/Open", json={"owner": "ada", "initial": 10})
    assert opened.status_code == 200, opened.text
    id = opened.json()["aggregate"]["id"]
    deposit = await client.post(f"/bank/account/{id}/Deposit", json={"amount": 5})
    assert deposit.json()["result"] == {"balance": 15}
    refused = await client.post(f"/bank/account/{id}/Withdraw", json={"amount": 500})
    assert refused.status_code == 422
    state = await client.get(f"/bank/account/{id}/state")
    assert state.json()["state"]["balance"] == 15
    assert state.json()["version"] == 2


def wow(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``wow *args`` in this process (the client side; the service is another process)."""
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_wow_send_prints_the_result_and_exits_by_outcome(
    bank: tuple[Member, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = bank[1]
    status, out, _ = wow(
        capsys, "send", "bank.account", "Open", '{"owner": "bob", "initial": 3}', "--url", url
    )
    assert status == 0
    id = json.loads(out)["aggregate"]["id"]
    status, out, _ = wow(
        capsys, "send", "bank.account", "Withdraw", '{"amount": 9}', "--id", id, "--url", url
    )
    assert (status, json.loads(out)["error_code"]) == (1, "INSUFFICIENT_FUNDS")
    status, out, _ = wow(
        capsys, "send", "bank.account", "Deposit", '{"amount": "x"}', "--id", id, "--url", url
    )
    assert (status, json.loads(out)["error_code"]) == (1, "COMMAND_INVALID")
    status, out, _ = wow(
        capsys, "send", "bank.account", "Deposit", '{"amount": 1}', "--id", id, "--url", url,
        "--wait", "PROJECTED", "--timeout", "0.3",
    )  # fmt: skip
    assert (status, json.loads(out)["error_code"]) == (3, "WAIT_TIMEOUT")
    status, _, err = wow(
        capsys, "send", "bank.account", "Deposit", "{}", "--id", id, "--url", "http://127.0.0.1:9"
    )
    assert status == 4
    assert "cannot be reached" in err
    status, _, err = wow(capsys, "send", "bank", "Deposit", "{}", "--url", url)
    assert status == 2
    assert "context.aggregate" in err


def test_wow_openapi_prints_the_document_of_the_routes_served(
    bank: tuple[Member, str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = wow(capsys, "openapi", BANK)
    assert status == 0, err
    document = json.loads(out)
    served = httpx.get(bank[1] + "/openapi.json", timeout=10).json()
    assert document["paths"].keys() == served["paths"].keys()
    assert "/bank/account/{id}/Deposit" in document["paths"]


@pytest.mark.redis
async def test_two_instances_behind_redis_answer_http_waits_wherever_the_command_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Then ``wow send --transport`` reaches them too, from a process that serves nothing."""
    prefix = f"wowtest:{uuid.uuid4().hex[:10]}:"
    env = base_env(
        WOW_TRANSPORT="redis",
        WOW_REDIS__URL="redis://127.0.0.1:6379/0",
        WOW_REDIS__KEY_PREFIX=prefix,
        WOW_REDIS__BLOCK_TIME="0.2",
        WOW_REDIS__BATCH_SIZE="1",  # spread the commands over both instances
        WOW_TEST_JOURNAL_DIR=str(tmp_path),
        **local_first(False),  # every command goes through Redis, to whichever instance reads it
    )
    members = [Member(f"journal-{n}", env, app=JOURNAL) for n in (1, 2)]
    try:
        urls = [await url_of(member) for member in members]
        answered: dict[str, int] = {}  # key -> the index of the instance that answered
        async with httpx.AsyncClient(timeout=15) as client:
            for round in range(40):
                keys = [f"k{round}-{n}-{uuid.uuid4().hex[:4]}" for n in range(2)]
                responses = await asyncio.gather(
                    *(
                        client.post(f"{urls[n]}/journal/ledger/{key}/Record", json={"key": key, "seq": 0})
                        for n, key in enumerate(keys)
                    )
                )
                for n, (key, response) in enumerate(zip(keys, responses, strict=True)):
                    assert response.status_code == 200, response.text
                    assert response.json()["stage"] == "PROCESSED"
                    answered[key] = n
                ran = [{key for key, _ in journal(tmp_path, m.process.pid)} for m in members]
                crossed = [key for key, n in answered.items() if key in ran[1 - n]]
                if crossed and all(ran):
                    break
        assert crossed, "every command ran in the instance that took its request"
        assert all(ran), "one instance processed nothing"
        # wow send --transport: a third process that serves nothing, over the same Redis.
        for name, value in env.items():
            if name.startswith("WOW_"):
                monkeypatch.setenv(name, value)
        monkeypatch.setenv("WOW_HTTP__ENABLED", "false")
        body = '{"key": "by-cli", "seq": 0}'
        status, out, err = await asyncio.to_thread(  # wow send runs its own event loop
            wow, capsys, "send", "journal.ledger", "Record", body, "--id", "by-cli", "--transport", JOURNAL
        )
        assert status == 0, err
        assert (json.loads(out)["stage"], json.loads(out)["aggregate_version"]) == ("PROCESSED", 1)
        assert any(("by-cli", 0) in journal(tmp_path, m.process.pid) for m in members)
        status, _, err = await asyncio.to_thread(
            wow, capsys, "send", "journal.ledger", "Fly", "{}", "--id", "x", "--transport", JOURNAL
        )
        assert status == 1  # refused: unknown
        assert err.startswith("wow send: ")
        assert "has no command 'Fly'" in err
    finally:
        for member in members:
            member.stop()
        await _delete(prefix)


async def _delete(prefix: str) -> None:
    from redis.asyncio import Redis

    redis = Redis.from_url("redis://127.0.0.1:6379/0")
    keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=500)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()
