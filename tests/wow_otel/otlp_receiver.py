"""An OTLP/HTTP trace receiver run by a test: what the members' SDK exporters send.

``POST /v1/traces`` with an ``ExportTraceServiceRequest`` (protobuf, as the
``http/protobuf`` exporter sends it, gzip or not); every span is kept as a
:class:`~tests.wow_otel.spans.Node` with the ``service.name`` of its resource.
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.wow_otel.spans import Node

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    """The receiver on ``127.0.0.1:<port>``; ``endpoint`` is its base URL."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.services: dict[str, str] = {}  # span id -> service.name
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    receiver._take(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        node = Node(
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex() or None,
                            span.name,
                            _KINDS.get(span.kind, str(span.kind)),
                            {a.key: _value(a.value) for a in span.attributes},
                            [event.name for event in span.events],
                        )
                        self.nodes.append(node)
                        self.services[node.span_id] = str(resource.get("service.name", ""))

    def received(self) -> list[Node]:
        with self._lock:
            return list(self.nodes)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
