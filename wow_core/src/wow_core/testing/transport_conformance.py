"""``TransportConformance``: the semantics every :class:`~wow_core.transport.Transport` proves.

Subclass it in a test module (the class name must start with ``Test``) and override the
``wow_transport_factory`` fixture::

    from wow_core.testing import TransportConformance

    class TestMyTransport(TransportConformance):
        @pytest.fixture
        def wow_transport_factory(self):
            return lambda: MyTransport(url="...")

Every test works under a fresh bounded context (``wow_conformance_context``), so its
topics and groups are unique; waits are conditions bounded by ``wow_conformance_timeout``
(``WOW_CONFORMANCE_TIMEOUT`` seconds, 10 by default). Class attributes tune what a
backend cannot do; each says what it relaxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, ClassVar

import pytest

from wow_core.messaging.contract import BusClosedError, MessageSubscription
from wow_core.middleware.metrics import DECODE_FAILURES
from wow_core.model import DecodeFailureKind, TopicKind
from wow_core.testing.support import Rig, command, event_stream, next_of, ordinal, wait_until, within
from wow_core.transport.defaults import DecodeFailureDefault, decode_failure_default_of, naming_of
from wow_core.transport.spi import Transport, TransportMessage, TransportRecord

UNICODE_TEXT = 'héllo wörld ✓ 日本語 Ελληνικά 🚀🧪 e\u0301 zero\u200bwidth "quoted" back\\slash\nnew\tline'


def _record(topic: str, key: str, payload: str, timestamp: int = 1_700_000_000_000) -> TransportMessage:
    return TransportMessage(topic=topic, key=key, payload=payload, timestamp=timestamp)


async def _send_all(transport: Transport, records: list[TransportMessage]) -> None:
    """Send ``records`` one after the other (the SPI has no batch send)."""
    for record in records:
        await transport.send(record)


def _payloads(records: list[TransportRecord]) -> list[str]:
    return [record.payload for record in records]


class TransportConformance:
    """The Transport contract (spec 000, "Transport SPI"), tested on raw records and on
    ``TransportMessageBus`` over the transport (decode failures, closing while processing).
    """

    pytestmark = pytest.mark.asyncio

    counts_deliveries: ClassVar[bool] = True
    """The backend knows how often a record was delivered (``delivery_count`` > 1 on redelivery)."""
    members_share: ClassVar[bool] = True
    """Two ready members of one group both receive some of 40 records with distinct keys."""
    large_payload_size: ClassVar[int] = 512 * 1024
    """Characters of the large payload (keep under the broker's record size limit)."""
    record_count: ClassVar[int] = 40
    """Records in the sharing and ordering tests (per-key order uses 6 keys x this / 2)."""
    keeps_key_order_across_hand_over: ClassVar[bool] = True
    """A key's records keep their order when a member joins or leaves while another holds
    unacknowledged records of that key (keyed partitions with one owner each: Kafka, the
    in-memory transport). ``False`` for a transport whose members share a stream without
    keyed ownership (Redis Streams, NATS JetStream): a record handed back by a leaving
    member may then be processed after newer records of its key. Nothing may be lost
    either way."""

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def topic(
        rig: Rig, transport: Transport, aggregate: str = "note", kind: TopicKind = TopicKind.COMMAND
    ) -> str:
        return naming_of(transport).topic(rig.named(aggregate), kind)

    # -- records --------------------------------------------------------------------------

    async def test_record_round_trip(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        receiver = await wow_rig.open(transport, wow_rig.group(), [topic])
        await transport.send(_record(topic, "k-1", '{"hello": "world"}', 1234567))
        [record] = await wow_rig.take(receiver, 1, "the record")
        assert (record.topic, record.key, record.payload, record.timestamp) == (
            topic,
            "k-1",
            '{"hello": "world"}',
            1234567,
        )
        assert record.position, "a record needs a position for logs and dead letters"
        assert record.delivery_count >= 1
        await record.ack()

    async def test_records_of_one_key_arrive_in_the_order_sent(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        receiver = await wow_rig.open(transport, wow_rig.group(), [topic])
        await _send_all(transport, [_record(topic, "k", str(n)) for n in range(10)])
        records = await wow_rig.take(receiver, 10, "10 records of one key")
        assert _payloads(records) == [str(n) for n in range(10)]

    async def test_per_key_order_under_concurrent_senders(self, wow_rig: Rig) -> None:
        sender_a = await wow_rig.transport()
        sender_b = await wow_rig.transport()
        topic = self.topic(wow_rig, sender_a)
        receiver = await wow_rig.open(await wow_rig.transport(), wow_rig.group(), [topic])
        per_key = max(2, self.record_count // 2)
        keys = [f"key-{n}" for n in range(6)]

        async def sender(transport: Transport, mine: list[str]) -> None:
            for n in range(per_key):
                for key in mine:
                    await transport.send(_record(topic, key, f"{key}|{n}"))

        await within(
            asyncio.gather(
                sender(sender_a, keys[0:2]), sender(sender_b, keys[2:4]), sender(sender_a, keys[4:6])
            ),
            wow_rig.timeout,
            "the concurrent sends",
        )
        records = await wow_rig.take(receiver, per_key * len(keys), "every record")
        seen: dict[str, list[int]] = {}
        for record in records:
            key, _, n = record.payload.partition("|")
            assert record.key == key
            seen.setdefault(key, []).append(int(n))
            await record.ack()
        assert seen == {key: list(range(per_key)) for key in keys}

    async def test_ready_then_send_never_misses(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        sender = await wow_rig.transport()
        topics = [self.topic(wow_rig, transport, name) for name in ("alpha", "beta")]
        for attempt in range(5):
            receiver = wow_rig.track(transport.open(wow_rig.group(f"g{attempt}"), topics))
            await within(receiver.ready(), wow_rig.timeout, "readiness")
            # Sent the moment readiness completed, before processing opens: never missed.
            await sender.send(_record(topics[0], "k", f"a{attempt}"))
            await sender.send(_record(topics[1], "k", f"b{attempt}"))
            receiver.open_processing()
            # A new group may also start with what the topics held before it (a Kafka group
            # starting at the earliest retained record): history, never a miss.
            wanted = {f"a{attempt}", f"b{attempt}"}

            def complete(got: list[TransportRecord], wanted: set[str] = wanted) -> bool:
                return wanted <= set(_payloads(got))

            records = await wow_rig.take_until(receiver, complete, f"both records of attempt {attempt}")
            earlier = {f"{kind}{n}" for kind in "ab" for n in range(attempt)}
            assert set(_payloads(records)) <= wanted | earlier
            await receiver.close()

    async def test_nothing_is_delivered_before_processing_opens(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        held = wow_rig.track(transport.open(wow_rig.group("held"), [topic]))
        await within(held.ready(), wow_rig.timeout, "readiness")
        collector = wow_rig.consume(held)
        witness = await wow_rig.open(transport, wow_rig.group("witness"), [topic])
        await transport.send(_record(topic, "k", "first"))
        await transport.send(_record(topic, "k", "second"))
        # Another group got both: the held receiver had every chance to take them.
        assert _payloads(await wow_rig.take(witness, 2, "the witness records")) == ["first", "second"]
        await wow_rig.settle()
        assert collector.items == [], "a record reached the consumer before processing was opened"
        held.open_processing()
        await collector.wait_for(lambda items: len(items) == 2, wow_rig.timeout, "the held records")
        assert _payloads(collector.items) == ["first", "second"]

    async def test_ack_and_redelivery_of_what_was_not_acked(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        group = wow_rig.group()
        first = await wow_rig.open(transport, group, [topic])
        for name in ("acked", "dropped-1", "dropped-2"):
            await transport.send(_record(topic, "k", name))
        records = await wow_rig.take(first, 3, "the first delivery")
        assert _payloads(records) == ["acked", "dropped-1", "dropped-2"]
        await records[0].ack()
        await first.close()

        second = await wow_rig.open(await wow_rig.transport(), group, [topic])
        await transport.send(_record(topic, "k", "fence"))
        again = await wow_rig.take_until(
            second,
            lambda got: {"dropped-1", "dropped-2", "fence"} <= set(_payloads(got)),
            "the unacknowledged records again, then the fence",
        )
        assert "acked" not in _payloads(again), "an acknowledged record was delivered again"
        assert _payloads(again)[:2] == ["dropped-1", "dropped-2"], "redelivery must keep the key's order"
        if self.counts_deliveries:
            assert [r.delivery_count for r in again[:2]] == [2, 2]
        for record in again:
            await record.ack()

    async def test_two_members_share_and_two_groups_each_get_all(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        other = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        shared = wow_rig.group("shared")
        member_a = wow_rig.consume(await wow_rig.open(transport, shared, [topic]))
        member_b = wow_rig.consume(await wow_rig.open(other, shared, [topic]))
        alone = wow_rig.consume(await wow_rig.open(other, wow_rig.group("alone"), [topic]))
        expected = {f"r{n}" for n in range(self.record_count)}
        for n in range(self.record_count):
            await transport.send(_record(topic, f"key-{n}", f"r{n}"))

        def union() -> bool:
            return set(_payloads(member_a.items)) | set(_payloads(member_b.items)) == expected

        # Either member may take the last record: watch both, not only member_a.
        await wait_until(union, wow_rig.timeout, "the shared group received every record")
        await alone.wait_for(
            lambda items: set(_payloads(items)) == expected, wow_rig.timeout, "the other group"
        )
        got_a, got_b = _payloads(member_a.items), _payloads(member_b.items)
        assert not set(got_a) & set(got_b), "a record went to both members of one group"
        assert len(got_a) == len(set(got_a))
        assert len(got_b) == len(set(got_b))
        if self.members_share:
            assert got_a, "the first member received nothing"
            assert got_b, "the second member received nothing"

    async def test_unicode_and_large_payloads(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        receiver = await wow_rig.open(transport, wow_rig.group(), [topic])
        large = ("0123456789abcdef" * (self.large_payload_size // 16 + 1))[: self.large_payload_size]
        large = large[: -len(UNICODE_TEXT)] + UNICODE_TEXT
        await transport.send(_record(topic, "ключ-🔑", UNICODE_TEXT))
        await transport.send(_record(topic, "ключ-🔑", large))
        records = await wow_rig.take(receiver, 2, "the unicode and the large record")
        assert records[0].key == "ключ-🔑"
        assert records[0].payload == UNICODE_TEXT
        assert records[1].payload == large

    async def test_send_after_close_raises_a_clear_error(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        await transport.send(_record(topic, "k", "before"))
        await transport.close()
        with pytest.raises(BusClosedError):
            await transport.send(_record(topic, "k", "after"))

    async def test_receiver_stopped_and_restarted_loses_nothing(self, wow_rig: Rig) -> None:
        sender = await wow_rig.transport()
        topic = self.topic(wow_rig, sender)
        group = wow_rig.group()
        first = await wow_rig.open(await wow_rig.transport(), group, [topic])
        for n in range(5):
            await sender.send(_record(topic, "k", str(n)))
        for record in await wow_rig.take(first, 5, "the records before the stop"):
            await record.ack()
        await first.close()
        for n in range(5, 10):
            await sender.send(_record(topic, "k", str(n)))  # nobody of the group is running
        restarted = await wow_rig.open(await wow_rig.transport(), group, [topic])
        records = await wow_rig.take(restarted, 5, "the records sent while stopped")
        assert _payloads(records) == [str(n) for n in range(5, 10)]

    async def test_receiver_closed_while_processing_redelivers_in_flight(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        group = wow_rig.group()
        first = await wow_rig.open(transport, group, [topic])
        await transport.send(_record(topic, "k", "in-flight"))
        [record] = await wow_rig.take(first, 1, "the record")
        processing = asyncio.Event()
        finish = asyncio.Event()

        async def handler() -> None:
            processing.set()
            await finish.wait()  # still processing when the receiver closes

        task = asyncio.create_task(handler())
        await within(processing.wait(), wow_rig.timeout, "processing to start")
        await within(first.close(), wow_rig.timeout, "close while processing")
        finish.set()
        await task
        second = await wow_rig.open(await wow_rig.transport(), group, [topic])
        await transport.send(_record(topic, "k", "fence"))
        again = await wow_rig.take_until(
            second, lambda got: "fence" in _payloads(got), "the in-flight record again, then the fence"
        )
        assert _payloads(again) == ["in-flight", "fence"]
        del record

    # -- consumer-group hand-over ------------------------------------------------------

    def _assert_every_record_reached(self, got: list[TransportRecord], sent: list[str], who: str) -> None:
        missing = [payload for payload in sent if payload not in set(_payloads(got))]
        assert not missing, f"records lost in the hand-over, never delivered to {who}: {missing}"

    def _assert_key_order(self, got: list[TransportRecord], who: str) -> None:
        """Per key, the first delivery of each record comes in send order (``key|n``)."""
        if not self.keeps_key_order_across_hand_over:
            return
        first: dict[str, list[int]] = {}
        seen: set[str] = set()
        for record in got:
            if record.payload not in seen:
                seen.add(record.payload)
                key, _, n = record.payload.partition("|")
                first.setdefault(key, []).append(int(n))
        disordered = {key: ns for key, ns in first.items() if ns != sorted(ns)}
        assert not disordered, f"{who} got records of a key out of order: {disordered}"

    @staticmethod
    def _keyed(topic: str, start: int, count: int, keys: int = 6) -> list[TransportMessage]:
        return [_record(topic, f"key-{n % keys}", f"key-{n % keys}|{n}") for n in range(start, start + count)]

    async def test_a_member_joining_while_another_holds_unacked_records_loses_none(
        self, wow_rig: Rig
    ) -> None:
        sender = await wow_rig.transport()
        topic = self.topic(wow_rig, sender)
        group = wow_rig.group()
        holding = await wow_rig.open(await wow_rig.transport(), group, [topic])
        before = self._keyed(topic, 0, 12)
        await _send_all(sender, before)
        held = await wow_rig.take(holding, len(before), "the records the first member holds")
        assert sorted(_payloads(held)) == sorted(m.payload for m in before)

        # A second member joins while the first holds all of them unacknowledged; newer
        # records of the held keys follow, and records of keys nobody holds ...
        joined = wow_rig.consume(await wow_rig.open(await wow_rig.transport(), group, [topic]))
        after = self._keyed(topic, len(before), 12)
        fresh = [_record(topic, f"fresh-{n}", f"fresh-{n}|{n}") for n in range(24)]
        await _send_all(sender, after + fresh)
        # ... the joined member takes what it is given (a transport that wrongly gives it
        # the held keys' newer records shows it here, on a broker at least sometimes) ...
        await wow_rig.settle()
        # ... then the first member leaves without acknowledging any.
        await within(holding.close(), wow_rig.timeout, "the holding member to close")
        sent = [m.payload for m in before + after + fresh]
        await joined.wait_for(
            lambda items: set(sent) <= set(_payloads(items)),
            wow_rig.timeout,
            "every record at the member that joined",
        )
        self._assert_every_record_reached(joined.items, sent, "the member that joined")
        self._assert_key_order(joined.items, "the member that joined")

    async def test_a_member_leaving_with_unacked_records_hands_them_to_the_others(self, wow_rig: Rig) -> None:
        sender = await wow_rig.transport()
        topic = self.topic(wow_rig, sender)
        group = wow_rig.group()
        staying = wow_rig.consume(await wow_rig.open(await wow_rig.transport(), group, [topic]))
        leaving_receiver = await wow_rig.open(await wow_rig.transport(), group, [topic])
        leaving = wow_rig.consume(leaving_receiver, ack=False)  # takes, never acknowledges
        before = self._keyed(topic, 0, 24)
        await _send_all(sender, before)
        first_sent = [m.payload for m in before]
        await wait_until(
            lambda: set(first_sent) <= set(_payloads(staying.items)) | set(_payloads(leaving.items)),
            wow_rig.timeout,
            "the two members to have taken every record",
        )
        await within(leaving_receiver.close(), wow_rig.timeout, "the leaving member to close")
        after = self._keyed(topic, len(before), 12)
        await _send_all(sender, after)
        sent = first_sent + [m.payload for m in after]
        await staying.wait_for(
            lambda items: set(sent) <= set(_payloads(items)),
            wow_rig.timeout,
            "what the leaving member held, and the later records, at the member that stays",
        )
        self._assert_every_record_reached(staying.items, sent, "the member that stays")
        self._assert_key_order(staying.items, "the member that stays")

    async def test_members_joining_and_leaving_mid_stream_lose_no_record(self, wow_rig: Rig) -> None:
        sender = await wow_rig.transport()
        topic = self.topic(wow_rig, sender)
        group = wow_rig.group()
        first_receiver = await wow_rig.open(await wow_rig.transport(), group, [topic])
        first = wow_rig.consume(first_receiver)
        await _send_all(sender, self._keyed(topic, 0, 12))
        await first.wait_for(lambda items: len(items) >= 12, wow_rig.timeout, "the first records")
        second_receiver = await wow_rig.open(await wow_rig.transport(), group, [topic])
        second = wow_rig.consume(second_receiver)
        await _send_all(sender, self._keyed(topic, 12, 12))
        await within(first_receiver.close(), wow_rig.timeout, "the first member to leave")
        third = wow_rig.consume(await wow_rig.open(await wow_rig.transport(), group, [topic]))
        await _send_all(sender, self._keyed(topic, 24, 12))
        await within(second_receiver.close(), wow_rig.timeout, "the second member to leave")
        sent = [f"key-{n % 6}|{n}" for n in range(36)]

        def acknowledged() -> set[str]:
            return {p for c in (first, second, third) for p in _payloads(c.items)}

        await wait_until(lambda: set(sent) <= acknowledged(), wow_rig.timeout, "every record processed")

    async def test_close_during_ready_ends_the_wait_with_bus_closed(self, wow_rig: Rig) -> None:
        """A ``ready()`` under way when its receiver closes ends: ready, or ``BusClosedError``;
        never a ``CancelledError`` its caller did not ask for, never a hang."""
        transport = await wow_rig.transport()
        receiver = transport.open(wow_rig.group("closing"), [self.topic(wow_rig, transport)])
        waiting = asyncio.ensure_future(receiver.ready())
        await asyncio.sleep(0)  # one turn of the loop: the readiness attempt is under way
        await within(receiver.close(), wow_rig.timeout, "receiver close")
        with contextlib.suppress(BusClosedError):
            await within(waiting, wow_rig.timeout, "the ready() under way to end")

    async def test_close_releases_every_task(self, wow_rig: Rig) -> None:
        current = asyncio.current_task()
        before = set(asyncio.all_tasks())
        transport = await wow_rig.transport()
        topic = self.topic(wow_rig, transport)
        quiet = self.topic(wow_rig, transport, "quiet")
        receivers = [
            await wow_rig.open(transport, wow_rig.group("busy"), [topic]),
            await wow_rig.open(transport, wow_rig.group("idle"), [quiet]),
        ]
        blocked = asyncio.create_task(next_of(receivers[1]))
        await transport.send(_record(topic, "k", "one"))
        await wow_rig.take(receivers[0], 1, "the record")
        for receiver in receivers:
            await within(receiver.close(), wow_rig.timeout, "receiver close")
        await within(transport.close(), wow_rig.timeout, "transport close")
        with contextlib.suppress(StopAsyncIteration):
            await within(blocked, wow_rig.timeout, "a blocked iteration to end on close")

        def leftovers() -> list[asyncio.Task[Any]]:
            return [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]

        try:
            await wait_until(lambda: not leftovers(), wow_rig.timeout, "every task of the transport ended")
        except AssertionError:
            raise AssertionError(f"tasks left running after close: {leftovers()!r}") from None

    # -- through TransportMessageBus ------------------------------------------------------

    async def test_decode_failures_go_to_the_policy_and_the_receiver_continues(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        handler = wow_rig.recording_handler()
        bus = wow_rig.transport_bus(transport, TopicKind.COMMAND, handler)
        account, other = wow_rig.named("account"), wow_rig.named("other")
        topic, other_topic = bus.topic(account), bus.topic(other)
        dead_letters = None
        if decode_failure_default_of(transport) is DecodeFailureDefault.DEAD_LETTER:
            dead_letters = await wow_rig.open(
                transport, wow_rig.group("dlq"), [topic + ".dlq", other_topic + ".dlq"]
            )
        group = wow_rig.group()
        subscription = MessageSubscription.of(group, [account, other])
        receiver = await wow_rig.subscribe(bus, subscription)

        valid = json.loads(bus.encode(command(account, "a-1", 0)).payload)
        unknown = {**valid, "t": "no.such.Type"}
        invalid = {**valid, "b": {"text": 5, "n": "not a number"}}
        future = {**valid, "v": 3}  # a wire version this decoder does not read
        short = {**valid, "a": valid["a"][:2]}  # an aggregate without its id
        garbage = [
            (DecodeFailureKind.NOT_JSON, topic, "a-1", "this is { not json"),
            (DecodeFailureKind.WRONG_SHAPE, topic, "a-1", '{"kind": "command"}'),
            (DecodeFailureKind.WRONG_SHAPE, topic, "a-1", "[" * 20000 + "]" * 20000),
            (DecodeFailureKind.WRONG_SHAPE, topic, "a-1", json.dumps(future)),
            (DecodeFailureKind.WRONG_SHAPE, topic, "a-1", json.dumps(short)),
            (DecodeFailureKind.UNKNOWN_BODY_TYPE, topic, "a-1", json.dumps(unknown)),
            (DecodeFailureKind.INVALID_BODY, topic, "a-1", json.dumps(invalid)),
            (DecodeFailureKind.KEY_MISMATCH, topic, "someone-else", json.dumps(valid)),
            (DecodeFailureKind.TOPIC_MISMATCH, other_topic, "a-1", json.dumps(valid)),
        ]
        for _, where, key, payload in garbage:
            await transport.send(_record(where, key, payload))
        await bus.send(command(account, "a-1", 1))
        # Failures are handled as the consumer pulls, and records of different topics and
        # partitions arrive in no particular order: keep pulling while waiting for them.
        consumed = wow_rig.consume(receiver)
        await consumed.wait_for(
            lambda items: [ordinal(e.message) for e in items] == [1],
            wow_rig.timeout,
            "the valid command after the garbage",
        )
        await wait_until(
            lambda: len(handler.failures) >= len(garbage), wow_rig.timeout, "every failure was handled"
        )
        assert sorted(f.error.kind for f in handler.failures) == sorted(kind for kind, *_ in garbage)
        assert {f.group for f in handler.failures} == {group}
        assert wow_rig.metrics.counter_value(DECODE_FAILURES) == len(garbage)
        # The receiver goes on after the failures.
        await bus.send(command(account, "a-2", 2))
        await consumed.wait_for(
            lambda items: [ordinal(e.message) for e in items] == [1, 2],
            wow_rig.timeout,
            "a command after the failures",
        )

        if dead_letters is not None:
            kept = await wow_rig.take(dead_letters, len(garbage), "the dead letters")
            assert sorted((r.topic, r.key, r.payload) for r in kept) == sorted(
                (where + ".dlq", key, payload) for _, where, key, payload in garbage
            )
        else:
            # Left pending: closing the receiver delivers them to the group again.
            await receiver.close()
            again = await wow_rig.subscribe(bus, subscription)
            wow_rig.consume(again)  # decoding happens as the consumer pulls
            await wait_until(
                lambda: len(handler.failures) >= 2 * len(garbage),
                wow_rig.timeout,
                "the pending failures to be delivered again",
            )

    async def test_quiesce_lets_in_flight_work_finish(self, wow_rig: Rig) -> None:
        transport = await wow_rig.transport()
        bus = wow_rig.transport_bus(transport, TopicKind.EVENT)
        named = wow_rig.named()
        subscription = MessageSubscription.of(wow_rig.group(), [named])
        receiver = await wow_rig.subscribe(bus, subscription)
        await bus.send(event_stream(named, "a-1", 1))
        [exchange] = await wow_rig.take(receiver, 1, "the event")
        assert receiver.in_flight == 1
        quiescing = asyncio.create_task(receiver.quiesce(wow_rig.timeout))
        await asyncio.sleep(0)
        assert not quiescing.done(), "quiesce returned while an exchange was in flight"
        await exchange.ack()  # the work finishes
        assert await within(quiescing, wow_rig.timeout, "quiesce") is True
        await receiver.close()
        again = await wow_rig.subscribe(bus, subscription)
        await bus.send(event_stream(named, "a-1", 2))
        got = await wow_rig.take_until(again, lambda items: bool(items), "the next event")
        assert [ordinal(e.message) for e in got] == [2], "a finished, acknowledged exchange came back"
        await got[0].ack()
