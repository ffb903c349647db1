"""The in-memory buses: send -> consumer, beside the asyncio-queue hop of the same run.

- ``command bus throughput``: one task sends N commands (64 aggregate ids), the
  consumer iterates the receiver and acknowledges each; time from the first send to the
  last acknowledgement, per command, in pipelined queue hops.
- ``command bus latency``: send one command, the consumer takes it and answers through an
  ``asyncio.Queue``, the sender waits for the answer; the answer's queue hop is taken off,
  what remains is send -> consumer, in queue-hop latencies. Goal: at most 5.
- ``hand_off -> admitted``: local-first's path: ``hand_off`` to a runtime-owned receiver,
  the consumer pulls and acknowledges (confirming admission), the sender awaits the
  admission result.
- ``event bus fan-out``: one domain event stream to 3 groups, per delivered exchange.

    python -m benchmarks.in_memory_bus [--quick] [--repeat R]
"""

from __future__ import annotations

import asyncio
import time

from benchmarks._harness import (
    ACCOUNT,
    Deposit,
    Figure,
    Harness,
    ack_each,
    commands,
    round_trips,
    send_then_drain,
)
from wow_core.messaging import MessageSubscription
from wow_core.messaging.in_memory import InMemoryCommandBus, InMemoryDomainEventBus
from wow_core.model import AggregateId, DomainEvent, DomainEventStream

GOAL_HOPS = 5.0


def streams(count: int) -> list[DomainEventStream]:
    ids = [AggregateId(ACCOUNT, f"a-{n}") for n in range(64)]
    out = []
    for n in range(count):
        target = ids[n % 64]
        out.append(DomainEventStream(target, 1, (DomainEvent(target, Deposit(n), "deposited", 1),), "c", "r"))
    return out


async def command_throughput(count: int) -> float:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(MessageSubscription.of("bench.p", [ACCOUNT]))
    receiver.open_processing()
    elapsed = await send_then_drain(bus.send, commands(count), [receiver])
    await bus.close()
    return elapsed


async def command_latency(rounds: int) -> float:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(MessageSubscription.of("bench.p", [ACCOUNT]))
    receiver.open_processing()
    elapsed = await round_trips(bus.send, commands(rounds), receiver)
    await bus.close()
    return elapsed


async def admitted(window: list[asyncio.Future[bool]]) -> None:
    for admission in window:
        if not await admission:
            raise AssertionError("a hand-off was not admitted")
    window.clear()


async def hand_off_admitted(count: int) -> float:
    bus = InMemoryCommandBus()
    receiver = bus.receiver(MessageSubscription.of("bench.p", [ACCOUNT], runtime_owned=True))
    receiver.open_processing()
    messages = commands(count)
    consumer = asyncio.create_task(ack_each(receiver, count))
    start = time.perf_counter()
    window: list[asyncio.Future[bool]] = []
    for message in messages:
        window.append(bus.hand_off(message).admission)
        if len(window) == 64:  # a bounded number of admissions outstanding
            await admitted(window)
    await admitted(window)
    await consumer
    elapsed = time.perf_counter() - start
    await bus.close()
    return elapsed


async def event_fan_out(count: int, groups: int = 3) -> float:
    bus = InMemoryDomainEventBus()
    receivers = [bus.receiver(MessageSubscription.of(f"bench.g{n}", [ACCOUNT])) for n in range(groups)]
    for receiver in receivers:
        receiver.open_processing()
    elapsed = await send_then_drain(bus.send, streams(count), receivers)
    await bus.close()
    return elapsed


async def run(h: Harness) -> list[Figure]:
    figures = []
    count = h.n(100_000)
    seconds, hop = await h.paired(lambda: command_throughput(count))
    figures.append(
        Figure(
            "in-memory command bus: send -> consumer throughput",
            count / seconds,
            "commands/s",
            hops=seconds / count / hop,
            detail={"commands": count, "ns_per_command": round(seconds / count * 1e9, 1)},
        )
    )

    rounds = h.n(20_000)
    seconds, hop_latency = await h.paired(lambda: command_latency(rounds), latency=True)
    one_way = seconds / rounds - hop_latency  # take the answer's queue hop off
    figures.append(
        Figure(
            "in-memory command bus: send -> consumer latency",
            1 / one_way,
            "commands/s (one at a time)",
            hops=one_way / hop_latency,
            goal_hops=GOAL_HOPS,
            detail={"rounds": rounds, "one_way_ns": round(one_way * 1e9, 1)},
        )
    )

    seconds, hop = await h.paired(lambda: hand_off_admitted(count))
    figures.append(
        Figure(
            "in-memory command bus: hand_off -> admitted",
            count / seconds,
            "hand-offs/s",
            hops=seconds / count / hop,
            detail={"hand_offs": count, "admissions_outstanding": 64},
        )
    )

    events = h.n(50_000)
    seconds, hop = await h.paired(lambda: event_fan_out(events))
    figures.append(
        Figure(
            "in-memory event bus: fan-out to 3 groups",
            3 * events / seconds,
            "deliveries/s",
            hops=seconds / (3 * events) / hop,
            detail={"streams": events, "groups": 3},
        )
    )
    return figures


if __name__ == "__main__":
    Harness.main("in_memory_bus", run, __doc__)
