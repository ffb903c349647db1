"""Configuration: the ``OTEL_*`` variables pick exporters (a wrong one fails at start-up,
naming the variable), Prometheus serves a scrape endpoint, ``wow plugins`` lists the otel
backends."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from tests.services import free_port
from wow_core.runtime.cli import main
from wow_otel import sdk
from wow_otel.metrics import OtelMetrics
from wow_otel.sdk import OtelConfigError, build_meter_provider, build_tracer_provider

ROOT = Path(__file__).resolve().parents[2]


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


SAMPLERS = (
    "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, "
    "parentbased_traceidratio"
)


@pytest.mark.parametrize(
    ("environment", "build", "message"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            build_tracer_provider,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json' is not accepted: http/protobuf, grpc",
        ),
        (
            {"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            build_meter_provider,
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL='http/json' is not accepted: http/protobuf, grpc",
        ),
        (
            {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "99999"},
            build_meter_provider,
            "OTEL_EXPORTER_PROMETHEUS_PORT='99999' is not a port number: 0-65535",
        ),
        (
            {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "-1"},
            build_meter_provider,
            "OTEL_EXPORTER_PROMETHEUS_PORT='-1' is not a port number: 0-65535",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "bogus"},
            build_tracer_provider,
            f"OTEL_TRACES_SAMPLER='bogus' is not accepted: {SAMPLERS}",
        ),
        *(
            (
                {"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": arg},
                build_tracer_provider,
                f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not accepted: a number from 0 to 1 "
                f"(the sampling ratio of OTEL_TRACES_SAMPLER={sampler!r})",
            )
            for sampler, arg in [
                ("traceidratio", "abc"),
                ("traceidratio", "5"),
                ("parentbased_traceidratio", "-0.5"),
                ("parentbased_traceidratio", "nan"),
            ]
        ),
        *(
            (
                {"OTEL_METRICS_EXPORTER": exporter, "OTEL_METRIC_EXPORT_INTERVAL": interval},
                build_meter_provider,
                f"OTEL_METRIC_EXPORT_INTERVAL={interval!r} is not accepted: "
                "a number of milliseconds greater than 0",
            )
            for exporter, interval in [("console", "soon"), ("otlp", "-5"), ("console", "0"), ("otlp", "nan")]
        ),
    ],
)
def test_a_wrong_otel_value_is_refused_naming_the_variable_read_and_what_is_accepted(
    environment: dict[str, str],
    build: Callable[[], object],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(OtelConfigError) as raised:
        build()
    assert str(raised.value) == message
    assert not caplog.records, "refused, not an SDK warning"


def test_right_sampler_and_interval_values_are_taken_without_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    expected = {
        "always_on": "AlwaysOnSampler",
        "ALWAYS_OFF": "AlwaysOffSampler",
        "parentbased_always_on": "ParentBased{root:AlwaysOnSampler,",
        "parentbased_always_off": "ParentBased{root:AlwaysOffSampler,",
        "traceidratio": "TraceIdRatioBased{1.0}",  # no OTEL_TRACES_SAMPLER_ARG: 1.0
        "parentbased_traceidratio": "ParentBased{root:TraceIdRatioBased{1.0},",
    }
    for name, description in expected.items():
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
        assert build_tracer_provider().sampler.get_description().startswith(description)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER")
    assert build_tracer_provider().sampler.get_description().startswith("ParentBased{root:AlwaysOnSampler,")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    assert "TraceIdRatioBased{0.0}" in build_tracer_provider().sampler.get_description()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "1500.5")
    provider = build_meter_provider()
    readers = provider._metric_readers  # type: ignore[attr-defined]
    assert [reader._export_interval_millis for reader in readers] == [1500.5]
    provider.shutdown()
    assert not caplog.records


@pytest.mark.parametrize(
    ("environment", "build", "message"),
    [
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            build_tracer_provider,
            "OTEL_EXPORTER_OTLP_PROTOCOL='grpc' needs a package that is not installed "
            "(opentelemetry-exporter-otlp-proto-grpc, module opentelemetry.exporter.otlp.proto.grpc): "
            "install wow-otel[grpc], or choose another protocol",
        ),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
            build_meter_provider,
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL='grpc' needs a package that is not installed "
            "(opentelemetry-exporter-otlp-proto-grpc, module opentelemetry.exporter.otlp.proto.grpc): "
            "install wow-otel[grpc], or choose another protocol",
        ),
    ],
)
def test_a_protocol_whose_package_is_missing_is_refused_naming_the_protocol_variable(
    environment: dict[str, str], build: Callable[[], object], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc", None)
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(OtelConfigError) as raised:
        build()
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("exporter", "build", "message"),
    [
        (
            "OTEL_TRACES_EXPORTER=otlp",
            build_tracer_provider,
            "OTEL_TRACES_EXPORTER='otlp' needs a package that is not installed "
            "(opentelemetry-exporter-otlp-proto-http, module opentelemetry.exporter.otlp.proto.http): "
            "install wow-otel[otlp], or choose another exporter",
        ),
        (
            "OTEL_METRICS_EXPORTER=prometheus",
            build_meter_provider,
            "OTEL_METRICS_EXPORTER='prometheus' needs a package that is not installed "
            "(opentelemetry-exporter-prometheus, module opentelemetry.exporter.prometheus): "
            "install wow-otel[prometheus], or choose another exporter",
        ),
    ],
)
def test_with_no_exporter_package_installed_the_missing_one_is_named_not_the_namespace(
    exporter: str, build: Callable[[], object], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ``wow-py[otel]``: no ``opentelemetry.exporter`` namespace at all."""
    for module in [name for name in sys.modules if name.startswith("opentelemetry.exporter.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter", None)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv(*exporter.split("="))
    with pytest.raises(OtelConfigError) as raised:
        build()
    assert str(raised.value) == message


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


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
        return text


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def test_prometheus_scrapes_the_metrics_of_the_otel_backend_while_its_endpoint_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The endpoint listens from its first start to its last close (one per runtime of the
    process), not from the provider's build."""
    port = free_port()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    provider = build_meter_provider()
    endpoint = sdk.prometheus_endpoint_of(provider)
    assert endpoint is not None
    assert sdk.process_prometheus_endpoint() is None, "not the process's provider: no runtime runs it"
    assert (endpoint.host, endpoint.port) == ("127.0.0.1", port)
    assert not _listening(port), "built, not started: no port taken"
    try:
        await endpoint.start()
        await endpoint.start()  # a second runtime of the process
        metrics = OtelMetrics(provider.get_meter("wow_otel"))
        metrics.increment("wow.command.rejections", tags={"code": "INSUFFICIENT_FUNDS"})
        metrics.gauge("wow.local_first.backlog", 3, {"bus": "command", "aggregate": "bank.account"})
        text = await asyncio.to_thread(_scrape, port)
        await endpoint.close()
        assert _listening(port), "still one runtime running"
        await endpoint.close()
        assert not _listening(port)
        await endpoint.close()  # closed once more: nothing to do
    finally:
        await endpoint.close()
        provider.shutdown()
    assert 'wow_command_rejections_total{code="INSUFFICIENT_FUNDS"' in text
    assert 'wow_local_first_backlog{aggregate="bank.account",bus="command"' in text


async def test_a_prometheus_port_taken_fails_the_start_naming_the_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = sdk.PrometheusEndpoint("127.0.0.1", port)
        with pytest.raises(OtelConfigError, match=rf"OTEL_EXPORTER_PROMETHEUS_PORT={port}: .*cannot listen"):
            await endpoint.start()
        assert not endpoint.serving
        await endpoint.close()  # never started: nothing to do


async def test_a_prometheus_endpoint_given_a_port_past_65535_fails_its_start_naming_the_variables() -> None:
    """Built directly (not from the variables, which refuse it): OverflowError, not OSError."""
    endpoint = sdk.PrometheusEndpoint("127.0.0.1", 99999)
    with pytest.raises(
        OtelConfigError, match=r"OTEL_EXPORTER_PROMETHEUS_PORT=99999: .*cannot listen there: "
    ):
        await endpoint.start()
    assert not endpoint.serving


PROMETHEUS_SERVICE = """
import asyncio, json, socket, sys, urllib.request
from tests.accounts import Account, Open
from wow_core.runtime.app import WowApp
from wow_core.runtime.runtime import StartError

PORT = int(sys.argv[1])

def listening() -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", PORT)) == 0

async def main() -> None:
    report = {}
    runtime = WowApp("bank", aggregates=[Account]).runtime()
    report["built"] = listening()
    if sys.argv[2] == "taken":
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", PORT))
            taken.listen()
            try:
                await runtime.start()
            except StartError as error:
                report["error"] = str(error)
        print(json.dumps(report))
        return
    async with runtime:
        await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada")))
        url = f"http://127.0.0.1:{PORT}/metrics"
        report["scraped"] = urllib.request.urlopen(url, timeout=5).read().decode()
    report["stopped"] = listening()
    print(json.dumps(report))

asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["free", "taken"])
def test_a_runtime_serves_prometheus_while_it_runs_and_a_taken_port_fails_its_start(
    case: str, tmp_path: Path
) -> None:
    """A fresh process configured by the variables: building the runtime takes no port
    (``wow asyncapi``, ``wow openapi`` and ``wow send`` build one beside a running service);
    the endpoint answers while it runs and is closed when it stops; a port another process
    holds fails the start, naming the variables."""
    port = free_port()
    env = {
        **os.environ,
        "WOW_METRICS": "otel",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROMETHEUS_SERVICE, str(port), case],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["built"] is False
    if case == "taken":
        assert "the prometheus endpoint did not start" in report["error"]
        assert f"OTEL_EXPORTER_PROMETHEUS_PORT={port}" in report["error"]
        return
    assert "messaging_client_sent_messages_total" in report["scraped"]
    assert report["stopped"] is False


def test_a_wrong_exporter_is_one_line_and_exit_status_2_for_a_command_that_builds_the_runtime(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``OtelConfigError`` is a wrong setting (a ``SettingsError``), not a broken app."""
    from wow_core.settings import SettingsError

    assert issubclass(OtelConfigError, SettingsError)
    monkeypatch.setenv("WOW_METRICS", "otel")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "statsd")
    assert main(["openapi", "wow_core.examples.bank.app:app"]) == 2  # wow-http's command
    err = capsys.readouterr().err
    assert "OTEL_METRICS_EXPORTER='statsd' is not accepted" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "OTEL_EXPORTER_PROMETHEUS_PORT",
            "99999",
            "OTEL_EXPORTER_PROMETHEUS_PORT='99999' is not a port number",
        ),
        ("OTEL_TRACES_SAMPLER", "bogus", "OTEL_TRACES_SAMPLER='bogus' is not accepted: always_on,"),
        ("OTEL_TRACES_SAMPLER_ARG", "5", "OTEL_TRACES_SAMPLER_ARG='5' is not accepted: a number from 0 to 1"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "soon", "OTEL_METRIC_EXPORT_INTERVAL='soon' is not accepted"),
    ],
)
def test_a_wrong_sampler_interval_or_port_is_one_line_and_exit_status_2_when_used(
    variable: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused only when what it configures is on: tracing for the sampler, the otel
    metrics backend for the interval and the port."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus" if variable.endswith("PORT") else "console")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("WOW_METRICS", "noop")
    assert main(["openapi", "wow_core.examples.bank.app:app"]) == 0, "off: not read"
    capsys.readouterr()
    if variable.startswith("OTEL_TRACES_"):
        monkeypatch.setenv("WOW_OTEL__TRACING", "true")
    else:
        monkeypatch.setenv("WOW_METRICS", "otel")
    assert main(["openapi", "wow_core.examples.bank.app:app"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_wow_plugins_lists_the_otel_backends(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    otel = {(r["kind"], r["name"]) for r in document["registrations"] if r["distribution"] == "wow-otel"}
    assert otel == {
        ("metrics", "otel"),
        ("middleware", "otel"),
        ("context_capture", "trace_context"),
        ("settings", "otel"),
        ("runtime_installer", "otel"),
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
