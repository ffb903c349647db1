"""Trace ids in the framework's log records (``WOW_OTEL__LOG_CORRELATION``).

With tracing on, every record of a ``wow*`` logger gets ``trace_id`` and ``span_id``
(32 and 16 hex digits of the current span, empty strings outside one), so a format like
``%(asctime)s %(trace_id)s %(name)s %(message)s`` ties a log line to its trace. Records
of other loggers are left as they are. Installed once per process, over whatever record
factory is installed then.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry import trace

_lock = threading.Lock()
_installed = False


def install_log_correlation() -> None:
    """Wrap the log record factory (once per process; see the module docstring)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if record.name.startswith("wow"):
                context = trace.get_current_span().get_span_context()
                if context.is_valid:
                    record.trace_id = format(context.trace_id, "032x")
                    record.span_id = format(context.span_id, "016x")
                else:
                    record.trace_id = record.span_id = ""
            return record

        logging.setLogRecordFactory(factory)
