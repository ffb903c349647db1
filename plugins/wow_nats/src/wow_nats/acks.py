"""``PublishAcks``: the transport's own reply inbox for JetStream publish acks.

A JetStream publish is a core NATS publish with a reply subject; JetStream answers on
that subject once it stored the record (``{"stream": ..., "seq": ...}``, with
``"duplicate": true`` when its duplicate window already held that ``Nats-Msg-Id``), or
with an error (``{"error": {"code", "err_code", "description"}}``: no such stream, a
wrong expected sequence, ...), or the server answers with a ``503`` status when nothing
listens on the subject (no stream). nats-py's ``publish_async`` does this with a random
token, a semaphore and a done-callback per publish; this inbox does it with:

- one wildcard subscription per connection, ``<inbox>.*``, confirmed by a probe that
  comes back through it before the first publish uses it (``flush()`` is no proof: nats-py
  writes its ``PING`` ahead of a ``SUB`` still in its buffer);
- a reply subject ``<inbox>.<counter>`` per publish, the future of each in one dict;
- the ack's JSON parsed here (a :class:`nats.js.api.PubAck` is built only for
  :meth:`PublishAcks.publish`), or the exception nats-py
  raises for the same reply (:class:`nats.js.errors.NoStreamResponseError`,
  :class:`nats.js.errors.APIError` and its subclasses);
- one timer for every deadline in flight (all publishes share one timeout, so deadlines
  come in the order the publishes were made): an ack not received within ``timeout``
  fails its publish with :class:`nats.errors.TimeoutError`;
- a bound on publishes in flight (``max_pending``): a publish beyond waits for room.

Each reply completes the publish its subject names, whatever the order they arrive in;
a second reply to one subject (or one that comes after its publish timed out or was
cancelled) is dropped. A reconnect keeps the subscription (nats-py subscribes again
before it sends what it buffered meanwhile); an ack lost with the connection leaves
its publish to its deadline, and the transport tries it again (with the same
``Nats-Msg-Id``: JetStream stores it once and acks the retry as a duplicate).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, cast

import nats.errors
import nats.js.errors
from nats.js.api import PubAck
from pydantic_core import from_json

from wow_nats.hpub import supports_direct_writes, write_hpub

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg

_PROBE = "probe"
_STATUS = "Status"
_NO_RESPONDERS = "503"


Ack = dict[str, Any]
"""A publish ack as JetStream wrote it (``stream``, ``seq``, maybe ``duplicate``, ``domain``)."""


def ack_of(msg: Msg) -> Ack | Exception:
    """The publish ack a reply carries, or the exception it stands for."""
    headers = msg.headers
    if headers and headers.get(_STATUS) == _NO_RESPONDERS:
        return nats.js.errors.NoStreamResponseError()
    try:
        reply = from_json(msg.data)  # a tenth of json.loads's time on such a small text
        error = reply.get("error")
        if error is not None:
            return _api_error(error)
        if isinstance(reply["stream"], str) and isinstance(reply["seq"], int):
            return cast(Ack, reply)
        raise TypeError("stream or seq of the wrong type")
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        return nats.js.errors.APIError(description=f"not a publish ack: {msg.data[:200]!r} ({error!r})")


def pub_ack(ack: Ack) -> PubAck:
    """nats-py's :class:`~nats.js.api.PubAck` of an ack (built only for who asks for it)."""
    return PubAck(
        stream=ack["stream"], seq=ack["seq"], domain=ack.get("domain"), duplicate=ack.get("duplicate")
    )


def _api_error(error: dict[str, object]) -> Exception:
    # nats-py raises the subclass of APIError that the reply's code stands for
    try:
        nats.js.errors.APIError.from_error(error)
    except nats.js.errors.APIError as raised:
        return raised
    return nats.js.errors.APIError(description=str(error))


class PublishAcks:
    """The reply inbox of one connection's JetStream publishes; see the module doc."""

    __slots__ = (
        "_client",
        "_counter",
        "_deadlines",
        "_futures",
        "_handle",
        "_loop",
        "_prefix",
        "_probe",
        "_room",
        "_start_lock",
        "direct",
        "max_pending",
        "timeout",
    )

    def __init__(self, timeout: float, max_pending: int) -> None:
        self.timeout = timeout
        self.max_pending = max_pending
        self._client: NatsClient | None = None
        self._prefix = ""
        self._counter = 0
        self._futures: dict[str, asyncio.Future[Ack]] = {}
        self._deadlines: deque[tuple[float, str, asyncio.Future[Ack]]] = deque()
        self._room: deque[asyncio.Future[None]] = deque()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._probe: asyncio.Future[None] | None = None
        self._start_lock = asyncio.Lock()
        self.direct = False
        """Whether :meth:`publish_record` writes the message itself (:mod:`wow_nats.hpub`)."""

    @property
    def started(self) -> bool:
        return self._client is not None

    def __len__(self) -> int:
        """Publishes whose ack is awaited."""
        return len(self._futures)

    async def start(self, client: NatsClient, confirm_within: float) -> None:
        """Subscribe to the inbox on ``client``; returns once the server has the
        subscription (a probe published after it came back), ``ConnectionError`` when
        that is not confirmed within ``confirm_within`` seconds. Idempotent."""
        async with self._start_lock:
            if self._client is client:
                return
            loop = asyncio.get_running_loop()
            prefix = f"{client.new_inbox()}."
            self._prefix = prefix
            self._loop = loop
            probe = self._probe = loop.create_future()
            await client.subscribe(prefix + "*", cb=self._received)
            await client.publish(prefix + _PROBE, b"")
            try:
                async with asyncio.timeout(confirm_within):
                    await probe
            except TimeoutError:
                raise ConnectionError(
                    f"NATS did not confirm the publish-ack inbox's subscription within {confirm_within}s"
                ) from None
            finally:
                self._probe = None
            self._client = client
            self.direct = supports_direct_writes(client)

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> PubAck:
        """Publish with a reply subject of this inbox; return the ack (or raise its error)."""
        return pub_ack(await self._publish(subject, data, headers, None))

    async def publish_raw(self, subject: str, data: bytes, headers: dict[str, str]) -> Ack:
        """:meth:`publish`, the ack as JetStream wrote it."""
        return await self._publish(subject, data, headers, None)

    async def publish_record(self, subject: str, data: bytes, header: bytes) -> Ack:
        """:meth:`publish_raw` with the header block already written
        (:func:`~wow_nats.hpub.record_header`); only when :attr:`direct`."""
        return await self._publish(subject, data, None, header)

    async def _publish(
        self, subject: str, data: bytes, headers: dict[str, str] | None, header: bytes | None
    ) -> Ack:
        client = self._client
        if client is None:
            raise RuntimeError("the publish-ack inbox is not started")
        if len(self._futures) >= self.max_pending:
            await self._wait_for_room()
        loop = self._loop
        assert loop is not None
        self._counter += 1
        token = str(self._counter)
        future: asyncio.Future[Ack] = loop.create_future()
        self._futures[token] = future
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].done():
            deadlines.popleft()
        deadline = loop.time() + self.timeout
        deadlines.append((deadline, token, future))
        if self._handle is None:
            self._handle = loop.call_at(deadline, self._expire)
        try:
            if header is None:
                await client.publish(subject, data, reply=self._prefix + token, headers=headers)
            else:
                await write_hpub(client, subject, self._prefix + token, header, data)
            return await future
        except BaseException:
            # cancelled, or the publish itself failed: its room is free again
            if self._futures.pop(token, None) is not None and self._room:
                self._make_room()
            future.cancel()
            raise

    async def _received(self, msg: Msg) -> None:
        token = msg.subject[len(self._prefix) :]
        future = self._futures.pop(token, None)
        if future is None:
            if token == _PROBE and self._probe is not None and not self._probe.done():
                self._probe.set_result(None)
            return  # a second reply, or one whose publish gave up: dropped
        if not future.done():
            ack = ack_of(msg)
            if isinstance(ack, Exception):
                future.set_exception(ack)
            else:
                future.set_result(ack)
        if self._room:
            self._make_room()

    async def _wait_for_room(self) -> None:
        loop = self._loop
        assert loop is not None
        while len(self._futures) >= self.max_pending:
            room = loop.create_future()
            self._room.append(room)
            try:
                await room
            except BaseException:
                if room.done() and not room.cancelled():
                    self._make_room()  # hand the room on
                raise

    def _make_room(self) -> None:
        room = self._room
        free = self.max_pending - len(self._futures)
        while room and free > 0:
            waiter = room.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _expire(self) -> None:
        self._handle = None
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        deadlines = self._deadlines
        futures = self._futures
        while deadlines:
            deadline, token, future = deadlines[0]
            if future.done():
                deadlines.popleft()
            elif deadline <= now:
                deadlines.popleft()
                futures.pop(token, None)
                future.set_exception(nats.errors.TimeoutError())
            else:
                self._handle = loop.call_at(deadline, self._expire)
                break
        if self._room:
            self._make_room()

    def close(self) -> None:
        """Fail what is still awaited (the connection is closing) and drop the timer."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(nats.errors.ConnectionClosedError())
        self._deadlines.clear()
        for waiter in self._room:
            if not waiter.done():
                waiter.set_exception(nats.errors.ConnectionClosedError())
        self._room.clear()
        self._client = None
