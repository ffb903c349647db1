"""TransportMessageBus over the in-memory transport, against the raw transport, same run.

- ``raw in-memory transport``: N records (64 keys) sent with ``transport.send``, one
  receiver iterating and acknowledging each: per record, in pipelined queue hops.
- ``transport command bus``: the same N as commands through ``TransportCommandBus``
  (read-only marking, JSON encoding, decoding with key and topic checks, the exchange,
  ``ack``): throughput, as a ratio of the raw transport's, and in queue hops.
- ``MessageCodec alone``: encoding and decoding the same commands, nothing else: the
  share of the bus figure that is JSON and body validation; then encoding alone and
  decoding alone (the sender's and the receiver's share).
- ``transport command bus round trip``: one command at a time, send -> consumer ->
  answer through an ``asyncio.Queue``; the answer's hop is taken off, in queue-hop
  latencies.

The difference between the first two is what the bus costs over the transport: JSON
both ways and the checks. A broker transport adds its own round trips on top.

    python -m benchmarks.transport_bus [--quick] [--repeat R]
"""

from __future__ import annotations

import time

from benchmarks._harness import (
    ACCOUNT,
    Figure,
    Harness,
    codec,
    commands,
    round_trips,
    send_then_drain,
)
from wow_core.messaging import MessageSubscription
from wow_core.transport.bus import TransportCommandBus
from wow_core.transport.in_memory import InMemoryTransport
from wow_core.transport.spi import TransportMessage


async def raw_transport(count: int) -> float:
    transport = InMemoryTransport()
    topic = "wow.bench.account.command"
    # The same payloads the bus would send, made outside the timing.
    bus = TransportCommandBus(transport, codec())
    records = [bus.encode(message) for message in commands(count)]
    receiver = transport.open("bench.p", [topic])
    receiver.open_processing()

    async def send(record: TransportMessage) -> None:
        await transport.send(TransportMessage(record.topic, record.key, record.payload, record.timestamp))

    elapsed = await send_then_drain(send, records, [receiver])
    await transport.close()
    return elapsed


async def transport_bus(count: int) -> float:
    transport = InMemoryTransport()
    bus = TransportCommandBus(transport, codec())
    receiver = bus.receiver(MessageSubscription.of("bench.p", [ACCOUNT]))
    await receiver.ready()
    receiver.open_processing()
    elapsed = await send_then_drain(bus.send, commands(count), [receiver])
    await bus.close()
    await transport.close()
    return elapsed


async def codec_only(count: int) -> float:
    """The JSON part alone: encode and decode every command, no bus, no transport."""
    from wow_core.model import TopicKind

    the_codec = codec()
    messages = commands(count)
    start = time.perf_counter()
    for message in messages:
        the_codec.decode(the_codec.encode(message), TopicKind.COMMAND)
    return time.perf_counter() - start


async def codec_encode_only(count: int) -> float:
    the_codec = codec()
    messages = commands(count)
    start = time.perf_counter()
    for message in messages:
        the_codec.encode(message)
    return time.perf_counter() - start


async def codec_decode_only(count: int) -> float:
    from wow_core.model import TopicKind

    the_codec = codec()
    payloads = [the_codec.encode(message) for message in commands(count)]
    start = time.perf_counter()
    for payload in payloads:
        the_codec.decode(payload, TopicKind.COMMAND)
    return time.perf_counter() - start


async def transport_bus_round_trip(rounds: int) -> float:
    transport = InMemoryTransport()
    bus = TransportCommandBus(transport, codec())
    receiver = bus.receiver(MessageSubscription.of("bench.p", [ACCOUNT]))
    await receiver.ready()
    receiver.open_processing()
    elapsed = await round_trips(bus.send, commands(rounds), receiver)
    await bus.close()
    await transport.close()
    return elapsed


async def run(h: Harness) -> list[Figure]:
    count = h.n(50_000)
    raw_seconds, hop = await h.paired(lambda: raw_transport(count))
    bus_seconds, bus_hop = await h.paired(lambda: transport_bus(count))
    codec_seconds, codec_hop = await h.paired(lambda: codec_only(count))
    encode_seconds, encode_hop = await h.paired(lambda: codec_encode_only(count))
    decode_seconds, decode_hop = await h.paired(lambda: codec_decode_only(count))
    rounds = h.n(10_000)
    trip_seconds, hop_latency = await h.paired(lambda: transport_bus_round_trip(rounds), latency=True)
    one_way = trip_seconds / rounds - hop_latency
    return [
        Figure(
            "in-memory transport (raw records): send -> ack throughput",
            count / raw_seconds,
            "records/s",
            hops=raw_seconds / count / hop,
            detail={"records": count},
        ),
        Figure(
            "transport command bus over in-memory transport: send -> ack throughput",
            count / bus_seconds,
            "commands/s",
            hops=bus_seconds / count / bus_hop,
            ratio=raw_seconds / bus_seconds,
            ratio_of="the raw in-memory transport",
            detail={"commands": count, "baseline": "raw in-memory transport, same payloads"},
        ),
        Figure(
            "MessageCodec alone: encode + decode of the same commands",
            count / codec_seconds,
            "commands/s",
            hops=codec_seconds / count / codec_hop,
            detail={"commands": count, "note": "the JSON share of the bus figure above"},
        ),
        Figure(
            "MessageCodec alone: encode",
            count / encode_seconds,
            "commands/s",
            hops=encode_seconds / count / encode_hop,
            detail={"commands": count, "note": "the sender's share"},
        ),
        Figure(
            "MessageCodec alone: decode (envelope, body, checks)",
            count / decode_seconds,
            "commands/s",
            hops=decode_seconds / count / decode_hop,
            detail={"commands": count, "note": "the receiver's share"},
        ),
        Figure(
            "transport command bus over in-memory transport: send -> consumer latency",
            1 / one_way,
            "commands/s (one at a time)",
            hops=one_way / hop_latency,
            detail={"rounds": rounds, "one_way_ns": round(one_way * 1e9, 1)},
        ),
    ]


if __name__ == "__main__":
    Harness.main("transport_bus", run, __doc__)
