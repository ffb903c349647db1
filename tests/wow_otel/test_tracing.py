"""Tracing in one process: one trace from the gateway's wait to every function the
command's events reach, W3C trace context in the headers, stages as span events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest
from opentelemetry import trace

from tests.accounts import Open
from tests.wow_otel.apps import Account, Balances, Welcome
from tests.wow_otel.spans import Node, from_sdk, trees
from wow_core.command import CommandWait
from wow_core.runtime.app import WowApp
from wow_core.runtime.settings import WowSettings
from wow_core.testing import eventually
from wow_otel.context import LocalFirstContextCapture, activate
from wow_otel.testing import OtelCapture

pytestmark = pytest.mark.usefixtures("tracing")

COMMANDS = "wow.bank.account.command"
EVENTS = "wow.bank.account.event"
STATES = "wow.bank.account.state"


def _every(node: Node) -> list[Node]:
    return [node, *(found for child in node.children for found in _every(child))]


def app() -> WowApp:
    return WowApp("bank", aggregates=[Account], components=[Balances, Welcome])


@pytest.mark.parametrize("event_send_spans", [False, True], ids=["default", "event-send-spans"])
async def test_one_trace_runs_from_the_wait_to_every_function_of_the_events(
    otel: OtelCapture, monkeypatch: pytest.MonkeyPatch, event_send_spans: bool
) -> None:
    """By default the event and state streams carry the process span (their functions are
    its children); ``WOW_OTEL__EVENT_SEND_SPANS=true`` adds a producer span per stream."""
    monkeypatch.setenv("WOW_OTEL__EVENT_SEND_SPANS", str(event_send_spans).lower())
    runtime = app().runtime(WowSettings())
    async with runtime:
        command = runtime.aggregates.command(Open("ada"))
        result = await runtime.gateway.send_and_wait(command, CommandWait.projected(), timeout=5)
        assert result.succeeded

        async def deposit_processed() -> bool:
            return any(
                s.name == f"process {COMMANDS}" and s.attributes["wow.message"] == "Deposit"
                for s in otel.spans()
            )

        await eventually(deposit_processed, timeout=5)
        await runtime.command_bus.copies.flush(5)

    (root,) = [tree for tree in trees(from_sdk(otel.spans())) if tree.name == "wait Open"]
    assert root.events == ["SENT", "PROCESSED", "PROJECTED"], "the stages reached, in order"
    assert root.attributes["wow.command.stage"] == "PROJECTED"
    assert {span.trace_id for span in root.find(root.name)} == {root.trace_id}

    send = root.child(f"send {COMMANDS}")
    assert send.kind == "PRODUCER"
    assert send.attributes["messaging.message.id"] == command.id
    process = send.child(f"process {COMMANDS}")
    assert (process.kind, process.attributes["wow.outcome"]) == ("CONSUMER", "succeeded")
    assert process.child("append bank.account").attributes["wow.outcome"] == "ok"
    events = process.child(f"send {EVENTS}") if event_send_spans else process
    states = process.child(f"send {STATES}") if event_send_spans else process
    if not event_send_spans:
        assert not [
            span for span in root.find(root.name) if span.name in (f"send {EVENTS}", f"send {STATES}")
        ]
    projected = events.child("projection bank.Balances.on_opened")
    assert (projected.kind, projected.attributes["wow.outcome"]) == ("CONSUMER", "HANDLED")
    saga = events.child("stateless_saga bank.Welcome.on_opened")
    assert saga.attributes["wow.outcome"] == "HANDLED"
    assert states.child("snapshot bank.SnapshotDispatcher.snapshot").attributes["wow.outcome"] == "HANDLED"

    # the saga's command continues the trace: wait -> send -> process, under the saga
    deposit = saga.child("wait Deposit").child(f"send {COMMANDS}").child(f"process {COMMANDS}")
    assert deposit.attributes["wow.message"] == "Deposit"
    assert deposit.attributes["wow.outcome"] == "succeeded"

    every = [span.span_id for span in root.find(root.name)]
    assert len(every) == len(set(every))
    print(root.text())


async def test_a_message_header_carries_the_producer_span_as_traceparent(otel: OtelCapture) -> None:
    runtime = app().runtime(WowSettings())
    seen: list[str] = []
    async with runtime:
        command = runtime.aggregates.command(Open("bob", 5))
        await runtime.gateway.send_and_wait(command, timeout=5)
        seen.append(command.header["traceparent"])
    (send,) = [s for s in otel.spans() if s.name == f"send {COMMANDS}"]
    context = send.get_span_context()
    version, trace_id, span_id, flags = seen[0].split("-")
    assert (version, trace_id, span_id) == ("00", f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert int(flags, 16) & 1, "sampled"


async def test_a_rejected_command_and_a_timeout_end_their_spans_as_errors(otel: OtelCapture) -> None:
    from tests.accounts import Withdraw

    runtime = WowApp("bank", aggregates=[Account]).runtime(WowSettings())
    async with runtime:
        opened = await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("cy")), timeout=5)
        assert opened.aggregate_id is not None
        withdraw = runtime.aggregates.command(Withdraw(5), opened.aggregate_id.id)
        rejected = await runtime.gateway.send_and_wait(withdraw, timeout=5)
        assert rejected.error_code == "INSUFFICIENT_FUNDS"
    (wait,) = [s for s in otel.spans() if s.name == "wait Withdraw"]
    assert wait.status.status_code is trace.StatusCode.ERROR
    assert wait.attributes is not None
    assert wait.attributes["wow.outcome"] == "INSUFFICIENT_FUNDS"
    (process,) = [
        s
        for s in otel.spans()
        if s.name == f"process {COMMANDS}" and s.attributes and s.attributes["wow.message"] == "Withdraw"
    ]
    assert process.attributes is not None
    assert process.attributes["wow.outcome"] == "INSUFFICIENT_FUNDS"


async def test_framework_log_records_carry_the_trace_id(
    otel: OtelCapture, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = app().runtime(WowSettings())
    with caplog.at_level(logging.DEBUG, logger="wow.event.handler"):
        async with runtime:
            await runtime.gateway.send_and_wait(
                runtime.aggregates.command(Open("dee", 1)), CommandWait.projected(), timeout=5
            )
    lines = [r for r in caplog.records if r.name == "wow.event.handler" and "Balances.on_opened" in r.message]
    assert lines, "a DEBUG line per event function"
    (projected,) = [s for s in otel.spans() if s.name == "projection bank.Balances.on_opened"]
    assert lines[0].trace_id == f"{projected.get_span_context().trace_id:032x}"  # type: ignore[attr-defined]
    assert "HANDLED" in lines[0].message
    assert "Opened" in lines[0].message


async def test_every_log_record_has_the_trace_fields_so_one_format_serves_every_logger(
    otel: OtelCapture,
) -> None:
    # a format naming %(trace_id)s must format a client library's records too
    activate()
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    foreign = logging.getLogger("aiokafka.test_trace_fields")
    foreign.addHandler(handler)
    foreign.setLevel(logging.INFO)
    try:
        tracer = otel.tracer_provider.get_tracer("test")
        foreign.info("outside a span")
        with tracer.start_as_current_span("inside") as span:
            foreign.info("inside a span")
    finally:
        foreign.removeHandler(handler)
    outside, inside = records
    assert (outside.trace_id, outside.span_id) == ("", "")  # type: ignore[attr-defined]
    assert inside.trace_id == f"{span.get_span_context().trace_id:032x}"  # type: ignore[attr-defined]
    line = logging.Formatter("%(trace_id)s %(name)s %(message)s").format(inside)
    assert line.endswith("aiokafka.test_trace_fields inside a span")


async def test_the_context_capture_restores_only_the_trace_context_in_another_task(otel: OtelCapture) -> None:
    activate()
    capture = LocalFirstContextCapture()
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("sender") as sender:
        captured = capture.capture()

    async def later() -> tuple[int, int]:
        before = trace.get_current_span().get_span_context().span_id
        with capture.restore(captured):
            during = trace.get_current_span().get_span_context().span_id
        return before, during

    loop = asyncio.get_running_loop()
    import contextvars

    before, during = await loop.create_task(later(), context=contextvars.Context())
    assert before == 0, "the copy worker's own context has no span"
    assert during == sender.get_span_context().span_id
    assert trace.get_current_span().get_span_context().span_id == 0


async def test_a_streaming_wait_is_one_span_with_an_event_per_stage_yielded(otel: OtelCapture) -> None:
    runtime = app().runtime(WowSettings())
    async with runtime:
        gateway = runtime.gateway
        stream = gateway.send_and_wait_stream(
            runtime.aggregates.command(Open("eve", 1)), CommandWait.projected()
        )
        stages = [result.stage.value async for result in stream]
        early = gateway.send_and_wait_stream(
            runtime.aggregates.command(Open("fay", 1)), CommandWait.projected()
        )
        async with contextlib.aclosing(early) as left:
            async for result in left:
                assert result.stage.value == "SENT"
                break
    assert stages == ["SENT", "PROCESSED", "PROJECTED"]
    waits = [s for s in otel.spans() if s.name == "wait Open"]
    assert len(waits) == 2
    done, closed = sorted(waits, key=lambda s: len(s.events), reverse=True)
    assert [event.name for event in done.events] == stages
    assert done.attributes is not None
    assert done.attributes["wow.command.wait.streaming"] is True
    assert done.attributes["wow.outcome"] == "succeeded"
    assert [event.name for event in closed.events] == ["SENT"]
    assert closed.attributes is not None
    assert closed.attributes["wow.outcome"] == "closed", "left before PROJECTED"
    (send,) = [
        s for s in otel.spans() if s.name == f"send {COMMANDS}" and s.parent == done.get_span_context()
    ]
    assert send.kind is trace.SpanKind.PRODUCER


async def test_a_trace_not_sampled_starts_no_span_below_its_root_and_keeps_its_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The root decides (``parentbased_always_off``): the wait span is the only span
    started per command; the command, its events and the saga's command carry the root's
    trace id with the flags not sampled, and the metrics are recorded as ever."""
    from wow_otel.lean import LeanTracer

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    started: list[tuple[str, int, bool]] = []
    # what the decorators start their spans with (the wait span: start_lazy)
    start_owning, start_lazy = LeanTracer.start_owning, LeanTracer.start_lazy

    nested: list[bool] = []  # start_lazy's fallback is start_owning: one span counted once

    def counting(start: Any) -> Any:
        def counted(self: LeanTracer, name: str, *args: Any) -> trace.Span:
            nested.append(True)
            try:
                span: trace.Span = start(self, name, *args)
            finally:
                nested.pop()
            if not nested:
                context = span.get_span_context()
                started.append((name, context.trace_id, context.trace_flags.sampled))
            return span

        return counted

    monkeypatch.setattr(LeanTracer, "start_owning", counting(start_owning))
    monkeypatch.setattr(LeanTracer, "start_lazy", counting(start_lazy))
    with OtelCapture() as otel:
        runtime = app().runtime(WowSettings(metrics="otel"))
        async with runtime:
            command = runtime.aggregates.command(Open("dee"))
            result = await runtime.gateway.send_and_wait(command, CommandWait.projected(), timeout=5)
            assert result.succeeded

            async def deposit_waited() -> bool:
                waits = otel.metric_points("wow.command.waits")
                return any(p.attributes["wow.message"] == "Deposit" for p in waits)

            await eventually(deposit_waited, timeout=5)
            await runtime.command_bus.copies.flush(5)
        assert [name for name, _, _ in started] == ["wait Open", "wait Deposit"]
        (root_trace,) = {trace_id for _, trace_id, _ in started}  # the saga's command: same trace
        assert not any(sampled for _, _, sampled in started)
        _, trace_id, _, flags = command.header["traceparent"].split("-")
        assert (int(trace_id, 16), int(flags, 16) & 1) == (root_trace, 0)
        assert not otel.spans()
        waits = otel.metric_points("wow.command.waits")
        assert sum(p.value for p in waits if p.attributes["wow.message"] == "Open") == 1


async def test_an_appended_stream_keeps_the_process_span_and_its_sends_carry_it_uncopied(
    otel: OtelCapture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's decorator writes the ``process`` span's context into the stream before
    the append marks it read-only: the stream read back carries it, and the event send
    (which carries the same context) sends the stream itself: tracing copies no stream."""
    from wow_core.model import DomainEventStream
    from wow_otel import propagation

    copies: list[str] = []
    copy = DomainEventStream.copy

    def counting(self: DomainEventStream) -> DomainEventStream:
        copies.append(self.id)
        return copy(self)

    async def opened() -> tuple[DomainEventStream, int]:
        runtime = WowApp("bank", aggregates=[Account], components=[Balances]).runtime(WowSettings())
        async with runtime:
            monkeypatch.setattr(DomainEventStream, "copy", counting)
            result = await runtime.gateway.send_and_wait(
                runtime.aggregates.command(Open("eve")), CommandWait.projected(), timeout=5
            )
            monkeypatch.setattr(DomainEventStream, "copy", copy)
            assert result.succeeded
            assert result.aggregate_id is not None
            (stream,) = await runtime.event_store.load(result.aggregate_id)
        return stream, copies.count(stream.id)

    stream, traced_copies = await opened()
    (process,) = [s for s in otel.spans() if s.name == f"process {COMMANDS}"]
    assert stream.header[propagation.TRACEPARENT] == propagation.traceparent(process.get_span_context())
    (projected,) = [s for s in otel.spans() if s.name == "projection bank.Balances.on_opened"]
    assert projected.parent is not None
    assert projected.parent.span_id == process.get_span_context().span_id
    monkeypatch.setenv("WOW_OTEL__TRACING", "false")
    _, untraced_copies = await opened()
    assert traced_copies == untraced_copies, "tracing adds no copy of the stream"
