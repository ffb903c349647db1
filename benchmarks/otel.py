"""What wow-otel costs: the same work with the plugin inactive, with metrics only, and
with metrics and tracing, in one run.

- ``embedded``: ``send_and_wait(PROCESSED)`` on the embedded runtime (local-first buses
  over the in-memory transport, the snapshot dispatcher running), 64 concurrent callers
  over 1,000 accounts, as in :mod:`benchmarks.kernel`. Inactive: ``WOW_METRICS=noop``
  and tracing off, so the otel middleware is not installed at all (the same as the
  plugin not installed). Metrics: ``WOW_METRICS=otel`` into an SDK meter provider with
  an in-memory reader. All: the same plus ``WOW_OTEL__TRACING=true`` with the always-on
  sampler and a batch span processor over an exporter that drops the spans. All, 1 in
  10: the same with the sampler ``parentbased_traceidratio`` at 0.1 (a tenth of the
  commands traced, their whole trace). The same four again **as ``wow run`` runs the
  service**: after the warm-up the garbage collector is tuned as ``wow run`` tunes it
  once its runtime started (:func:`~wow_core.runtime.gc_tuning.freeze_start_up`: what is
  alive frozen, young threshold 10,000), restored after each run; the plain rows keep
  Python's defaults (a runtime embedded in a host, which ``wow run`` leaves alone).
- ``kafka``: ``TransportCommandBus.send`` (256 sends outstanding) and the bus's receive
  and acknowledge loop, over a ``tansu`` broker started here (or
  ``WOW_BENCH_KAFKA_BOOTSTRAP``), the bus undecorated against the same bus decorated by
  the otel middleware (metrics; metrics and producer spans with trace context injected).
- ``the span operations of one traced command alone``: what always-on tracing would cost
  if the decorators' own code were free (:func:`span_operations`: the five spans of an
  embedded command, their contexts, two injections and two reads, and nothing else), as
  ``wow run`` runs it; its ratio is the inactive command's CPU time over metrics only
  plus these operations, the most the decorators could reach with these spans.

Every configuration runs ``--repeat`` times, the order rotating every round; the
**median** of each is kept. Two figures per run: the wall-clock throughput, and the
throughput per CPU second of this process (``time.process_time``, every thread: the
span processor's too). ``ratio`` is a configuration's CPU throughput over the inactive
one's (goals: 0.9 with metrics only, 0.7 with everything on); the wall-clock ratio is
``detail.wall_ratio``. On a shared machine the wall clock measures the neighbours as
much as the work (a round of the inactive runtime can be slower than one with metrics),
the CPU time of the process much less so.

    python -m benchmarks.otel [--quick] [--repeat R]    # WOW_BENCH_NO_KAFKA=1: embedded only
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind

from benchmarks._harness import ACCOUNT, Figure, Harness, ack_each, codec, commands
from benchmarks.kernel import BenchAccount, processed_throughput
from wow_core.messaging import MessageSubscription
from wow_core.middleware import BusLayer
from wow_core.runtime.app import WowApp
from wow_core.runtime.gc_tuning import freeze_start_up
from wow_core.runtime.settings import WowSettings
from wow_core.transport.bus import TransportCommandBus
from wow_otel import semconv
from wow_otel.current import attach_span, current_span_context, detach
from wow_otel.lean import lean_tracer
from wow_otel.middleware import OtelMiddleware
from wow_otel.propagation import inject, remote_parent
from wow_otel.sdk import use_providers

CONFIGURATIONS = ("off", "metrics", "all", "all 1 in 10")
GOALS = {"metrics": 0.9, "all": 0.7, "all 1 in 10": 0.7}
SAMPLERS: dict[str, Sampler] = {"all": ALWAYS_ON, "all 1 in 10": ParentBased(TraceIdRatioBased(0.1))}

Rates = tuple[float, float]
"""(operations per wall-clock second, operations per CPU second of the process)."""


class DroppingExporter(SpanExporter):
    """Takes every batch and keeps nothing (the cost of an exporter left out)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def providers(name: str) -> tuple[TracerProvider, MeterProvider]:
    tracer_provider = TracerProvider(sampler=SAMPLERS.get(name, ALWAYS_ON))
    tracer_provider.add_span_processor(BatchSpanProcessor(DroppingExporter()))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


@contextmanager
def configured(name: str) -> Iterator[WowSettings]:
    """The settings of configuration ``name``, its providers in use for the block."""
    tracer_provider, meter_provider = providers(name)
    previous = os.environ.get("WOW_OTEL__TRACING")
    os.environ["WOW_OTEL__TRACING"] = "true" if name in SAMPLERS else "false"
    try:
        with use_providers(tracer_provider, meter_provider):
            yield WowSettings(metrics="noop" if name == "off" else "otel")
    finally:
        if previous is None:
            os.environ.pop("WOW_OTEL__TRACING", None)
        else:
            os.environ["WOW_OTEL__TRACING"] = previous
        tracer_provider.shutdown()
        meter_provider.shutdown()


async def rounds(repeat: int, runs: dict[str, Callable[[], Awaitable[Rates]]]) -> dict[str, Rates]:
    """``{name: (median wall rate, median CPU rate)}``, the order rotating every round."""
    measured: dict[str, list[Rates]] = {name: [] for name in runs}
    names = list(runs)
    for round_ in range(repeat):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            measured[name].append(await runs[name]())
    return {
        name: (statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates))
        for name, rates in measured.items()
    }


async def embedded(
    name: str, commands_count: int, wow_run: bool = False, warmed_up: Callable[[], None] | None = None
) -> Rates:
    """One run of configuration ``name``; ``wow_run``: the collector tuned as ``wow run``
    tunes it, from the end of the warm-up to the end of the run; ``warmed_up`` is called
    at the end of the warm-up."""
    with configured(name) as settings:
        runtime = WowApp("bench", aggregates=[BenchAccount]).runtime(settings)
        installed = any(isinstance(item, OtelMiddleware) for item in runtime.middleware)
        assert installed == (name != "off"), f"{name}: otel middleware installed={installed}"
        began: list[float] = []
        threshold = gc.get_threshold()

        def warmed() -> None:
            if wow_run:
                freeze_start_up()
            if warmed_up is not None:
                warmed_up()
            began.append(time.process_time())

        try:
            async with runtime:
                rate, _ = await processed_throughput(runtime, 1000, 64, commands_count, warmed=warmed)
                cpu = time.process_time() - began[0]
        finally:
            gc.set_threshold(*threshold)
            gc.unfreeze()
        return rate, commands_count // 64 * 64 / cpu


def span_operations(tracer: Any, messages: Iterator[Any]) -> None:
    """The span operations of one traced embedded command as the decorators make them,
    with nothing around them (no bus, kernel, store or metrics): the wait span and its two
    events, the send span with its context injected, the process span from that context,
    the append span, the stream's context injected, one event function's span from it.
    Their attribute dicts are the sizes the decorators' are. What always-on tracing would
    cost if the decorators' own code were free."""
    command, stream = next(messages), next(messages)
    destination = {
        "messaging.system": "in_memory",
        "messaging.destination.name": "wow.bench.account.command",
        "messaging.operation.name": "send",
        "wow.message": "Add",
    }
    wait = tracer.start_owning(
        "wait Add",
        None,
        SpanKind.INTERNAL,
        {"a": "bench.account", "m": "Add", "s": "PROCESSED", "c": "c", "r": "r"},
    )
    waiting = attach_span(wait)
    send = tracer.start_owning(
        "send d", None, SpanKind.PRODUCER, {**destination, "t": "send", "k": "command", "i": "id", "g": "a-1"}
    )
    sending = attach_span(send)
    command = inject(command, span_context=send.get_span_context())
    wait.add_event("SENT")
    detach(sending)
    send.end()
    parent = _parent_of(command)
    process = tracer.start_owning(
        "process d",
        parent,
        SpanKind.CONSUMER,
        {**destination, "t": "process", "i": "id", "g": "a-1", "r": "r"},
    )
    processing = attach_span(process, parent)
    stream = inject(stream, span_context=current_span_context())
    append = tracer.start_owning(
        "append a", None, SpanKind.INTERNAL, {"a": "bench.account", "g": "a-1", "v": 3, "c": "c", "e": 1}
    )
    append.set_attribute("wow.outcome", "ok")
    append.end()
    process.set_attributes({"wow.outcome": "succeeded", "wow.aggregate.version": 3})
    process.end()
    detach(processing)
    parent = _parent_of(stream)
    function = tracer.start_owning(
        "snapshot f",
        parent,
        SpanKind.CONSUMER,
        {**destination, "t": "process", "c": "snapshot", "p": "p", "f": "f", "i": "id", "g": "a-1", "v": 3},
    )
    handling = attach_span(function, parent)
    function.set_attribute("wow.outcome", "ok")
    function.end()
    detach(handling)
    wait.add_event("PROCESSED")
    wait.set_attributes({"wow.stage": "PROCESSED", "wow.outcome": "succeeded", "v": 3, "g": "a-1"})
    detach(waiting)
    wait.end()


def _parent_of(message: Any) -> Any:
    """The context a consumer span of ``message`` starts in (its ``traceparent``)."""
    found = remote_parent(message.header)
    assert found is not None
    return found[1]


def operations_cost(count: int) -> float:
    """CPU µs per command of :func:`span_operations` alone, under the "all" configuration's
    pipeline, the collector tuned as ``wow run`` tunes it (so the messages made up front
    are frozen with the rest, as a runtime's start-up is; with Python's defaults they
    would be walked by every collection, which no runtime does with its in-flight
    messages: no figure is given for that row)."""
    tracer_provider, meter_provider = providers("all")
    tracer = lean_tracer(tracer_provider.get_tracer(semconv.INSTRUMENTATION_NAME))
    messages = iter(commands(2 * (count + 1_000), note="span operations"))
    threshold = gc.get_threshold()
    try:
        for _ in range(1_000):
            span_operations(tracer, messages)
        freeze_start_up()
        cpu = time.process_time()
        for _ in range(count):
            span_operations(tracer, messages)
        return (time.process_time() - cpu) / count * 1e6
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def ceiling(label: str, rates: dict[str, Rates], costs: list[float], detail: dict[str, Any]) -> Figure:
    """The ratio always-on tracing would reach if the decorators' own code were free: the
    inactive command's CPU time over metrics only plus the span operations alone."""
    us = statistics.median(costs)
    off_us, metrics_us = 1e6 / rates["off"][1], 1e6 / rates["metrics"][1]
    return Figure(
        f"{label}, the span operations of one traced command alone",
        1e6 / us,
        "commands/s",
        ratio=off_us / (metrics_us + us),
        ratio_of="otel off, per CPU second, with the decorators' own code free",
        detail={**detail, "us_per_command": us, "off_us": off_us, "metrics_us": metrics_us},
    )


def decorated(bus: Any, name: str, tracer_provider: TracerProvider, meter_provider: MeterProvider) -> Any:
    if name == "off":
        return bus
    tracer = tracer_provider.get_tracer(semconv.INSTRUMENTATION_NAME) if name in SAMPLERS else None
    middleware = OtelMiddleware(tracer=tracer, meter=meter_provider.get_meter(semconv.INSTRUMENTATION_NAME))
    return middleware.decorate_bus(bus, BusLayer.TRANSPORT)


async def kafka_send(bootstrap: str, name: str, count: int) -> Rates:
    from benchmarks.kafka_transport import WINDOW, settings_for
    from wow_kafka import KafkaTransport

    messages = commands(count, note="benchmark deposit")
    tracer_provider, meter_provider = providers(name)
    transport = KafkaTransport(settings_for(bootstrap))
    bus = decorated(TransportCommandBus(transport, codec()), name, tracer_provider, meter_provider)
    try:
        await bus.send(messages[0])  # warm-up: topic creation, metadata
        semaphore = asyncio.Semaphore(WINDOW)

        async def one(message: Any) -> None:
            async with semaphore:
                await bus.send(message)

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(message) for message in messages))
        return count / (time.perf_counter() - started), count / (time.process_time() - cpu)
    finally:
        await bus.close()
        await transport.close()
        tracer_provider.shutdown()
        meter_provider.shutdown()


async def kafka_consume(bootstrap: str, name: str, count: int) -> Rates:
    from benchmarks.kafka_transport import settings_for
    from wow_kafka import KafkaTransport

    settings = settings_for(bootstrap, auto_offset_reset="earliest")
    filler = TransportCommandBus(KafkaTransport(settings), codec())
    messages = commands(count, note="benchmark deposit")
    await asyncio.gather(*(filler.send(message) for message in messages))
    await filler.close()
    await filler.transport.close()
    tracer_provider, meter_provider = providers(name)
    transport = KafkaTransport(settings)
    bus = decorated(TransportCommandBus(transport, codec()), name, tracer_provider, meter_provider)
    receiver = bus.receiver(MessageSubscription.of(f"bench-{uuid.uuid4().hex[:8]}", [ACCOUNT]))
    try:
        await receiver.ready()
        started, cpu = time.perf_counter(), time.process_time()
        receiver.open_processing()
        await ack_each(receiver, count)
        return count / (time.perf_counter() - started), count / (time.process_time() - cpu)
    finally:
        await bus.close()
        await transport.close()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def figures(label: str, unit: str, rates: dict[str, Rates], detail: dict[str, Any]) -> list[Figure]:
    found = []
    wall_off, cpu_off = rates["off"]
    for name in CONFIGURATIONS:
        wall, cpu = rates[name]
        extra = {**detail, "per_cpu_second": cpu}
        if name in GOALS:
            extra |= {"goal_ratio": GOALS[name], "wall_ratio": wall / wall_off}
        ratio = None if name == "off" else cpu / cpu_off
        found.append(
            Figure(
                f"{label}, otel {name}",
                wall,
                unit,
                ratio=ratio,
                ratio_of=None if ratio is None else "otel off, per CPU second",
                detail=extra,
            )
        )
    return found


async def run(h: Harness) -> list[Figure]:
    found: list[Figure] = []
    count = h.n(20_000)
    await h.queue_hop()
    rates = await rounds(
        h.repeat, {name: functools.partial(embedded, name, count) for name in CONFIGURATIONS}
    )
    found += figures(
        "embedded send_and_wait(PROCESSED)", "commands/s", rates, {"commands": count, "callers": 64}
    )
    rates = await rounds(
        h.repeat,
        {name: functools.partial(embedded, name, count, wow_run=True) for name in CONFIGURATIONS},
    )
    found += figures(
        "embedded send_and_wait(PROCESSED) as wow run runs it",
        "commands/s",
        rates,
        {"commands": count, "callers": 64, "gc": "wow run (start-up frozen, young threshold 10000)"},
    )
    costs = [operations_cost(count) for _ in range(h.repeat)]
    found.append(
        ceiling("embedded send_and_wait(PROCESSED) as wow run runs it", rates, costs, {"commands": count})
    )
    if os.environ.get("WOW_BENCH_NO_KAFKA"):
        return found
    from benchmarks.kafka_transport import bootstrap_or_tansu

    bootstrap, broker = bootstrap_or_tansu()
    try:
        records = h.n(10_000)
        send = await rounds(
            h.repeat,
            {name: functools.partial(kafka_send, bootstrap, name, records) for name in CONFIGURATIONS},
        )
        found += figures("kafka TransportCommandBus.send", "messages/s", send, {"records": records})
        consume = await rounds(
            h.repeat,
            {name: functools.partial(kafka_consume, bootstrap, name, records) for name in CONFIGURATIONS},
        )
        found += figures(
            "kafka TransportCommandBus receive and ack", "messages/s", consume, {"records": records}
        )
    finally:
        if broker is not None:
            broker.stop()
    return found


if __name__ == "__main__":
    Harness.main("otel", run, __doc__)
