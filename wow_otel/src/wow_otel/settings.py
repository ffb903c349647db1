"""``OtelSettings``: the ``otel`` settings section, read from ``WOW_OTEL__*``.

What is exported and where is configured by the standard OpenTelemetry variables
(``OTEL_SERVICE_NAME``, ``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_TRACES_SAMPLER``...,
see :mod:`wow_otel.sdk`); this section only switches the parts of wow-otel on and off.
Metrics are selected like any metrics backend, with ``WOW_METRICS=otel``.
"""

from __future__ import annotations

from wow_core.settings import Count, SettingsSection

SECTION = "otel"
"""The section name: ``WOW_OTEL__TRACING`` etc."""


class OtelSettings(SettingsSection):
    """The switches of wow-otel (module docstring)."""

    tracing: bool = False
    """``WOW_OTEL__TRACING``: producer, process, wait, handler, store and event function
    spans, W3C trace context in every message header. Off by default: installing the
    plugin traces nothing until asked."""

    metrics: bool = True
    """``WOW_OTEL__METRICS``: with ``WOW_METRICS=otel``, the middleware's instruments
    (``messaging.*`` of the buses, ``wow.*`` of the gateway, handler and store). False
    keeps only the core's ``wow.*`` counters (processing outcomes, local-first...)."""

    event_send_spans: bool = False
    """``WOW_OTEL__EVENT_SEND_SPANS``: a producer span ``send <destination>`` for each
    event and state event stream the kernel publishes too. Off by default (a span costs
    15-60 µs in the SDK): the stream carries the command's ``process`` span as its
    ``traceparent``, and every function it reaches is a child of that span."""

    log_correlation: bool = True
    """``WOW_OTEL__LOG_CORRELATION``: with tracing on, every log record of the framework
    (loggers ``wow*``) carries ``trace_id`` and ``span_id`` (hex, empty outside a span)."""

    configure_sdk: bool = True
    """``WOW_OTEL__CONFIGURE_SDK``: build the SDK's tracer and meter providers from the
    ``OTEL_*`` variables when the application has not installed its own. False: use the
    global providers as they are (the application configures OpenTelemetry itself)."""

    max_series: Count = 2000
    """``WOW_OTEL__MAX_SERIES``: attribute sets kept per metric of the core's ``wow.*``
    counters and gauges; later ones count under ``otel.metric.overflow=true`` (the SDK
    bounds its histograms the same way, at 2000 per instrument)."""
