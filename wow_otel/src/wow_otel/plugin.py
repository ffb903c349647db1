"""The wow_otel plugin module (entry point group ``wow``).

It registers

* the settings section ``otel`` (``WOW_OTEL__*``, :class:`~wow_otel.settings.OtelSettings`);
* the metrics backend ``otel`` (``WOW_METRICS=otel``, :class:`~wow_otel.metrics.OtelMetrics`);
* the middleware ``otel`` (:class:`~wow_otel.middleware.OtelMiddleware`): active when the
  metrics backend is ``otel`` (and ``WOW_OTEL__METRICS`` is not false) or
  ``WOW_OTEL__TRACING=true``, otherwise not installed at all;
* the context capture ``trace_context``
  (:class:`~wow_otel.context.LocalFirstContextCapture`);
* the runtime installer ``otel``: with ``OTEL_METRICS_EXPORTER=prometheus``, the scrape
  endpoint (:class:`~wow_otel.sdk.PrometheusEndpoint`) as a service of every runtime, so
  it listens while a runtime runs.

Providers and exporters come from the ``OTEL_*`` variables (:mod:`wow_otel.sdk`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from wow_core.plugins.hookspecs import MetricsFactory, MiddlewareFactory, hookimpl
from wow_otel import __version__
from wow_otel.settings import SECTION, OtelSettings

if TYPE_CHECKING:
    from wow_core.context import ContextCapture
    from wow_core.metrics import Metrics
    from wow_core.middleware import Middleware
    from wow_core.transport.settings import ProcessSettings


def _section(settings: ProcessSettings) -> OtelSettings:
    return settings.section(SECTION, OtelSettings)


def _otel_metrics(settings: ProcessSettings) -> Metrics:
    from wow_otel import semconv
    from wow_otel.metrics import OtelMetrics
    from wow_otel.sdk import meter_provider

    section = _section(settings)
    meter = meter_provider(section).get_meter(
        semconv.INSTRUMENTATION_NAME, __version__, schema_url=semconv.SCHEMA_URL
    )
    return OtelMetrics(
        meter,
        max_gauge_series=section.max_series,
        max_counter_series=section.max_series,
        records_messaging=section.metrics,
    )


def _otel_middleware(settings: ProcessSettings, metrics: Metrics) -> Middleware | None:
    from wow_otel import semconv
    from wow_otel.metrics import OtelMetrics

    section = _section(settings)
    meter = metrics.meter if isinstance(metrics, OtelMetrics) and section.metrics else None
    tracer = None
    if section.tracing:
        from wow_otel.context import activate
        from wow_otel.sdk import tracer_provider

        tracer = tracer_provider(section).get_tracer(
            semconv.INSTRUMENTATION_NAME, __version__, schema_url=semconv.SCHEMA_URL
        )
        activate()
        if section.log_correlation:
            from wow_otel.logs import install_log_correlation

            install_log_correlation()
    if meter is None and tracer is None:
        return None
    from wow_otel.middleware import OtelMiddleware

    system = getattr(settings, "transport", None)
    if not isinstance(system, str):
        system = "in_memory"
    outcomes = metrics if isinstance(metrics, OtelMetrics) and metrics.records_command_outcomes else None
    return OtelMiddleware(
        tracer=tracer,
        meter=meter,
        system=system,
        event_send_spans=section.event_send_spans,
        command_outcomes=outcomes,
    )


@hookimpl
def register_settings(register: Callable[[str, type[BaseModel]], None]) -> None:
    register(SECTION, OtelSettings)


@hookimpl
def register_metrics(register: Callable[[str, MetricsFactory], None]) -> None:
    register("otel", _otel_metrics)


@hookimpl
def register_middleware(register: Callable[[str, MiddlewareFactory], None]) -> None:
    register("otel", _otel_middleware)


def _install(runtime: Any) -> None:
    from wow_otel import sdk

    endpoint = sdk.process_prometheus_endpoint()
    if endpoint is not None:
        runtime.add_service(endpoint, endpoint.name)
        runtime.add_closeable(endpoint, endpoint.name)


@hookimpl
def register_runtime_installers(register: Callable[[str, Callable[[Any], object]], None]) -> None:
    register("otel", _install)


@hookimpl
def register_context_captures(register: Callable[[str, ContextCapture], None]) -> None:
    from wow_otel.context import LocalFirstContextCapture

    register("trace_context", LocalFirstContextCapture())
