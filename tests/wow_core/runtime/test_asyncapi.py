"""``wow asyncapi``: the AsyncAPI 3.0 document of a service, validated against the official
AsyncAPI 3.0.0 JSON schema, and the real wire form validated against its messages."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from examples.bank.app import app
from examples.bank.domain import Account, Deposit, MoneyDeposited, OpenAccount

from wow_core.model import DomainEvent, DomainEventStream
from wow_core.model.wire import BodyTypeRegistry, MessageCodec
from wow_core.modeling import AggregateRegistry
from wow_core.runtime.asyncapi import asyncapi_document
from wow_core.runtime.cli import main
from wow_core.runtime.settings import WowSettings

ROOT = Path(__file__).resolve().parents[3]
# The official schemas, from the @asyncapi/specs package (pinned and checked by hash).
SPECS = "https://registry.npmjs.org/@asyncapi/specs/-/specs-6.11.1.tgz"
SPECS_SHA256 = "01af8744dc33c0c7eb2e908f6a955319ee58b70ecadc9387d1aeb16c0cd28928"
MEMBER = "package/schemas/3.0.0-without-$id.json"


@pytest.fixture(scope="module")
def asyncapi_schema() -> dict[str, Any]:
    cache = ROOT / ".tools" / "asyncapi" / "specs-6.11.1.tgz"
    if not cache.is_file():
        try:
            with urllib.request.urlopen(SPECS, timeout=30) as response:
                data = response.read()
        except OSError as error:
            if os.environ.get("CI") == "true":
                raise
            pytest.skip(f"the AsyncAPI schemas could not be downloaded: {error}")
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(data)
    data = cache.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SPECS_SHA256, (
        "the cached @asyncapi/specs is not the pinned one"
    )
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.extractfile(MEMBER)
        assert member is not None
        schema: dict[str, Any] = json.load(member)
    return schema


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return asyncapi_document(app.runtime(WowSettings(service_name="bank", transport="in_memory")))


def test_the_document_is_valid_asyncapi_3(document: dict[str, Any], asyncapi_schema: dict[str, Any]) -> None:
    errors = sorted(jsonschema.Draft7Validator(asyncapi_schema).iter_errors(document), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])
    assert document["asyncapi"] == "3.0.0"


def test_channels_are_the_topics_the_transport_uses(document: dict[str, Any]) -> None:
    addresses = {channel["address"] for channel in document["channels"].values()}
    for aggregate in ("account", "transfer", "notice"):
        assert {f"wow.bank.{aggregate}.{kind}" for kind in ("command", "event", "state")} <= addresses


def test_over_redis_the_channels_are_its_stream_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_TRANSPORT", "redis")
    document = asyncapi_document(app.runtime(WowSettings(service_name="bank")))
    addresses = {channel["address"] for channel in document["channels"].values()}
    assert "bank.account:command" in addresses


def test_operations_say_who_receives_and_who_sends(document: dict[str, Any]) -> None:
    operations = document["operations"]
    assert operations["bank.receive.bank.account.commands"]["action"] == "receive"
    assert operations["bank.send.bank.account.events"]["action"] == "send"
    projected = operations["bank.receive.bank.BankSummary.opened.bank.account"]
    assert projected["channel"] == {"$ref": "#/channels/wow.bank.account.event"}
    # the saga's return annotation names the command it sends, to an aggregate hosted here
    sends = operations["bank.send.bank.TransferNoticeSaga.completed.RecordNotice"]
    assert (sends["action"], sends["channel"]) == ("send", {"$ref": "#/channels/wow.bank.notice.command"})


def test_bodies_carry_their_real_schemas(document: dict[str, Any]) -> None:
    deposit = document["components"]["schemas"]["examples.bank.domain.Deposit"]
    assert deposit["properties"]["amount"]["exclusiveMinimum"] == 0
    assert deposit["required"] == ["amount"]


def _validate(document: dict[str, Any], message: str, wire: str) -> None:
    root = {**document, "$ref": f"#/components/messages/{message}/payload"}
    jsonschema.Draft7Validator(root).validate(json.loads(wire))


def _codec() -> MessageCodec:
    return MessageCodec(AggregateRegistry([Account]).register_body_types(BodyTypeRegistry()))


def test_the_wire_form_of_a_command_and_a_stream_matches_their_messages(document: dict[str, Any]) -> None:
    codec = _codec()
    command = AggregateRegistry([Account]).command(Deposit(5, "x"), "a-1")
    account = command.aggregate_id
    _validate(document, "bank.account.Deposit", codec.encode(command))
    event = DomainEvent(account, MoneyDeposited(5, "x"), "MoneyDeposited", 2, 1, True, command_id=command.id)
    stream = DomainEventStream(account, 2, (event,), command.id, command.id)
    _validate(document, "bank.account.event", codec.encode(stream))


def test_a_wrong_body_does_not_match(document: dict[str, Any]) -> None:
    codec = _codec()
    command = AggregateRegistry([Account]).command(OpenAccount("ann"))
    wire = json.loads(codec.encode(command))
    wire["b"]["owner"] = ""  # min_length 1
    with pytest.raises(jsonschema.ValidationError):
        _validate(document, "bank.account.OpenAccount", json.dumps(wire))
    wire = json.loads(codec.encode(command))
    with pytest.raises(jsonschema.ValidationError):  # an OpenAccount on the Deposit message
        _validate(document, "bank.account.Deposit", json.dumps(wire))


def test_wow_asyncapi_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["asyncapi", "examples.bank.app:app", "--title", "Bank"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["info"]["title"] == "Bank"
    assert main(["asyncapi", "no.such.module:app"]) == 2
    assert "cannot import" in capsys.readouterr().err


def test_the_documented_bank_document_is_up_to_date(document: dict[str, Any]) -> None:
    committed = json.loads((ROOT / "docs" / "reference" / "asyncapi-bank.json").read_text())
    assert committed == document, (
        "docs/reference/asyncapi-bank.json is stale: "
        "wow asyncapi examples.bank.app:app > docs/reference/asyncapi-bank.json"
    )
