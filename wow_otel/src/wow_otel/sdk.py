"""The tracer and meter providers wow-otel records to, and their setup from ``OTEL_*``.

Which providers (in this order):

1. those given to :func:`use_providers` (tests, or an application that wants wow-py on
   providers of its own without making them global);
2. the global providers, when the application installed SDK providers itself
   (``trace.set_tracer_provider``...) or ``WOW_OTEL__CONFIGURE_SDK=false``;
3. otherwise SDK providers built once per process from the standard variables and made
   global:

   - ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``: the resource;
   - ``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``: the sampler (one of :data:`SAMPLERS`);
   - ``OTEL_TRACES_EXPORTER``: ``otlp`` (the default), ``console``, ``none``, comma-separated;
   - ``OTEL_METRICS_EXPORTER``: ``otlp`` (the default), ``console``, ``prometheus``, ``none``;
   - ``OTEL_EXPORTER_OTLP_PROTOCOL`` (and the ``_TRACES_`` / ``_METRICS_`` forms):
     ``http/protobuf`` (the default, ``wow-otel[otlp]``) or ``grpc`` (``wow-otel[grpc]``);
     ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the rest are read by the exporters themselves;
   - ``OTEL_EXPORTER_PROMETHEUS_HOST`` (default ``localhost``), ``OTEL_EXPORTER_PROMETHEUS_PORT``
     (default ``9464``): where the Prometheus scrape endpoint listens (``wow-otel[prometheus]``)
     while a runtime runs (:class:`PrometheusEndpoint`: bound when the first runtime of the
     process starts, closed when the last one stops; building one binds nothing);
   - ``OTEL_METRIC_EXPORT_INTERVAL`` (ms): the push interval of the OTLP and console readers;
   - ``OTEL_SDK_DISABLED=true``: no SDK provider at all (the API's no-op ones).

A value wow-otel cannot honour raises :class:`OtelConfigError` naming the variable read,
its value and what is accepted, when the runtime is built (a
:class:`~wow_core.settings.SettingsError`: the ``wow`` commands print it in one line and
exit 2): an unknown exporter, sampler or OTLP protocol, an exporter or protocol whose
package is not installed (named: distribution and module), a sampler ratio that is not a
number from 0 to 1, an export interval that is not a number of ms above 0, a Prometheus
port that is not a number from 0 to 65535. Only what is used is checked: the tracing
variables with ``WOW_OTEL__TRACING``, the metrics ones with the otel metrics backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from wow_core.settings import SettingsError
from wow_otel.settings import OtelSettings


class OtelConfigError(SettingsError):
    """An ``OTEL_*`` variable wow-otel cannot honour (an unknown or missing exporter, a
    wrong sampler, protocol, interval or port, a Prometheus endpoint that cannot listen
    where it is told to)."""


class PrometheusEndpoint:
    """The Prometheus scrape endpoint (``/metrics``) of the process's meter provider
    (``OTEL_METRICS_EXPORTER=prometheus``), a service of every runtime of the process: it
    listens from the start of the first runtime to the stop of the last, so a process that
    only builds a runtime (``wow asyncapi``, ``wow openapi``, ``wow send``) takes no port.
    An address it cannot listen on fails the runtime's start with
    :class:`OtelConfigError` naming the two variables."""

    name = "prometheus endpoint"

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._users = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        with self._lock:
            if self._users == 0:
                from prometheus_client import start_http_server

                try:
                    self._server, self._thread = start_http_server(port=self.port, addr=self.host)
                except (OSError, OverflowError) as error:  # OverflowError: a port past 65535
                    reason = (error.strerror if isinstance(error, OSError) else None) or error
                    raise OtelConfigError(
                        f"OTEL_EXPORTER_PROMETHEUS_HOST={self.host!r}, OTEL_EXPORTER_PROMETHEUS_PORT="
                        f"{self.port}: the Prometheus endpoint cannot listen there: {reason}"
                    ) from None
            self._users += 1

    async def close(self) -> None:
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users:
                return
            server, thread = self._server, self._thread
            self._server = self._thread = None
        await asyncio.to_thread(_stop_serving, server, thread)  # its loop polls every 0.5 s


def _stop_serving(server: Any, thread: threading.Thread | None) -> None:
    server.shutdown()
    server.server_close()
    if thread is not None:
        thread.join(timeout=5)


_endpoints: weakref.WeakKeyDictionary[Any, PrometheusEndpoint] = weakref.WeakKeyDictionary()
"""The Prometheus endpoint of each meter provider built here with a Prometheus reader."""


def prometheus_endpoint_of(provider: object) -> PrometheusEndpoint | None:
    """The endpoint of ``provider`` (built by :func:`build_meter_provider`), if it has one."""
    return _endpoints.get(provider)


def process_prometheus_endpoint() -> PrometheusEndpoint | None:
    """The endpoint of the meter provider built for this process (:func:`meter_provider`),
    which every runtime of the process runs (the plugin's installer); ``None`` when there is
    none, or while :func:`use_providers` gives the runtimes other providers."""
    if _override is not None:
        return None
    provider = _configured.get("metrics")
    return None if provider is None else _endpoints.get(provider)


@dataclass(frozen=True)
class Providers:
    """A tracer provider and a meter provider (either may be the API's no-op one)."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider


_lock = threading.Lock()
_override: Providers | None = None
_configured: dict[str, Any] = {}


@contextlib.contextmanager
def use_providers(
    tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> Iterator[Providers]:
    """Record to these providers (not made global) while the block runs: every runtime
    assembled inside it uses them. Unset ones are the API's no-op providers."""
    global _override
    previous = _override
    _override = Providers(
        tracer_provider or trace.NoOpTracerProvider(), meter_provider or metrics.NoOpMeterProvider()
    )
    try:
        yield _override
    finally:
        _override = previous


def _disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _names(variable: str, default: str) -> list[str]:
    value = os.environ.get(variable, default)
    return [name.strip().lower() for name in value.split(",") if name.strip()]


@dataclass(frozen=True)
class _Package:
    """An optional exporter package: its distribution, the module imported, the extra."""

    distribution: str
    module: str
    extra: str


_OTLP_PACKAGES = {
    "http/protobuf": _Package(
        "opentelemetry-exporter-otlp-proto-http", "opentelemetry.exporter.otlp.proto.http", "otlp"
    ),
    "grpc": _Package(
        "opentelemetry-exporter-otlp-proto-grpc", "opentelemetry.exporter.otlp.proto.grpc", "grpc"
    ),
}
_PROMETHEUS_EXPORTER = _Package(
    "opentelemetry-exporter-prometheus", "opentelemetry.exporter.prometheus", "prometheus"
)
_PROMETHEUS_CLIENT = _Package("prometheus-client", "prometheus_client", "prometheus")

SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
"""The ``OTEL_TRACES_SAMPLER`` values: those of the SDK's tracer provider, which reads no
sampler registered under the ``opentelemetry_traces_sampler`` entry points (only the
SDK's auto-configuration does)."""


def _protocol(signal: str) -> tuple[str | None, str]:
    """The OTLP protocol of ``signal`` and the variable it was read from (``None``: the
    default, no variable set)."""
    for variable in (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(variable, "").strip()
        if value:
            return variable, value
    return None, "http/protobuf"


def _missing(setting: str, package: _Package, error: ImportError, instead: str) -> OtelConfigError:
    """``setting`` (``VARIABLE='value'``) needs ``package``, which ``error`` says is not
    importable."""
    cause = ""
    module, missing = package.module + ".", f"{error.name}."
    if error.name is None or not (module.startswith(missing) or missing.startswith(module)):
        cause = f": {error}"  # the package is there, something it imports is not
    return OtelConfigError(
        f"{setting} needs a package that is not installed ({package.distribution}, module "
        f"{package.module}){cause}: install wow-otel[{package.extra}], or choose another {instead}"
    )


def _otlp_exporter(exporter_variable: str, signal: str, submodule: str, class_name: str) -> Any:
    """The OTLP exporter ``class_name`` of ``signal`` over the protocol its variables name."""
    protocol_variable, protocol = _protocol(signal)
    package = _OTLP_PACKAGES.get(protocol)
    if package is None:
        raise OtelConfigError(
            f"{protocol_variable or 'OTEL_EXPORTER_OTLP_PROTOCOL'}={protocol!r} is not accepted: "
            "http/protobuf, grpc"
        )
    try:
        module = importlib.import_module(f"{package.module}.{submodule}")
    except ImportError as error:
        if protocol_variable is None:  # the default protocol: the exporter is what was chosen
            raise _missing(f"{exporter_variable}='otlp'", package, error, "exporter") from None
        raise _missing(f"{protocol_variable}={protocol!r}", package, error, "protocol") from None
    return getattr(module, class_name)()


def _ratio(sampler: str) -> float:
    """``OTEL_TRACES_SAMPLER_ARG`` for the ratio sampler ``sampler``: a probability (default 1.0)."""
    text = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "")
    if not text.strip():
        return 1.0
    try:
        ratio = float(text)
    except ValueError:
        ratio = math.nan
    if not 0.0 <= ratio <= 1.0:  # NaN too
        raise OtelConfigError(
            f"OTEL_TRACES_SAMPLER_ARG={text!r} is not accepted: a number from 0 to 1 "
            f"(the sampling ratio of OTEL_TRACES_SAMPLER={sampler!r})"
        )
    return ratio


def _sampler() -> Any:
    """The sampler ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG`` name, built here
    (the SDK would log a warning and sample everything for a wrong one)."""
    from opentelemetry.sdk.trace import sampling

    text = os.environ.get("OTEL_TRACES_SAMPLER", "")
    name = text.strip().lower() or "parentbased_always_on"
    if name == "always_on":
        return sampling.ALWAYS_ON
    if name == "always_off":
        return sampling.ALWAYS_OFF
    if name == "parentbased_always_on":
        return sampling.DEFAULT_ON
    if name == "parentbased_always_off":
        return sampling.DEFAULT_OFF
    if name == "traceidratio":
        return sampling.TraceIdRatioBased(_ratio(text))
    if name == "parentbased_traceidratio":
        return sampling.ParentBasedTraceIdRatio(_ratio(text))
    raise OtelConfigError(f"OTEL_TRACES_SAMPLER={text!r} is not accepted: {', '.join(SAMPLERS)}")


def _export_interval() -> float:
    """``OTEL_METRIC_EXPORT_INTERVAL``: ms between two pushes (default 60000)."""
    text = os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "")
    if not text.strip():
        return 60000.0
    try:
        interval = float(text)
    except ValueError:
        interval = math.nan
    if not interval > 0:  # NaN too; the SDK's reader refuses 0
        raise OtelConfigError(
            f"OTEL_METRIC_EXPORT_INTERVAL={text!r} is not accepted: a number of milliseconds greater than 0"
        )
    return interval


def _port() -> int:
    """``OTEL_EXPORTER_PROMETHEUS_PORT`` (default 9464)."""
    text = os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464")
    try:
        port = int(text)
    except ValueError:
        raise OtelConfigError(f"OTEL_EXPORTER_PROMETHEUS_PORT={text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise OtelConfigError(f"OTEL_EXPORTER_PROMETHEUS_PORT={text!r} is not a port number: 0-65535")
    return port


def _span_exporter(name: str) -> Any:
    variable = "OTEL_TRACES_EXPORTER"
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        return _otlp_exporter(variable, "TRACES", "trace_exporter", "OTLPSpanExporter")
    raise OtelConfigError(f"{variable}={name!r} is not accepted: otlp, console, none")


def _metric_reader(name: str, endpoints: list[PrometheusEndpoint]) -> Any:
    variable = "OTEL_METRICS_EXPORTER"
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return PeriodicExportingMetricReader(
            ConsoleMetricExporter(), export_interval_millis=_export_interval()
        )
    if name == "otlp":
        exporter = _otlp_exporter(variable, "METRICS", "metric_exporter", "OTLPMetricExporter")
        return PeriodicExportingMetricReader(exporter, export_interval_millis=_export_interval())
    if name == "prometheus":
        setting = f"{variable}={name!r}"
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
        except ImportError as error:
            raise _missing(setting, _PROMETHEUS_EXPORTER, error, "exporter") from None
        try:
            from prometheus_client import start_http_server  # noqa: F401 - installed: the endpoint's
        except ImportError as error:
            raise _missing(setting, _PROMETHEUS_CLIENT, error, "exporter") from None
        host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost")
        endpoints.append(PrometheusEndpoint(host, _port()))
        return PrometheusMetricReader()
    raise OtelConfigError(f"{variable}={name!r} is not accepted: otlp, console, prometheus, none")


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    return Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES


def build_tracer_provider() -> TracerProvider:
    """An SDK tracer provider from the ``OTEL_*`` variables (module docstring)."""
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = [_span_exporter(name) for name in _names("OTEL_TRACES_EXPORTER", "otlp") if name != "none"]
    provider = SdkTracerProvider(sampler=_sampler(), resource=_resource())
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def build_meter_provider() -> MeterProvider:
    """An SDK meter provider from the ``OTEL_*`` variables (module docstring)."""
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

    endpoints: list[PrometheusEndpoint] = []
    names = [name for name in _names("OTEL_METRICS_EXPORTER", "otlp") if name != "none"]
    readers = [_metric_reader(name, endpoints) for name in names]
    provider = SdkMeterProvider(metric_readers=readers, resource=_resource())
    for endpoint in endpoints:
        _endpoints[provider] = endpoint
    return provider


def _sdk_installed(provider: object) -> bool:
    module = type(provider).__module__
    return module.startswith("opentelemetry.sdk")


def tracer_provider(settings: OtelSettings) -> TracerProvider:
    """The tracer provider to record to (module docstring)."""
    if _override is not None:
        return _override.tracer_provider
    current = trace.get_tracer_provider()
    if not settings.configure_sdk or _disabled() or _sdk_installed(current):
        return current
    with _lock:
        provider = _configured.get("traces")
        if provider is None:
            provider = _configured["traces"] = build_tracer_provider()
            trace.set_tracer_provider(provider)
    found: TracerProvider = provider
    return found


def meter_provider(settings: OtelSettings) -> MeterProvider:
    """The meter provider to record to (module docstring)."""
    if _override is not None:
        return _override.meter_provider
    current = metrics.get_meter_provider()
    if not settings.configure_sdk or _disabled() or _sdk_installed(current):
        return current
    with _lock:
        provider = _configured.get("metrics")
        if provider is None:
            provider = _configured["metrics"] = build_meter_provider()
            metrics.set_meter_provider(provider)
    found: MeterProvider = provider
    return found
