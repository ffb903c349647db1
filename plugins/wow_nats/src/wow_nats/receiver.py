"""``NatsReceiver``: a group member's pull consumers, as a TransportReceiver.

Lifecycle:

1. ``ready()`` creates (or reconciles) the context streams and one durable pull consumer
   per topic for the group, and a pull inbox for each. A consumer that already existed
   resumes where the group left off. A new one starts, by default
   (``deliver_policy="all"``), at the first record of its topic the stream still
   retains: nothing sent before any member created the group is skipped. With
   ``"new"`` it starts at the time the receiver was *opened*, less ``start_margin``
   seconds for clock skew between this host and the server: a record stored after
   ``open()`` (so surely one stored after ``ready()`` returned) is delivered to the
   group, what was stored before is skipped, except the records of the margin. Two
   members creating one new consumer at once is safe: with ``"all"`` both send the
   same configuration, which JetStream creates once; a creation refused because the
   other member's consumer (another start) exists uses that consumer, whose start is
   then the earlier of the two opens. Per topic, ``ready()`` logs at INFO where the
   group starts and why: ``existing group``, ``new group at the beginning`` or ``new
   group at the end``.
2. Nothing is pulled before ``open_processing()``: JetStream delivers nothing to a pull
   consumer that does not ask, so records wait on the server, not in this process.
3. One pull loop per topic asks for up to ``fetch_batch`` records and hands them, in
   stream order, to a bounded local queue that the iterator reads.
4. ``close()`` stops the loops, lets each outstanding pull request end (filled or
   expired, at most ``fetch_timeout``) before dropping its inbox, then asks for
   immediate redelivery (nak), in stream order, of every record pulled and not
   acknowledged: queued here or handed out and still being processed. The next member
   of the group gets them at once, before anything newer. An ack of a record handed
   back this way is a no-op.

Release. A record its consumer released unfinished (:meth:`NatsRecord.release
<wow_nats.record.NatsRecord.release>`: its processing failed, or it stops) is nak'd with
the delay ``release_delay_for(delivery_count)``: ``release_delay`` seconds, doubled per
delivery after the first, at most ``ack_wait``. JetStream delivers it again to the group
(to any member) after that delay rather than after the full ack wait, ``delivery_count``
one higher, so a failure that passes (a short outage) is retried in seconds, and one
that does not reaches ``max_deliver`` and the dead letter at a growing pace, not in a hot
loop. The release settles the record here as a nak does; the nak itself is sent by a
task the receiver keeps, and ``close()`` lets those tasks finish (at most
``publish_timeout``) before it hands back the rest. Released while the receiver closes, a
record is left to the close, which hands it back at once; released with no
``release_delay``, it is left to the ack wait; the release of a delivery superseded by a
later one (its ack wait expired meanwhile) does nothing. A nak lost with the connection
leaves the record to the ack wait.

Order. Within one receiver, records of one topic are handed out in stream order, so
records of one key come in the order they were stored. A record that is redelivered
(nak, ack wait expired) comes after records stored later: the group's progress past it
is never undone, and JetStream's ``max_ack_pending`` bounds how far delivery runs ahead
of the oldest unacknowledged record. Several members of one group share the consumer
without partitioning: records of one key may then be processed by two members at once.
Run one member per group where strict per-key order across processes matters.

Poison and garbage. A record delivered more than ``max_deliver`` times, or whose payload
is not UTF-8 (it cannot be a ``str`` payload), is published raw to ``<topic>.dlq`` with
the reason in headers, then terminated for the group, and never handed out. If the
dead-letter publish fails the record is left unacknowledged and comes back after the ack
wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy

from wow_core.metrics import Metrics
from wow_core.transport.kit import ReadAhead, Readiness
from wow_nats.connection import NatsConnection
from wow_nats.layout import StreamLayout
from wow_nats.record import (
    DELIVERIES_HEADER,
    GROUP_HEADER,
    POSITION_HEADER,
    REASON_HEADER,
    TIMESTAMP_HEADER,
    NatsRecord,
    dead_letter_id,
    key_headers,
    key_of,
)
from wow_nats.settings import NatsSettings
from wow_nats.topics import NatsTopics

Publish = Callable[[str, bytes, dict[str, str]], Awaitable[Any]]
"""How a receiver publishes a dead letter: ``publish(subject, data, headers)``, done on
JetStream's ack (the transport's publish, which retries transient failures)."""

log = logging.getLogger("wow_nats")

STATUS_HEADER = "Status"
DESCRIPTION_HEADER = "Description"

_BACKOFF_MAX = 5.0
_NAK_MARGIN = 0.25
RECOVERY_PAUSE = 0.5
"""Seconds a receiver (or a wait reader) whose consumer vanished waits before making it (and its stream)
again: long enough for the server to finish removing a deleted stream."""


_V1_TOKENS = 9
"""``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>``."""
_V2_TOKENS = 11
"""At least ``$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<stream seq>.
<consumer seq>.<ns>.<pending>`` (a twelfth token, a random one, may follow)."""


def ack_reply_fields(reply: str | None) -> tuple[str, int, int, int] | None:
    """The stream, delivery count, stream sequence and stored time (ns) that JetStream
    writes into a message's ack subject, or None for a message that is not JetStream's.

    What ``Msg.metadata`` reads (both subject versions), without building its datetime
    and dataclasses for every record: only what a record needs.
    """
    if not reply:
        return None
    tokens = reply.split(".")
    count = len(tokens)
    if tokens[0] != "$JS" or count < 2 or tokens[1] != "ACK":
        return None
    try:
        if count == _V1_TOKENS:
            return tokens[2], int(tokens[4]), int(tokens[5]), int(tokens[7])
        if count >= _V2_TOKENS:
            return tokens[4], int(tokens[6]), int(tokens[7]), int(tokens[9])
    except ValueError:
        return None
    return None


class NatsReceiver:
    """Durable pull consumers of one group on some topics (see the module docstring).

    Built by :meth:`NatsTransport.open <wow_nats.transport.NatsTransport.open>` from what
    it needs, not from the transport: the settings, the stream layout, the connection,
    the topic admin (streams), the publish of dead letters, the metrics, and
    ``on_close`` (told once the receiver closed).
    """

    def __init__(
        self,
        group: str,
        topics: Sequence[str],
        *,
        settings: NatsSettings,
        layout: StreamLayout,
        connection: NatsConnection,
        topic_admin: NatsTopics,
        publish: Publish,
        metrics: Metrics,
        on_close: Callable[[NatsReceiver], None] | None = None,
    ) -> None:
        if not topics:
            raise ValueError(f"receiver of group {group!r} names no topic")
        self.group = group
        self.topics = list(dict.fromkeys(topics))
        self.settings = settings
        self._layout = layout
        self._connection = connection
        self._topic_admin = topic_admin
        self._publish = publish
        self._metrics = metrics
        self._on_close = on_close
        self.consumers = {topic: layout.consumer(group, topic) for topic in self.topics}
        self.opened_at = datetime.datetime.now(datetime.UTC)
        """With ``deliver_policy="new"``, a new group's consumers start here, not at readiness."""
        self._what = f"receiver of group {group!r}"
        self._buffer: ReadAhead[NatsRecord] = ReadAhead(settings.fetch_batch)
        """Pulled and not handed out; the pull loops ask for no more than its room."""
        self._readiness: Readiness[list[_Puller]] = Readiness(self._subscribe, what=self._what)
        self._open = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._unsettled: dict[tuple[str, int], NatsRecord] = {}
        """Handed out, not settled: (topic, stream sequence) -> its latest delivery."""
        self._releases: set[asyncio.Task[None]] = set()
        """The naks of released records still being sent."""
        self._closed = False

    # -- the TransportReceiver protocol -------------------------------------------------

    async def ready(self) -> None:
        """Return once every consumer exists: no record stored afterwards can be missed.

        Raises the server's error if a stream or consumer cannot be created, and
        ``BusClosedError`` if the receiver was closed first.
        """
        await self._readiness.wait()  # one attempt at a time; a failed one is tried again

    def open_processing(self) -> None:
        """Start pulling records; idempotent."""
        if self._closed or self._open.is_set():
            return
        self._open.set()
        # a failure of the pull loops ends the iteration with it (once), never a silent stop
        self._runner = asyncio.ensure_future(self._buffer.guard(self._run(), what=self._what, logger=log))

    @property
    def processing_open(self) -> bool:
        return self._open.is_set()

    @property
    def closed(self) -> bool:
        return self._closed

    def __aiter__(self) -> AsyncIterator[NatsRecord]:
        return _Records(self)

    async def next_record(self) -> NatsRecord:
        """The next record; ``StopAsyncIteration`` once closed. Cancelling it loses nothing."""
        if self._closed and not self._buffer:
            raise StopAsyncIteration
        item = await self._buffer.get()
        if not item.settled:
            # a redelivery replaces the earlier delivery of the same record
            self._unsettled[(item.topic, item.sequence)] = item
            item.on_settle = self._settled
        return item

    async def close(self) -> None:
        """Stop pulling, release the inboxes, hand back what was not acknowledged (nak)."""
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            self._on_close(self)
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        pullers = await self._readiness.close()  # cancels a subscription under way
        if pullers:
            await asyncio.gather(*(puller.stop() for puller in pullers))
        # The naks of the records released before the close (settled: not handed back
        # below): sent before the connection goes, a stuck one cancelled (the ack wait
        # then brings its record back). A record released from now on is left alone.
        await self._finish_releases()
        # Hand back, in stream order, what was pulled and not acknowledged: the records
        # still queued here and those handed out and still being processed.
        latest = dict(self._unsettled)
        self._unsettled.clear()
        for item in self._buffer.close():  # also ends the iterations
            latest[(item.topic, item.sequence)] = item  # a later delivery of the same record
        unsettled = sorted(latest.values(), key=lambda record: record.sequence)
        for record in unsettled:
            try:
                await record.nak()
            except Exception as error:
                log.debug("nak of %r on close failed: %r (redelivered after the ack wait)", record, error)

    # -- used by the records -------------------------------------------------------------

    def release_delay(self, record: NatsRecord) -> float | None:
        """The delay of ``record``'s release (:class:`~wow_nats.record.Releaser`); None:
        closing (the close hands it back), no ``release_delay``, or a later delivery of the
        same record was handed out (a nak now would deliver it a third time)."""
        if self._closed:
            return None
        latest = self._unsettled.get((record.topic, record.sequence))
        if latest is not None and latest is not record:
            return None
        return self.settings.release_delay_for(record.delivery_count)

    def track(self, task: asyncio.Task[None]) -> None:
        """Keep a release's nak task until it is done (:class:`~wow_nats.record.Releaser`)."""
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _finish_releases(self) -> None:
        tasks = list(self._releases)
        if not tasks:
            return
        _, stuck = await asyncio.wait(tasks, timeout=self.settings.publish_timeout)
        for task in stuck:
            log.warning("%s: a release's nak was not sent before the close; cancelled", self._what)
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)

    # -- used by the pull loops ---------------------------------------------------------

    def _settled(self, record: NatsRecord) -> None:
        key = (record.topic, record.sequence)
        if self._unsettled.get(key) is record:
            del self._unsettled[key]

    @property
    def queued(self) -> int:
        """Records pulled and not handed out yet."""
        return self._buffer.size

    @property
    def room(self) -> int:
        """How many records the pull loops may ask for now (``fetch_batch`` less ``queued``)."""
        return self._buffer.room

    async def wait_for_room(self) -> None:
        await self._buffer.wait_for_room()

    def enqueue(self, record: NatsRecord) -> None:
        self._buffer.put_nowait(record)

    async def client(self) -> NatsClient:
        """The NATS connection (connecting on first use)."""
        return await self._connection.client()

    async def verify(self, topic: str) -> None:
        """Check that the consumer of ``topic`` exists; create it again if it does not."""
        js = await self._connection.jetstream()
        try:
            await js.consumer_info(self._layout.stream(topic), self.consumers[topic])
        except nats.js.errors.NotFoundError:
            await self.recover(topic)
        except Exception as error:  # not connected yet: the next request will tell
            log.debug("checking the consumer of %s failed: %r", topic, error)

    async def recover(self, topic: str) -> None:
        """Create the stream and consumer of ``topic`` again (deleted behind our back)."""
        log.warning("consumer %s of %s vanished; creating it again", self.consumers[topic], topic)
        # the news of a removed consumer may come while the server is still removing its
        # stream: a stream made again before that finished stores records but never
        # delivers them (NATS 2.9), so let the removal end first
        await asyncio.sleep(RECOVERY_PAUSE)
        self._topic_admin.forget(topic)
        try:
            stream = await self._topic_admin.ensure(topic)
            await self._ensure_consumer(stream, topic)
        except Exception as error:
            log.warning("recreating the consumer of %s failed: %r", topic, error)
            await asyncio.sleep(self.settings.reconnect_time_wait)

    async def admit(self, topic: str, msg: Msg) -> NatsRecord | None:
        """Turn a message into a record, or dead-letter it (poison, not UTF-8)."""
        fields = ack_reply_fields(msg.reply)
        if fields is None:
            log.warning("a non-JetStream message reached the pull inbox of %s; ignored", topic)
            return None
        stream, deliveries, sequence, stored_ns = fields
        position = f"{stream}:{sequence}"
        headers = msg.headers or {}
        key = key_of(headers)
        if deliveries > self.settings.max_deliver:
            await self._dead_letter(topic, msg, key, position, deliveries, "max_deliver")
            return None
        try:
            payload = msg.data.decode("utf-8")
        except UnicodeDecodeError:
            await self._dead_letter(topic, msg, key, position, deliveries, "not_utf8")
            return None
        try:
            timestamp = int(headers[TIMESTAMP_HEADER])
        except (KeyError, ValueError):  # not sent by wow-py: the time JetStream stored it
            timestamp = stored_ns // 1_000_000
        return NatsRecord(
            msg,
            topic=topic,
            key=key,
            payload=payload,
            timestamp=timestamp,
            position=position,
            delivery_count=deliveries,
            sequence=sequence,
            releaser=self,
        )

    # -- internals ----------------------------------------------------------------------

    async def _subscribe(self) -> list[_Puller]:
        pullers: list[_Puller] = []
        try:
            for topic in self.topics:
                stream = await self._topic_admin.ensure(topic)
                await self._ensure_consumer(stream, topic)
                puller = _Puller(self, topic, stream, self.consumers[topic])
                await puller.subscribe()
                pullers.append(puller)
        except BaseException:
            for puller in pullers:
                await puller.stop()
            raise
        return pullers

    async def _ensure_consumer(self, stream: str, topic: str) -> None:
        """Create the group's durable consumer on ``topic``, or reconcile its settings."""
        js = await self._connection.jetstream()
        settings = self.settings
        name = self.consumers[topic]
        try:
            existing = await js.consumer_info(stream, name)
        except nats.js.errors.NotFoundError:
            start, where, why = await self._start(stream)
            config = ConsumerConfig(
                name=name,
                durable_name=name,
                description=f"wow group {self.group} on {topic}"[:256],
                filter_subject=topic,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=settings.ack_wait,
                # the delivery limit is enforced here (dead letter), not by the server,
                # which would silently stop delivering a poison record
                max_deliver=-1,
                max_ack_pending=settings.max_ack_pending,
                replay_policy=ReplayPolicy.INSTANT,
                **start,
            )
            try:
                # the same configuration as an existing consumer's is created once (idempotent)
                await js.add_consumer(stream, config)
                log.info("created consumer %s on %s (%s)", name, stream, topic)
                self._log_start(topic, where, why)
                return
            except nats.js.errors.APIError as error:
                # another member created it first (with its own start): use theirs
                try:
                    existing = await js.consumer_info(stream, name)
                except nats.js.errors.NotFoundError:
                    raise error from None
        self._log_start(
            topic, f"after stream sequence {existing.delivered.stream_seq or 0}", "existing group"
        )
        await self._reconcile_consumer(stream, topic)

    def _log_start(self, topic: str, where: str, why: str) -> None:
        log.info("NATS receiver of group %r: %s starts %s (%s)", self.group, topic, where, why)

    async def _reconcile_consumer(self, stream: str, topic: str) -> None:
        """Apply ``ack_wait`` and ``max_ack_pending`` to an existing consumer.

        Done on the consumer's configuration as the server returns it (JSON), so that
        fields that cannot change (the start) are sent back exactly as they are.
        """
        settings = self.settings
        name = self.consumers[topic]
        nc = await self._connection.client()
        reply = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{name}", b"", timeout=5)
        info = json.loads(reply.data)
        if "error" in info:
            raise nats.js.errors.APIError.from_error(info["error"])
        config = info["config"]
        ack_wait = int(settings.ack_wait * 1e9)
        if config.get("ack_wait") == ack_wait and config.get("max_ack_pending") == settings.max_ack_pending:
            return
        config.update(ack_wait=ack_wait, max_ack_pending=settings.max_ack_pending)
        request = json.dumps({"stream_name": stream, "config": config}).encode()
        reply = await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}.{name}.{topic}", request, timeout=5)
        answer = json.loads(reply.data)
        if "error" in answer:
            raise nats.js.errors.APIError.from_error(answer["error"])
        log.info("updated consumer %s on %s (ack wait %ss)", name, stream, settings.ack_wait)

    async def _start(self, stream: str) -> tuple[dict[str, Any], str, str]:
        """Where a new consumer starts (its configuration, where and why, for the log).

        With ``deliver_policy="all"`` at the first record of its topic that the stream
        retains; with ``"new"`` at this receiver's open, less ``start_margin``.

        The open time is turned into a stream sequence (the first record stored at or after
        it; binary search on stored times), since JetStream 2.9 cannot update a consumer
        created with a start *time* (not even its ack wait), but can one with a start
        sequence.
        """
        settings = self.settings
        if settings.deliver_policy == "all":
            return (
                {"deliver_policy": DeliverPolicy.ALL},
                "at its first retained record",
                "new group at the beginning",
            )
        since = self.opened_at - datetime.timedelta(seconds=settings.start_margin)
        js = await self._connection.jetstream()
        state = (await js.stream_info(stream)).state
        low, high = max(state.first_seq, 1), state.last_seq + 1
        # invariant: records from `high` on were stored at or after `since`
        while low < high:
            middle = (low + high) // 2
            try:
                stored = (await js.get_msg(stream, middle)).time
            except nats.js.errors.NotFoundError:  # deleted: look further on
                stored = None
            if stored is not None and stored >= since:
                high = middle
            else:
                low = middle + 1
        config = {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": high}
        return config, f"at stream sequence {high}, the first stored since its open", "new group at the end"

    async def _run(self) -> None:
        loops: list[asyncio.Future[None]] = []
        try:
            pullers = await self._readiness.wait()
            loops = [asyncio.ensure_future(puller.run()) for puller in pullers]
            await asyncio.gather(*loops)
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    async def _dead_letter(
        self, topic: str, msg: Msg, key: str, position: str, deliveries: int, reason: str
    ) -> None:
        headers = {
            **key_headers(key),
            REASON_HEADER: reason,
            GROUP_HEADER: self.group,
            POSITION_HEADER: position,
            DELIVERIES_HEADER: str(deliveries),
            # one dead letter per group and record, even when the publish is retried
            "Nats-Msg-Id": dead_letter_id(self.group, position),
        }
        try:
            await self._publish(self._layout.dead_letter_subject(topic), msg.data, headers)
            await msg.term()
        except Exception as error:
            log.error(
                "dead-lettering %s of %s (%s) for group %s failed: %r; it comes back after the ack wait",
                position,
                topic,
                reason,
                self.group,
                error,
            )
            return
        self._metrics.increment("wow.nats.dead_lettered", tags={"topic": topic, "reason": reason})
        log.warning(
            "dead-lettered %s of %s for group %s (%s, %d deliveries) to %s.dlq",
            position,
            topic,
            self.group,
            reason,
            deliveries,
            topic,
        )


class _Records:
    """An iterator (not an async generator: a timed-out ``anext`` must not end it)."""

    __slots__ = ("_receiver",)

    def __init__(self, receiver: NatsReceiver) -> None:
        self._receiver = receiver

    def __aiter__(self) -> _Records:
        return self

    async def __anext__(self) -> NatsRecord:
        return await self._receiver.next_record()


class _Puller:
    """The pull loop of one topic: pull requests sized by the room in the local queue.

    One request is outstanding at a time; its records arrive on a private inbox whose
    callback admits them, in stream order, into the receiver's queue. A request ends
    when all its records came, on a status message (expired, consumer deleted), or after
    its expiry plus a margin (a request lost with the connection).
    """

    def __init__(self, receiver: NatsReceiver, topic: str, stream: str, consumer: str) -> None:
        self.receiver = receiver
        self.topic = topic
        self.stream = stream
        self.consumer = consumer
        self.sub: Subscription | None = None
        self._requested = 0
        self._received = 0
        self._request_done = asyncio.Event()
        self._request_done.set()
        self._request_expiry = 0.0
        self._consumer_gone = False

    def request_lifetime(self) -> float:
        """Seconds the outstanding pull request may still live on the server (0 if none)."""
        if self._request_done.is_set():
            return 0.0
        return max(0.0, self._request_expiry - time.monotonic())

    async def subscribe(self) -> None:
        # No flush, no probe needed (unlike the wait notifier's subject): only JetStream
        # writes to this inbox, answering pull requests this connection sends after the
        # SUB, and the server handles one connection's commands in order.
        nc = await self.receiver.client()
        self.sub = await nc.subscribe(nc.new_inbox(), cb=self._on_msg)

    async def run(self) -> None:
        receiver = self.receiver
        settings = receiver.settings
        expires = settings.fetch_timeout
        request_subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}"
        backoff = 0.05
        assert self.sub is not None
        while not receiver.closed:
            room = receiver.room
            if room <= 0:
                await receiver.wait_for_room()
                continue
            if self._consumer_gone:
                self._consumer_gone = False
                await receiver.recover(self.topic)
            self._requested, self._received = room, 0
            self._request_done.clear()
            self._request_expiry = time.monotonic() + expires
            request = json.dumps({"batch": room, "expires": int(expires * 1e9)}).encode()
            try:
                nc = await receiver.client()
                await nc.publish(request_subject, request, reply=self.sub.subject)
            except (nats.errors.ConnectionReconnectingError, nats.errors.OutboundBufferLimitError) as error:
                log.warning("pull request for %s failed: %r", self.topic, error)
                await asyncio.sleep(backoff)  # back off, then ask again
                backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            backoff = 0.05
            try:
                # asyncio.timeout, not wait_for: wait_for (before 3.12) may swallow the
                # cancellation of close when the event fires at the same moment
                async with asyncio.timeout(expires + 1.0):
                    await self._request_done.wait()
            except TimeoutError:
                # JetStream answers an expired request with a 408: silence means the
                # request was lost with the connection, or the consumer is gone
                await receiver.verify(self.topic)

    async def _on_msg(self, msg: Msg) -> None:
        headers = msg.headers
        status = headers.get(STATUS_HEADER) if headers else None
        if status:
            if status == "100":  # idle heartbeat
                return
            description = (headers or {}).get(DESCRIPTION_HEADER, "")
            log.debug("pull of %s: status %s %s", self.topic, status, description)
            if status == "409" and "deleted" in description.lower():
                self._consumer_gone = True
            elif status not in ("404", "408", "409"):
                log.warning("pull of %s answered %s %s", self.topic, status, description)
            self._request_done.set()
            return
        self._received += 1
        if self._received >= self._requested:
            self._request_done.set()
        try:
            record = await self.receiver.admit(self.topic, msg)
        except Exception as error:  # never kill the subscription's callback loop
            log.error("admitting a record of %s failed: %r", self.topic, error)
            return
        if record is not None:
            self.receiver.enqueue(record)

    async def stop(self) -> None:
        """Let the outstanding request end, then drop interest.

        JetStream (2.9) may still hand a record to a pull request whose inbox is gone (a
        nak'd record, until the request expires), where it would wait for the ack wait.
        So the inbox stays until its request ended (filled or expired: at most
        ``fetch_timeout``); whatever arrives meanwhile is queued here and handed back by
        ``close``.
        """
        sub = self.sub
        if sub is None:
            return
        lifetime = self.request_lifetime()
        if lifetime > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(lifetime + _NAK_MARGIN):
                    await self._request_done.wait()
        self.sub = None
        try:
            async with asyncio.timeout(5.0):
                await sub.drain()  # type: ignore[no-untyped-call]
        except Exception as error:  # the connection is gone: the server dropped the request
            log.debug("drain of the %s pull inbox failed: %r", self.topic, error)
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
