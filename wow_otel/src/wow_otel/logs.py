"""Trace ids in the framework's log records (``WOW_OTEL__LOG_CORRELATION``).

With tracing on, every log record gets ``trace_id`` and ``span_id`` (32 and 16 hex
digits of the current span, empty strings outside one), the framework's and every other
logger's (a client library's line inside a command's span belongs to its trace too), so
a format like ``%(asctime)s %(trace_id)s %(name)s %(message)s`` ties a log line to its
trace and formats every record. Installed once per process, over whatever record
factory is installed then.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from wow_otel.current import current_span_context, ids_flags_of, is_valid_of

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
            context = current_span_context()
            if is_valid_of(context):
                trace_id, span_id, _ = ids_flags_of(context)
                record.trace_id = format(trace_id, "032x")
                record.span_id = format(span_id, "016x")
            else:
                record.trace_id = record.span_id = ""
            return record

        logging.setLogRecordFactory(factory)
