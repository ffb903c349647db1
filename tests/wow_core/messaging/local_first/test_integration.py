"""Local-first over the real in-memory local buses and a transport bus as the distributed bus.

The distributed side is parameterised by ``distributed_transport``: the in-memory transport,
Redis Streams, NATS JetStream and Kafka (tansu), each skipped when its broker is not
reachable (never when ``CI=true``). Another transport joins by adding an entry to
``TRANSPORTS``: a factory of fresh clients ("processes") on one broker namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from wow_core.messaging.contract import MessageBus, MessageSubscription
from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryDomainEventBus, InMemoryStateEventBus
from wow_core.messaging.local_first import (
    LocalFirstCommandBus,
    LocalFirstDomainEventBus,
    LocalFirstMessageBus,
    LocalFirstStateEventBus,
    every_aggregate_is_local,
)
from wow_core.metrics import InMemoryMetrics
from wow_core.middleware import BusLayer, MetricsMiddleware
from wow_core.middleware.metrics import HAND_OFF_TIMEOUTS
from wow_core.model import Header, NamedAggregate, TopicKind
from wow_core.runtime.settings import LocalFirstSettings
from wow_core.testing.support import conformance_codec, message_of, ordinal
from wow_core.transport import DefaultTopicNaming, Transport
from wow_core.transport.bus import TransportCommandBus, TransportDomainEventBus, TransportStateEventBus
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport

TransportClients = Callable[[], Awaitable[Transport]]
"""A fresh client ("process") of one broker namespace per call."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _require(host: str, port: int, what: str) -> None:
    if not _reachable(host, port):
        if _in_ci():
            pytest.fail(f"{what} is required when CI=true")
        pytest.skip(f"{what} is not reachable on {host}:{port}")


@contextlib.asynccontextmanager
async def _in_memory(request: pytest.FixtureRequest) -> AsyncIterator[TransportClients]:
    broker = InMemoryBroker()

    async def client() -> Transport:
        return InMemoryTransport(broker=broker)

    yield client


@contextlib.asynccontextmanager
async def _redis(request: pytest.FixtureRequest) -> AsyncIterator[TransportClients]:
    _require("127.0.0.1", 6379, "Redis")
    from redis.asyncio import Redis

    from wow_redis import RedisSettings, RedisStreamTransport

    url = os.environ.get("WOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"wowtest:{uuid.uuid4().hex[:10]}:"

    async def client() -> Transport:
        return RedisStreamTransport(RedisSettings(url=url, key_prefix=prefix, block_time=0.2))

    try:
        yield client
    finally:
        redis = Redis.from_url(url)
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


@contextlib.asynccontextmanager
async def _nats(request: pytest.FixtureRequest) -> AsyncIterator[TransportClients]:
    _require("127.0.0.1", 4222, "NATS JetStream")
    import nats

    from wow_nats import NatsSettings, NatsTransport

    url = os.environ.get("WOW_TEST_NATS_URL", "nats://127.0.0.1:4222")
    ns = uuid.uuid4().hex[:10]

    async def client() -> Transport:
        settings = NatsSettings(servers=[url], stream_prefix=f"wowt{ns}_")
        return NatsTransport(settings, naming=DefaultTopicNaming(f"t{ns}."), topic_prefix=f"t{ns}.")

    try:
        yield client
    finally:
        connection = await nats.connect(url)
        try:
            js = connection.jetstream()
            for info in await js.streams_info():
                if info.config.name and f"wowt{ns}_" in info.config.name:
                    await js.delete_stream(info.config.name)
        finally:
            await connection.close()


@contextlib.asynccontextmanager
async def _kafka(request: pytest.FixtureRequest) -> AsyncIterator[TransportClients]:
    from tests.wow_kafka.conftest import test_settings
    from wow_kafka import KafkaTransport

    bootstrap = request.getfixturevalue("kafka_bootstrap")
    settings = test_settings(bootstrap)

    async def client() -> Transport:
        return KafkaTransport(settings)

    yield client


TRANSPORTS: dict[
    str, Callable[[pytest.FixtureRequest], contextlib.AbstractAsyncContextManager[TransportClients]]
] = {
    "in_memory": _in_memory,
    "redis": _redis,
    "nats": _nats,
    "kafka": _kafka,
}
"""The distributed buses the scenarios run over; a broker package adds its transport here."""

LOCAL = {
    TopicKind.COMMAND: InMemoryCommandBus,
    TopicKind.EVENT: InMemoryDomainEventBus,
    TopicKind.STATE: InMemoryStateEventBus,
}
DISTRIBUTED = {
    TopicKind.COMMAND: TransportCommandBus,
    TopicKind.EVENT: TransportDomainEventBus,
    TopicKind.STATE: TransportStateEventBus,
}
LOCAL_FIRST: dict[TopicKind, type[LocalFirstMessageBus[Any, Any]]] = {
    TopicKind.COMMAND: LocalFirstCommandBus,
    TopicKind.EVENT: LocalFirstDomainEventBus,
    TopicKind.STATE: LocalFirstStateEventBus,
}


MARKS = {"redis": pytest.mark.redis, "nats": pytest.mark.nats, "kafka": pytest.mark.kafka}


@pytest.fixture(
    params=[pytest.param(name, marks=[MARKS[name]] if name in MARKS else []) for name in sorted(TRANSPORTS)]
)
async def distributed_transport(request: pytest.FixtureRequest) -> AsyncIterator[TransportClients]:
    async with TRANSPORTS[request.param](request) as clients:
        yield clients


@pytest.fixture(params=list(TopicKind), ids=lambda k: k.value)
def kind(request: pytest.FixtureRequest) -> TopicKind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def named() -> NamedAggregate:
    return NamedAggregate("lf", f"agg{uuid.uuid4().hex[:8]}")


class Process:
    """One process: its own local bus and its own transport client."""

    def __init__(
        self, kind: TopicKind, transport: Transport, metrics: InMemoryMetrics, *, owns: bool = True
    ) -> None:
        self.local = LOCAL[kind]()
        self.transport = transport
        self.metrics = metrics
        self.distributed: MessageBus[Any, Any] = MetricsMiddleware(metrics).decorate_bus(
            DISTRIBUTED[kind](transport, conformance_codec()), BusLayer.TRANSPORT
        )
        self.bus = LOCAL_FIRST[kind](
            self.local,  # type: ignore[arg-type]
            self.distributed,
            settings=LocalFirstSettings(hand_off_timeout=5.0),
            observer=MetricsMiddleware(metrics).observe_local_first(kind),
            is_local=every_aggregate_is_local if owns else _owns_nothing,
        )

    async def close(self) -> None:
        await self.bus.close(timeout=5)
        await self.transport.close()


def _owns_nothing(named_aggregate: NamedAggregate) -> bool:
    return False


Processes = Callable[..., Awaitable[Process]]
"""``await processes()`` is a process owning every aggregate; ``owns=False``: owning none."""


@pytest.fixture
async def processes(distributed_transport: TransportClients, kind: TopicKind) -> AsyncIterator[Processes]:
    made: list[Process] = []
    metrics = InMemoryMetrics()

    async def make(*, owns: bool = True) -> Process:
        transport = await distributed_transport()
        await transport.start()
        process = Process(kind, transport, metrics, owns=owns)
        made.append(process)
        return process

    yield make
    for process in made:
        await process.close()


async def opened(bus: Any, subscription: MessageSubscription) -> Any:
    receiver = bus.receiver(subscription)
    async with asyncio.timeout(10):
        await receiver.ready()
    receiver.open_processing()
    return receiver


async def take(receiver: Any, count: int, timeout: float = 10.0) -> list[Any]:
    got = []
    async with asyncio.timeout(timeout):
        while len(got) < count:
            exchange = await receiver.__anext__()
            got.append(exchange)
            await exchange.ack()
    return got


async def test_a_handed_off_message_is_handled_once_and_its_copy_filtered(
    processes: Callable[[], Awaitable[Process]], kind: TopicKind, named: NamedAggregate
) -> None:
    process = await processes()
    subscription = MessageSubscription.of(f"g-{named.aggregate_name}", [named], runtime_owned=True)
    receiver = await opened(process.bus, subscription)
    sent = [message_of(kind, named, f"id{n % 3}", n) for n in range(9)]
    for message in sent:
        await process.bus.send(message)
    got = await take(receiver, 9)
    assert sorted(ordinal(e.message) for e in got) == sorted(ordinal(m) for m in sent)
    assert all(e.message.header[Header.LOCAL_FIRST] == "true" for e in got)
    async with asyncio.timeout(10):
        await process.bus.copies.join()
    # every copy went out marked; a refused marker then is the next exchange: nothing else came
    marker = message_of(kind, named, "id0", 100)
    marker.header[Header.LOCAL_FIRST_DISABLED] = "true"
    await process.bus.send(marker)
    (next_one,) = await take(receiver, 1)
    assert ordinal(next_one.message) == ordinal(marker)
    assert next_one.message.header[Header.LOCAL_FIRST] == "false"
    await receiver.close()


async def test_a_replica_filters_copies_handled_locally_and_processes_refused_ones(
    processes: Callable[[], Awaitable[Process]], kind: TopicKind, named: NamedAggregate
) -> None:
    here, replica = await processes(), await processes()
    group = f"g-{named.aggregate_name}"
    subscription = MessageSubscription.of(group, [named], runtime_owned=True)
    local_receiver = await opened(here.bus, subscription)
    remote_receiver = await opened(replica.bus, subscription)

    handled_here = message_of(kind, named, "a", 1)
    await here.bus.send(handled_here)
    (exchange,) = await take(local_receiver, 1)
    assert ordinal(exchange.message) == ordinal(handled_here)

    # The replica's send has no local receiver there: refused, its copy unmarked; the group
    # receives it from the transport (on either process).
    refused = message_of(kind, named, "b", 2)
    await replica.local.close()  # no routable receiver in the replica any more
    await replica.bus.send(refused)
    async with asyncio.timeout(10):
        await here.bus.copies.join()
        await replica.bus.copies.join()
    first = asyncio.ensure_future(take(local_receiver, 1))
    second = asyncio.ensure_future(take(remote_receiver, 1))
    done, pending = await asyncio.wait({first, second}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert done, "the refused message reached nobody"
    (got,) = done.pop().result()
    assert ordinal(got.message) == ordinal(refused)
    assert got.message.header[Header.LOCAL_FIRST] == "false"
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await local_receiver.close()
    await remote_receiver.close()


async def test_closing_a_local_receiver_rejects_pending_admissions_and_copies_go_out_unmarked(
    processes: Callable[[], Awaitable[Process]], kind: TopicKind, named: NamedAggregate
) -> None:
    process = await processes()
    group = f"g-{named.aggregate_name}"
    receiver = await opened(process.bus, MessageSubscription.of(group, [named], runtime_owned=True))
    watcher = await opened(process.distributed, MessageSubscription.of(f"{group}-watch", [named]))
    sent = [message_of(kind, named, "a", n) for n in range(4)]
    for message in sent:
        await process.bus.send(message)  # handed off: nobody pulls them
    await receiver.close()  # rejects every pending admission
    got = await take(watcher, 4)
    assert [ordinal(e.message) for e in got] == [ordinal(m) for m in sent]
    assert {e.message.header[Header.LOCAL_FIRST] for e in got} == {"false"}
    await watcher.close()


async def test_one_aggregate_type_whose_receiver_never_pulls_does_not_delay_another(
    processes: Callable[[], Awaitable[Process]], kind: TopicKind
) -> None:
    process = await processes()
    stuck_type = NamedAggregate("lf", f"stuck{uuid.uuid4().hex[:6]}")
    live_type = NamedAggregate("lf", f"live{uuid.uuid4().hex[:6]}")
    stuck_receiver = await opened(
        process.bus,
        MessageSubscription.of(f"g-{stuck_type.aggregate_name}", [stuck_type], runtime_owned=True),
    )
    live_receiver = await opened(
        process.bus, MessageSubscription.of(f"g-{live_type.aggregate_name}", [live_type], runtime_owned=True)
    )
    watcher = await opened(
        process.distributed, MessageSubscription.of(f"watch-{live_type.aggregate_name}", [live_type])
    )
    async with asyncio.timeout(10):
        for n in range(20):
            await process.bus.send(message_of(kind, stuck_type, f"s{n % 2}", n))  # never pulled
        live = [message_of(kind, live_type, "l", n) for n in range(5)]
        for message in live:
            await process.bus.send(message)
        got = await take(live_receiver, 5)
        copies = await take(watcher, 5)
    assert [ordinal(e.message) for e in got] == [ordinal(m) for m in live]
    assert [e.message.header[Header.LOCAL_FIRST] for e in copies] == ["true"] * 5
    assert process.bus.copies.backlog(stuck_type) == 20
    await stuck_receiver.close()
    await live_receiver.close()
    await watcher.close()


async def test_per_aggregate_order_on_the_transport_with_refusals_in_between(
    processes: Callable[[], Awaitable[Process]], kind: TopicKind, named: NamedAggregate
) -> None:
    process = await processes()
    group = f"g-{named.aggregate_name}"
    watcher = await opened(process.distributed, MessageSubscription.of(f"{group}-watch", [named]))
    receiver = await opened(process.bus, MessageSubscription.of(group, [named], runtime_owned=True))
    senders = []
    sent = [message_of(kind, named, "a", n) for n in range(12)]
    for n, message in enumerate(sent):
        if n == 6:
            await receiver.quiesce(0)  # leaves the routes: later sends are refused
        senders.append(asyncio.ensure_future(process.bus.send(message)))
        await asyncio.sleep(0)
    # the first six wait in the local sink; admissions pending until the receiver closes
    await receiver.close()
    async with asyncio.timeout(10):
        await asyncio.gather(*senders)
    copies = await take(watcher, 12)
    assert [ordinal(e.message) for e in copies] == [ordinal(m) for m in sent]
    assert [e.message.header[Header.LOCAL_FIRST] for e in copies] == ["false"] * 12
    await watcher.close()


async def test_a_marker_the_message_came_with_never_suppresses_delivery_to_the_owner(
    processes: Processes, kind: TopicKind, named: NamedAggregate
) -> None:
    """Only the owner's local-first bus marks a copy ``local_first=true``, from its admission.

    A service that does not own the aggregate sends a message whose header already says
    ``local_first=true`` (copied from a received message, or set by a caller): the owner
    receives it from the transport, marked ``false``, and processes it.
    """
    owner, other = await processes(), await processes(owns=False)
    receiver = await opened(
        owner.bus, MessageSubscription.of(f"g-{named.aggregate_name}", [named], runtime_owned=True)
    )
    copied = message_of(kind, named, "a", 1, header={Header.LOCAL_FIRST: "true"})
    await other.bus.send(copied)
    (got,) = await take(receiver, 1)
    assert ordinal(got.message) == ordinal(copied)
    assert got.message.header[Header.LOCAL_FIRST] == "false"
    assert copied.header[Header.LOCAL_FIRST] == "true"  # the sender's message is left as it was
    await receiver.close()


async def test_a_sender_with_local_first_off_never_sends_a_marker_it_was_given(
    processes: Processes, kind: TopicKind, named: NamedAggregate
) -> None:
    """With local-first off on the sender, its plain transport bus is the only bus: nothing
    admitted the message there, so a ``local_first=true`` it came with goes out ``false``
    and the owner (local-first on) processes it instead of dropping it as handled."""
    owner = await processes()
    plain = DISTRIBUTED[kind](owner.transport, conformance_codec(), keeps_local_first_marker=False)
    receiver = await opened(
        owner.bus, MessageSubscription.of(f"g-{named.aggregate_name}", [named], runtime_owned=True)
    )
    copied = message_of(kind, named, "a", 1, header={Header.LOCAL_FIRST: "true"})
    await plain.send(copied)
    (got,) = await take(receiver, 1)
    assert ordinal(got.message) == ordinal(copied)
    assert got.message.header[Header.LOCAL_FIRST] == "false"
    assert copied.header[Header.LOCAL_FIRST] == "true"  # the sender's message is left as it was
    await receiver.close()


@pytest.mark.parametrize("kind", [TopicKind.COMMAND], ids=["command"])
async def test_a_void_command_carries_local_first_false_whatever_it_came_with(
    processes: Processes, kind: TopicKind, named: NamedAggregate
) -> None:
    """Void forces ``local_first=false``: to an aggregate of this service and to a remote one."""
    here, other = await processes(), await processes(owns=False)
    watcher = await opened(here.distributed, MessageSubscription.of(f"watch-{named.aggregate_name}", [named]))
    sent = []
    for n, sender in enumerate((here, other)):
        void = dataclasses.replace(
            message_of(kind, named, "a", n, header={Header.LOCAL_FIRST: "true"}),  # type: ignore[type-var]
            is_void=True,
        )
        sent.append(void)
        await sender.bus.send(void)
    copies = await take(watcher, 2)
    assert [ordinal(e.message) for e in copies] == [ordinal(m) for m in sent]
    assert [e.message.header[Header.LOCAL_FIRST] for e in copies] == ["false", "false"]
    await watcher.close()


async def test_a_send_refused_by_a_quiescing_receiver_never_waits_for_its_demand(
    processes: Processes, kind: TopicKind, named: NamedAggregate
) -> None:
    """A quiescing receiver takes no more messages: quiescing rejects the admissions of
    what it holds but will not yield, so a later send of that aggregate, refused, goes out
    behind their unmarked copies at once instead of after the hand-off timeout."""
    process = await processes()
    group = f"g-{named.aggregate_name}"
    watcher = await opened(process.distributed, MessageSubscription.of(f"{group}-watch", [named]))
    receiver = await opened(process.bus, MessageSubscription.of(group, [named], runtime_owned=True))
    held = message_of(kind, named, "a", 1)
    await process.bus.send(held)  # handed off; the receiver never pulls it
    await receiver.quiesce(0)
    refused = message_of(kind, named, "a", 2)
    async with asyncio.timeout(10):
        await process.bus.send(refused)
    copies = await take(watcher, 2)
    assert [ordinal(e.message) for e in copies] == [ordinal(held), ordinal(refused)]
    assert [e.message.header[Header.LOCAL_FIRST] for e in copies] == ["false", "false"]
    assert process.metrics.counter_value(HAND_OFF_TIMEOUTS) == 0  # rejected, not timed out
    await receiver.close()
    await watcher.close()


async def test_a_handed_off_message_released_unacknowledged_stays_pending_on_the_transport(
    processes: Processes, kind: TopicKind, named: NamedAggregate
) -> None:
    """Admission is the local acknowledgement: a local exchange released unacknowledged (a
    function outcome that withholds it) sends the copy unmarked, so the transport delivers
    the message; released again there, it stays pending and a restarted member gets it."""
    process = await processes()
    subscription = MessageSubscription.of(f"g-{named.aggregate_name}", [named], runtime_owned=True)
    receiver = await opened(process.bus, subscription)
    withheld = message_of(kind, named, "a", 1)
    await process.bus.send(withheld)
    async with asyncio.timeout(10):
        local = await receiver.__anext__()
    assert local.message.header[Header.LOCAL_FIRST] == "true"  # the local copy
    local.release()
    async with asyncio.timeout(10):
        distributed = await receiver.__anext__()
    assert ordinal(distributed.message) == ordinal(withheld)
    assert distributed.message.header[Header.LOCAL_FIRST] == "false"
    distributed.release()
    await receiver.close()
    restarted = await opened(process.bus, subscription)
    (again,) = await take(restarted, 1)
    assert ordinal(again.message) == ordinal(withheld)
    assert again.message.header[Header.LOCAL_FIRST] == "false"
    await restarted.close()
