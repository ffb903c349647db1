"""A record's message written directly (:mod:`wow_nats.hpub`) is the very command nats-py's
``Client.publish`` writes for the same headers, and the transport sends it that way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NatsClient

from tests.wow_nats.conftest import MakeTransport, Names
from tests.wow_nats.support import message, next_record, opened
from wow_nats.hpub import MSG_ID_HEADER, record_header, supports_direct_writes, write_hpub
from wow_nats.record import TIMESTAMP_HEADER, key_headers

pytestmark = pytest.mark.nats

KEYS = ["acc-7", "", "é ü", " padded ", "line\r\nbreak", "tab\there", "a/b:c"]


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[NatsClient]:
    nc = await nats.connect(nats_url)
    yield nc
    await nc.close()


async def captured(client: NatsClient, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    commands: list[bytes] = []

    async def send_command(command: bytes, priority: bool = False) -> None:
        commands.append(command)

    monkeypatch.setattr(client, "_send_command", send_command)
    return commands


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("msg_id", ["0123456789abcdef-42", None])
async def test_the_command_is_the_one_nats_py_writes(
    client: NatsClient, monkeypatch: pytest.MonkeyPatch, key: str, msg_id: str | None
) -> None:
    assert supports_direct_writes(client)
    commands = await captured(client, monkeypatch)
    headers = key_headers(key)
    headers[TIMESTAMP_HEADER] = "1700000000123"
    if msg_id is not None:
        headers[MSG_ID_HEADER] = msg_id
    before = dict(client.stats)
    await client.publish("s.t", b'{"x":1}', reply="_INBOX.r.1", headers=headers)
    published = dict(client.stats)
    await write_hpub(client, "s.t", "_INBOX.r.1", record_header(key, 1700000000123, msg_id), b'{"x":1}')
    assert commands[0] == commands[1]
    for stat in ("out_msgs", "out_bytes"):
        assert published[stat] - before[stat] == client.stats[stat] - published[stat], stat


async def test_a_closed_client_refuses_as_publish_does(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    await nc.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await write_hpub(nc, "s.t", "_INBOX.r.1", record_header("k", 1, None), b"{}")


async def test_a_payload_over_the_server_limit_is_refused(client: NatsClient) -> None:
    too_big = b"x" * (client.max_payload + 1)
    with pytest.raises(nats.errors.MaxPayloadError):
        await write_hpub(client, "s.t", "_INBOX.r.1", record_header("k", 1, None), too_big)


async def test_the_transport_sends_records_directly_and_they_arrive_with_their_headers(
    make_transport: MakeTransport, names: Names
) -> None:
    transport = make_transport()
    topic = names.topic()
    receiver = await opened(transport, names.group(), [topic])
    records = aiter(receiver)
    await transport.send(message(topic, "first"))
    assert transport._acks.direct, "started by the first send: the next ones are written directly"
    sends = [transport.send(message(topic, key, timestamp=1700000000000 + n)) for n, key in enumerate(KEYS)]
    await asyncio.gather(*sends)
    got = [await next_record(records) for _ in range(len(KEYS) + 1)]
    assert sorted(record.key for record in got) == sorted(["first", *KEYS])
    by_key = {record.key: record for record in got}
    for n, key in enumerate(KEYS):
        assert by_key[key].timestamp == 1700000000000 + n
        await by_key[key].ack()
    await by_key["first"].ack()
