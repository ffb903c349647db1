"""Configuration: the ``OTEL_*`` variables pick exporters (a wrong one fails at start-up,
naming the variable), Prometheus serves a scrape endpoint, ``wow plugins`` lists the otel
backends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from wow_core.runtime.cli import main
from wow_otel.metrics import OtelMetrics
from wow_otel.sdk import OtelConfigError, build_meter_provider, build_tracer_provider

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "OTEL_TRACES_EXPORTER",
            "zipkin",
            "OTEL_TRACES_EXPORTER='zipkin' is not accepted: otlp, console, none",
        ),
        (
            "OTEL_METRICS_EXPORTER",
            "statsd",
            "OTEL_METRICS_EXPORTER='statsd' is not accepted: otlp, console, prometheus, none",
        ),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "http/json",
            "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not accepted",
        ),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "web", "OTEL_EXPORTER_PROMETHEUS_PORT='web' is not a port number"),
    ],
)
def test_a_wrong_exporter_setting_fails_naming_the_variable(
    variable: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    if variable == "OTEL_EXPORTER_PROMETHEUS_PORT":
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    build = build_tracer_provider if variable == "OTEL_TRACES_EXPORTER" else build_meter_provider
    if variable == "OTEL_EXPORTER_OTLP_PROTOCOL":
        build = build_tracer_provider
    with pytest.raises(OtelConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_the_standard_variables_choose_exporters_and_the_service_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "bank")
    provider = build_tracer_provider()
    processors = provider._active_span_processor._span_processors
    assert all(isinstance(p, BatchSpanProcessor) for p in processors)
    kinds = [type(p.span_exporter).__name__ for p in processors]  # type: ignore[attr-defined]
    assert kinds == [ConsoleSpanExporter.__name__, "OTLPSpanExporter"]
    assert provider.resource.attributes["service.name"] == "bank"
    provider.shutdown()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert build_tracer_provider()._active_span_processor._span_processors == ()


def test_prometheus_scrapes_the_metrics_of_the_otel_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    provider = build_meter_provider()
    try:
        metrics = OtelMetrics(provider.get_meter("wow_otel"))
        metrics.increment("wow.command.rejections", tags={"code": "INSUFFICIENT_FUNDS"})
        metrics.gauge("wow.local_first.backlog", 3, {"bus": "command", "aggregate": "bank.account"})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        provider.shutdown()
    assert 'wow_command_rejections_total{code="INSUFFICIENT_FUNDS"' in text
    assert 'wow_local_first_backlog{aggregate="bank.account",bus="command"' in text


def test_wow_plugins_lists_the_otel_backends(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    otel = {(r["kind"], r["name"]) for r in document["registrations"] if r["distribution"] == "wow-otel"}
    assert otel == {
        ("metrics", "otel"),
        ("middleware", "otel"),
        ("context_capture", "trace_context"),
        ("settings", "otel"),
    }


def test_the_sampler_is_the_one_otel_traces_sampler_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    provider = build_tracer_provider()
    assert provider.sampler.get_description() == "TraceIdRatioBased{0.25}"


SERVICE = """
import asyncio, sys
from tests.accounts import Account, Open
from wow_core.runtime.app import WowApp

async def main() -> None:
    runtime = WowApp("bank", aggregates=[Account]).runtime()
    async with runtime:
        await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada")))

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_service_configured_only_by_variables_exports_its_spans(tmp_path: Path) -> None:
    """A fresh process: the global providers are built from OTEL_* (console exporter)
    and flushed at exit."""
    env = {
        **os.environ,
        "WOW_OTEL__TRACING": "true",
        "WOW_METRICS": "otel",
        "OTEL_SERVICE_NAME": "bank-probe",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "console",
        "OTEL_METRIC_EXPORT_INTERVAL": "60000",
    }
    done = subprocess.run(
        [sys.executable, "-c", SERVICE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "send wow.bank.account.command"' in done.stdout
    assert '"service.name": "bank-probe"' in done.stdout
    assert '"name": "messaging.client.sent.messages"' in done.stdout, "metrics flushed at exit"
