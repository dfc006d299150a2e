"""A loopback OTLP/HTTP collector for tests and benchmarks: receives the protobuf
``ExportTraceServiceRequest`` and ``ExportMetricsServiceRequest`` an OTLP/HTTP exporter
posts to ``/v1/traces`` and ``/v1/metrics``, parsed with the ``opentelemetry-proto`` package
the exporter itself depends on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["CollectedSpan", "OtlpCollector"]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


@dataclass(frozen=True)
class CollectedSpan:
    """One span as the collector received it (ids in hex)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpCollector:
    """An OTLP/HTTP protobuf receiver on 127.0.0.1 (a context manager).

    ``endpoint`` is the base URL an exporter is given (``OTEL_EXPORTER_OTLP_ENDPOINT``).
    """

    def __init__(self) -> None:
        self.spans: list[CollectedSpan] = []
        self.metrics: dict[str, list[Any]] = {}
        self.requests = 0
        #: each request's HTTP headers (lower-case names), in arrival order
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with collector._lock:
                    collector.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path == "/v1/traces":
                    collector._traces(body)
                    answer = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    collector._metrics(body)
                    answer = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL to give an exporter (``http://127.0.0.1:PORT``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        CollectedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status_code=s.status.code,
                            resource=resource,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(got)

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.requests += 1
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        self.metrics.setdefault(m.name, []).append(m)

    def wait_for(self, ready: Callable[[list[CollectedSpan]], bool], timeout: float = 20.0) -> None:
        """Wait until ``ready(spans)`` holds (raises TimeoutError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if ready(list(self.spans)):
                    return
            time.sleep(0.05)
        raise TimeoutError(f"the collector did not get the spans in {timeout:g} s: {self.spans}")

    def __enter__(self) -> OtlpCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
