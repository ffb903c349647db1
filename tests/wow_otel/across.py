"""One trace across processes, the same scenario on every transport.

Process A is the test process: a runtime hosting nothing, tracing into in-memory
exporters, that sends the journal ledger's commands and waits for ``PROJECTED`` and
``SAGA_HANDLED``. Process B (``wow run`` of :mod:`tests.wow_kafka.journal_app`) hosts the
ledger aggregate; process C (``wow run tests.wait_apps:reactor``) runs the projection
and the saga. B and C export their spans over OTLP/HTTP to a receiver the test runs
(:class:`~tests.wow_otel.otlp_receiver.OtlpReceiver`), configured only by the standard
``OTEL_*`` variables and ``WOW_OTEL__TRACING``. Every command's spans, from the three
processes, make one trace with the right parents and nothing orphaned.

Each member exports on its own schedule, so spans reach the receiver in no causal order:
C's projection and saga can arrive before B's ``process`` span that is their ancestor
(B ends it after publishing the events C handles). The test waits until every trace is
complete, no span's parent missing, before it checks the trees; B exports later than C
(``JOURNAL_EXPORT_DELAY_MS``) so that this ordering happens on every run, not only on a
loaded machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid

import pytest

from tests.service_members import Member
from tests.wait_members import REACTOR, caller, record, serving
from tests.wow_kafka.journal_app import CONTEXT
from tests.wow_otel.otlp_receiver import OtlpReceiver
from tests.wow_otel.spans import Node, from_sdk
from wow_core.command import CommandStage, CommandWait
from wow_core.runtime.runtime import WowRuntime
from wow_core.testing import eventually
from wow_core.testing.support import ConformanceTimeout
from wow_otel.testing import OtelCapture

COMMANDS = 3
EXPORT_DELAY_MS = 100
# B (the ledger) exports well after C (the reactor): C's spans arrive before B's
# ``process`` span, their ancestor, as on a loaded machine (module docstring).
JOURNAL_EXPORT_DELAY_MS = 1000


def traced(
    env: dict[str, str], receiver: OtlpReceiver, service: str, export_delay_ms: int = EXPORT_DELAY_MS
) -> dict[str, str]:
    return {
        **env,
        "WOW_OTEL__TRACING": "true",
        "OTEL_SERVICE_NAME": service,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": str(export_delay_ms),
        "OTEL_METRICS_EXPORTER": "none",
    }


async def one_trace_across_processes(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole scenario (module docstring); ``env`` configures the transport of every
    process."""
    receiver = OtlpReceiver()
    members: list[Member] = []
    runtime: WowRuntime | None = None
    monkeypatch.setenv("WOW_OTEL__TRACING", "true")
    try:
        members.append(Member("journal", traced(env, receiver, "journal", JOURNAL_EXPORT_DELAY_MS)))
        members.append(Member("reactor", traced(env, receiver, "reactor"), REACTOR))
        for member in members:
            await serving(member)
        with OtelCapture() as otel:
            runtime = await caller(env, monkeypatch)
            run = uuid.uuid4().hex[:6]
            results = await asyncio.gather(
                *(
                    runtime.gateway.send_and_wait(
                        record(f"t-{run}-{n}"), CommandWait.projected(CONTEXT, "LedgerTotals"), timeout=30
                    )
                    for n in range(COMMANDS)
                ),
                runtime.gateway.send_and_wait(record(f"s-{run}"), CommandWait.saga_handled(), timeout=30),
            )
            assert [r.stage for r in results] == [CommandStage.PROJECTED] * COMMANDS + [
                CommandStage.SAGA_HANDLED
            ]
            await runtime.stop()
            runtime = None
            caller_spans = from_sdk(otel.spans())

        waits = [span for span in caller_spans if span.name == "wait record"]
        assert len(waits) == COMMANDS + 1
        traces = {wait.trace_id for wait in waits}
        assert len(traces) == COMMANDS + 1, "one trace per command"

        async def every_trace_complete() -> bool:
            received = receiver.received()
            return all(
                complete([span for span in caller_spans + received if span.trace_id == trace_id])
                for trace_id in traces
            )

        # On a timeout check_trace fails naming what is missing, which the timeout would not.
        with contextlib.suppress(ConformanceTimeout):
            await eventually(every_trace_complete, timeout=30, what="every trace to be complete")
        for wait in waits:
            check_trace(wait, [span for span in caller_spans if span.trace_id == wait.trace_id], receiver)
    finally:
        if runtime is not None:
            await runtime.stop()
        for member in members:
            member.stop()
        receiver.close()


FUNCTIONS = {"projection journal.LedgerTotals.recorded", "stateless_saga journal.LedgerSaga.recorded"}


def complete(nodes: list[Node]) -> bool:
    """Whether one trace's spans, as received so far, are all there: C's two functions
    (the leaves, the last spans to end) and every span's parent (so B's ``send`` of the
    events, its ``process`` and A's ``send`` above them)."""
    ids = {node.span_id for node in nodes}
    return {node.name for node in nodes} >= FUNCTIONS and all(
        node.parent_id is None or node.parent_id in ids for node in nodes
    )


def check_trace(wait: Node, local: list[Node], receiver: OtlpReceiver) -> None:
    """``wait``'s trace: A's wait and send, B's process and append, C's projection and
    saga (children of B's process span), each the child of the one before, nothing
    orphaned."""
    nodes = local + [node for node in receiver.received() if node.trace_id == wait.trace_id]
    by_id = {node.span_id: node for node in nodes}
    service = {**{node.span_id: "caller" for node in local}, **receiver.services}

    def only(name: str, parent: Node) -> Node:
        """The one child of ``parent`` named ``name`` (``<topic>`` stands for the
        transport's name of a topic: ``...journal.ledger.command``, ``...:command``)."""
        pattern = re.compile(re.escape(name).replace(re.escape("<topic>"), r"\S*journal\.ledger\W"))
        found = [n for n in nodes if pattern.fullmatch(n.name) and n.parent_id == parent.span_id]
        assert len(found) == 1, f"{name} under {parent.name}: {[(n.name, n.parent_id) for n in nodes]}"
        return found[0]

    assert wait.parent_id is None
    send = only("send <topic>command", wait)
    process = only("process <topic>command", send)
    assert service[process.span_id] == "journal"
    assert process.kind == "CONSUMER"
    assert process.attributes["wow.outcome"] == "succeeded"
    only("append journal.ledger", process)
    # the event stream carries the process span (no producer span of its own by default):
    # the reactor's functions, in process C, are its children
    functions = [n for n in nodes if n.parent_id == process.span_id and n.name in FUNCTIONS]
    assert {service[n.span_id] for n in functions} == {"reactor"}
    assert {n.name for n in functions} == FUNCTIONS
    orphans = [n.name for n in nodes if n.parent_id is not None and n.parent_id not in by_id]
    assert not orphans, f"spans whose parent is in no process: {orphans}"
