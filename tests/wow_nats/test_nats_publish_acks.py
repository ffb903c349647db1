"""The NATS transport's own publish-ack inbox (:class:`wow_nats.acks.PublishAcks`).

Against the real server: a JetStream stream for the acks JetStream gives (duplicates,
error replies, no stream), and a scripted responder on a core subject (another
connection answering the publishes' reply subjects) for orders and failures JetStream
does not produce on request: replies out of order, twice, late, or never.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from tests.wow_nats.conftest import MakeTransport, Names
from tests.wow_nats.support import message
from wow_core.testing import eventually
from wow_nats.acks import PublishAcks

pytestmark = pytest.mark.nats

WAIT = 10.0


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[NatsClient]:
    nc = await nats.connect(nats_url)
    yield nc
    await nc.close()


class Responder:
    """Another connection subscribed to a core subject, holding the requests it got."""

    def __init__(self, nc: NatsClient, subject: str) -> None:
        self.nc = nc
        self.subject = subject
        self.requests: list[Msg] = []

    async def start(self) -> Responder:
        async def received(msg: Msg) -> None:
            self.requests.append(msg)

        await self.nc.subscribe(self.subject, cb=received)
        await self.nc.flush()
        # the SUB is in place once a publish of this connection came back through it
        await self.nc.publish(self.subject, b"ready")
        await eventually(lambda: self._ready(), WAIT, "the responder's subscription")
        return self

    async def _ready(self) -> bool:
        if self.requests and self.requests[0].data == b"ready":
            self.requests.pop(0)
            return True
        return False

    async def got(self, count: int) -> list[Msg]:
        async def enough() -> bool:
            return len(self.requests) >= count

        await eventually(enough, WAIT, f"{count} requests")
        return self.requests[:count]

    async def reply(self, request: Msg, body: dict[str, Any]) -> None:
        await self.nc.publish(request.reply, json.dumps(body).encode())
        await self.nc.flush()


@pytest.fixture
async def responder(nats_url: str) -> AsyncIterator[Responder]:
    nc = await nats.connect(nats_url)
    yield await Responder(nc, f"acks.{uuid.uuid4().hex}").start()
    await nc.close()


async def started(client: NatsClient, timeout: float = 5.0, max_pending: int = 4000) -> PublishAcks:
    acks = PublishAcks(timeout, max_pending)
    await acks.start(client, WAIT)
    return acks


def ack(seq: int, **extra: Any) -> dict[str, Any]:
    return {"stream": "S", "seq": seq, **extra}


async def test_each_ack_completes_its_own_publish_whatever_the_order(
    client: NatsClient, responder: Responder
) -> None:
    acks = await started(client)
    sends = [asyncio.ensure_future(acks.publish(responder.subject, str(n).encode(), {})) for n in range(5)]
    requests = await responder.got(5)
    for request in reversed(requests):  # answered last to first, each with its own number
        await responder.reply(request, ack(int(request.data)))
    results = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
    assert [result.seq for result in results] == [0, 1, 2, 3, 4]
    assert len(acks) == 0
    acks.close()


async def test_a_second_reply_to_one_publish_is_dropped(client: NatsClient, responder: Responder) -> None:
    acks = await started(client)
    first = asyncio.ensure_future(acks.publish(responder.subject, b"a", {}))
    (request,) = await responder.got(1)
    await responder.reply(request, ack(1))
    await responder.reply(request, ack(2))
    await responder.reply(request, {"error": {"code": 400, "err_code": 10071, "description": "late"}})
    assert (await asyncio.wait_for(first, WAIT)).seq == 1
    second = asyncio.ensure_future(acks.publish(responder.subject, b"b", {}))
    (_, request) = await responder.got(2)
    await responder.reply(request, ack(3))
    assert (await asyncio.wait_for(second, WAIT)).seq == 3, "the extra replies completed nothing else"
    assert len(acks) == 0
    acks.close()


async def test_jetstream_acks_a_duplicate_msg_id_as_a_duplicate_of_the_same_record(
    make_transport: MakeTransport, names: Names, client: NatsClient
) -> None:
    transport = make_transport()
    topic = names.topic()
    await transport.ensure_stream(topic)
    subject = transport.layout.subject(topic)
    acks = await started(client)
    headers = {"Nats-Msg-Id": uuid.uuid4().hex}
    stored = await acks.publish(subject, b"{}", dict(headers))
    again = await acks.publish(subject, b"{}", dict(headers))
    assert not stored.duplicate
    assert again.duplicate is True
    assert (again.stream, again.seq) == (stored.stream, stored.seq)
    acks.close()


async def test_a_jetstream_error_reply_raises_its_error(
    make_transport: MakeTransport, names: Names, client: NatsClient
) -> None:
    transport = make_transport()
    topic = names.topic()
    await transport.ensure_stream(topic)
    subject = transport.layout.subject(topic)
    acks = await started(client)
    with pytest.raises(nats.js.errors.APIError) as wrong_sequence:
        await acks.publish(subject, b"{}", {"Nats-Expected-Last-Sequence": "999"})
    assert wrong_sequence.value.err_code == 10071
    with pytest.raises(nats.js.errors.APIError) as wrong_stream:
        await acks.publish(subject, b"{}", {"Nats-Expected-Stream": "NOT_THIS_ONE"})
    assert wrong_stream.value.err_code == 10060
    assert len(acks) == 0
    assert (await acks.publish(subject, b"{}", {})).seq == 1, "the failed ones stored nothing"
    acks.close()


async def test_no_stream_on_the_subject_is_no_responders(client: NatsClient) -> None:
    acks = await started(client)
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await asyncio.wait_for(acks.publish(f"nobody.{uuid.uuid4().hex}", b"{}", {}), WAIT)
    assert len(acks) == 0
    acks.close()


async def test_an_ack_that_never_comes_fails_at_its_deadline_and_a_late_one_is_dropped(
    client: NatsClient, responder: Responder
) -> None:
    acks = await started(client, timeout=0.2)
    began = time.monotonic()
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(acks.publish(responder.subject, b"a", {}), WAIT)
    assert time.monotonic() - began >= 0.19
    assert len(acks) == 0
    (late,) = await responder.got(1)
    await responder.reply(late, ack(1))
    answered = asyncio.ensure_future(acks.publish(responder.subject, b"b", {}))
    (_, request) = await responder.got(2)
    await responder.reply(request, ack(2))
    assert (await asyncio.wait_for(answered, WAIT)).seq == 2
    acks.close()


async def test_one_timer_serves_deadlines_that_come_later(client: NatsClient, responder: Responder) -> None:
    acks = await started(client, timeout=0.3)
    first = asyncio.ensure_future(acks.publish(responder.subject, b"a", {}))
    await asyncio.sleep(0.1)
    second = asyncio.ensure_future(acks.publish(responder.subject, b"b", {}))
    await responder.got(2)
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(first, WAIT)
    expired_first = time.monotonic()
    assert not second.done(), "the second deadline is later than the first"
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(second, WAIT)
    assert time.monotonic() - expired_first >= 0.05
    acks.close()


async def test_a_publish_beyond_max_pending_waits_for_room(client: NatsClient, responder: Responder) -> None:
    acks = await started(client, max_pending=2)
    sends = [asyncio.ensure_future(acks.publish(responder.subject, str(n).encode(), {})) for n in range(3)]
    requests = await responder.got(2)
    await asyncio.sleep(0.2)
    assert len(responder.requests) == 2, "the third waits for room before it is published"
    await responder.reply(requests[0], ack(0))
    (_, _, third) = await responder.got(3)
    await responder.reply(requests[1], ack(1))
    await responder.reply(third, ack(2))
    assert [r.seq for r in await asyncio.wait_for(asyncio.gather(*sends), WAIT)] == [0, 1, 2]
    acks.close()


async def test_a_cancelled_publish_frees_its_room(client: NatsClient, responder: Responder) -> None:
    acks = await started(client, max_pending=1)
    first = asyncio.ensure_future(acks.publish(responder.subject, b"a", {}))
    await responder.got(1)
    second = asyncio.ensure_future(acks.publish(responder.subject, b"b", {}))
    await asyncio.sleep(0.05)
    first.cancel()
    (_, request) = await responder.got(2)
    await responder.reply(request, ack(7))
    assert (await asyncio.wait_for(second, WAIT)).seq == 7
    assert len(acks) == 0
    acks.close()


async def test_close_fails_what_is_awaited(client: NatsClient, responder: Responder) -> None:
    acks = await started(client)
    pending = asyncio.ensure_future(acks.publish(responder.subject, b"a", {}))
    await responder.got(1)
    acks.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await asyncio.wait_for(pending, WAIT)


async def test_a_send_whose_ack_never_comes_fails_after_the_publish_timeout(
    make_transport: MakeTransport, names: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = make_transport(publish_timeout=0.2, reconnect_time_wait=0.05)
    topic = names.topic()
    await transport.send(message(topic, "k0"))  # the stream exists, the connection is up
    nc = await transport.connection()
    dropped: list[bytes] = []
    send_command = nc._send_command

    async def drop_publishes(command: bytes, priority: bool = False) -> None:
        if command.startswith((b"PUB ", b"HPUB ")):
            dropped.append(command.split(b" ")[2])  # its reply subject; it never reaches the server
            return
        await send_command(command, priority)

    monkeypatch.setattr(nc, "_send_command", drop_publishes)
    started_at = time.monotonic()
    with pytest.raises(nats.errors.TimeoutError):
        await asyncio.wait_for(transport.send(message(topic, "k1")), WAIT)
    assert time.monotonic() - started_at >= 3 * 0.2 - 0.05, "three attempts, each waited for its ack"
    assert len(dropped) == 3
    assert len(set(dropped)) == 3, "each attempt had its own reply subject"


async def test_a_reply_that_is_no_publish_ack_fails_its_publish(
    client: NatsClient, responder: Responder
) -> None:
    acks = await started(client)
    sends = [asyncio.ensure_future(acks.publish(responder.subject, b"a", {})) for _ in range(3)]
    requests = await responder.got(3)
    for request, reply in zip(requests, (b"not json", b"[1, 2]", b'{"seq": 1}'), strict=True):
        await responder.nc.publish(request.reply, reply)
    await responder.nc.flush()
    for send in sends:
        with pytest.raises(nats.js.errors.APIError, match="not a publish ack"):
            await asyncio.wait_for(send, WAIT)
    assert len(acks) == 0
    acks.close()
