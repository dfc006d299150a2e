"""The OpenTelemetry implementation of the tracing port: OTLP/HTTP protobuf spans and GenAI
metrics, through the OpenTelemetry SDK (imported here only: this module is loaded when
telemetry is on, never otherwise).

The SDK does what the standard variables ask: ``OTEL_EXPORTER_OTLP_HEADERS`` (and
``_TRACES_`` / ``_METRICS_`` forms), ``OTEL_EXPORTER_OTLP_TIMEOUT``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_METRIC_EXPORT_INTERVAL``,
``OTEL_BSP_*``. companyd adds only its defaults (service name ``companyd`` when none is
set) and the endpoint from company.yaml when one is written there.

A collector that cannot be reached never slows a run: spans wait in the batch processor's
bounded queue (``max_queue_size``) and are exported by its own thread; when the queue is
full the oldest waiting spans are dropped for the new ones. The failure is logged once per
outage (and its end once), not per batch or per span: the SDK's own lines are silenced.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from companyd._secrets import SECRETS
from companyd.telemetry._port import AttrValue, GenAI, Span, SpanKind

__all__ = ["MAX_CONTENT", "MAX_QUEUE", "OtelTracer", "otel_tracer"]

log = logging.getLogger(__name__)

#: Spans held while the collector is slow or away; past it they are dropped (bounded memory).
MAX_QUEUE = 2048
#: A content attribute's bound (characters), as OpenClaw bounds its content fields.
MAX_CONTENT = 128 * 1024
#: Seconds :meth:`OtelTracer.shutdown` waits for the last batches.
SHUTDOWN_SECONDS = 3.0

_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48]
_KINDS = {"internal": trace_api.SpanKind.INTERNAL, "client": trace_api.SpanKind.CLIENT}
_PROPAGATOR = TraceContextTextMapPropagator()
#: the SDK's batch processor logs here, once per span dropped from a full queue
_BATCH_LOGGER = "opentelemetry.sdk._shared_internal"


class _Outage(logging.Filter):
    """Says once that the collector cannot be reached, and once that it can again; and, as
    the filter of the SDK's batch processor's logger, turns its line per dropped span
    ("Queue full, dropping span.") into one line per outage.
    """

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        self._endpoint = endpoint
        self._down = False
        self._dropping = False
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Queue full"):
            return True
        with self._lock:
            if self._dropping:
                return False
            self._dropping = True
        record.msg = (
            "telemetry: %d spans wait for the OTLP collector at %s; the oldest are dropped "
            "for new ones until it takes them (runs are not affected)"
        )
        record.args = (MAX_QUEUE, self._endpoint)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True

    def result(self, ok: bool, signal: str) -> None:
        with self._lock:
            if not ok and not self._down:
                self._down = True
                log.warning(
                    "telemetry: the OTLP collector at %s cannot be reached (%s export failed); "
                    "spans and metrics are dropped until it answers (runs are not affected)",
                    self._endpoint,
                    signal,
                )
            elif ok and self._down:
                self._down = False
                self._dropping = False
                log.info("telemetry: the OTLP collector at %s answers again", self._endpoint)


class _SpanExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, outage: _Outage) -> None:
        self._inner = inner
        self._outage = outage

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:  # never let the exporter's thread die
            result = SpanExportResult.FAILURE
        self._outage.result(result is SpanExportResult.SUCCESS, "trace")
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _MetricExporter(MetricExporter):
    def __init__(self, inner: OTLPMetricExporter, outage: _Outage) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._outage = outage

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            result = MetricExportResult.FAILURE
        self._outage.result(result is MetricExportResult.SUCCESS, "metric")
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class _OtelSpan:
    __slots__ = ("_capture", "_span")

    def __init__(self, span: trace_api.Span, capture: bool) -> None:
        self._span = span
        self._capture = capture

    def set(self, key: str, value: AttrValue) -> None:
        if value is None:
            return
        if isinstance(value, str) or not isinstance(value, Sequence):
            self._span.set_attribute(key, value)
        else:
            self._span.set_attribute(key, list(value))

    def set_content(self, key: str, value: object) -> None:
        if not self._capture:
            return
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        text = SECRETS.redact(text)  # the redactor sees the whole text, then it is cut
        if len(text) > MAX_CONTENT:
            text = text[:MAX_CONTENT]
        self._span.set_attribute(key, text)

    def fail(self, error_type: str, message: str = "") -> None:
        self._span.set_attribute(GenAI.ERROR_TYPE, error_type)
        self._span.set_status(Status(StatusCode.ERROR, SECRETS.redact(message) or None))

    def end(self) -> None:
        self._span.end()

    def carrier(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace_api.set_span_in_context(self._span))
        return carrier


class OtelTracer:
    """The tracing port over the OpenTelemetry SDK (see module docstring).

    Args:
        endpoint: the OTLP/HTTP base URL from company.yaml (``/v1/traces`` and
            ``/v1/metrics`` are appended), or None to let the SDK read the
            ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variables.
        capture_content: export message contents (redacted, bounded).
        company: the company's name, a resource attribute (``companyd.company``).
    """

    def __init__(self, endpoint: str | None, *, capture_content: bool, company: str) -> None:
        shown = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "") or "(default)"
        for var in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
            protocol = os.environ.get(var, "").strip()
            if protocol and protocol != "http/protobuf":
                log.warning(
                    "telemetry: %s=%r is not supported; companyd exports OTLP over "
                    "http/protobuf (set %s=http/protobuf, or point the endpoint at the "
                    "collector's HTTP port, usually 4318)",
                    var,
                    protocol,
                    var,
                )
        # the exporters' own line per failed batch: _Outage says it once instead
        logging.getLogger("opentelemetry.exporter.otlp.proto.http").setLevel(logging.CRITICAL)
        resource = Resource.create({"companyd.company": company})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "companyd"}))
        self._outage = _Outage(shown)
        logging.getLogger(_BATCH_LOGGER).addFilter(self._outage)
        base = endpoint.rstrip("/") if endpoint else None
        spans = OTLPSpanExporter(endpoint=f"{base}/v1/traces" if base else None)
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(
            BatchSpanProcessor(_SpanExporter(spans, self._outage), max_queue_size=MAX_QUEUE)
        )
        self._tracer = self._provider.get_tracer("companyd")
        metrics = OTLPMetricExporter(endpoint=f"{base}/v1/metrics" if base else None)
        self._reader = PeriodicExportingMetricReader(_MetricExporter(metrics, self._outage))
        self._meters = MeterProvider(resource=resource, metric_readers=[self._reader])
        meter = self._meters.get_meter("companyd")
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._capture = capture_content
        self._tasks: dict[str, Span] = {}
        self._stopped = False

    @property
    def enabled(self) -> bool:
        return True

    def start(
        self,
        name: str,
        *,
        parent: Span | None = None,
        kind: SpanKind = "internal",
        attributes: Mapping[str, AttrValue] | None = None,
    ) -> Span:
        context = (
            trace_api.set_span_in_context(parent._span) if isinstance(parent, _OtelSpan) else None
        )
        span = _OtelSpan(
            self._tracer.start_span(name, context=context, kind=_KINDS[kind]), self._capture
        )
        for key, value in (attributes or {}).items():
            span.set(key, value)
        return span

    def bind_task(self, task_id: str, span: Span) -> None:
        self._tasks[task_id] = span

    def unbind_task(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)

    def task_parent(self, task_id: str) -> Span | None:
        return self._tasks.get(task_id)

    def record_model_call(
        self,
        *,
        request_model: str,
        response_model: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        seconds: float,
        error_type: str | None,
    ) -> None:
        attrs: dict[str, str] = {
            GenAI.OPERATION: "chat",
            GenAI.PROVIDER: GenAI.ANTHROPIC,
            GenAI.REQUEST_MODEL: request_model,
        }
        if response_model:
            attrs[GenAI.RESPONSE_MODEL] = response_model
        if error_type:
            attrs[GenAI.ERROR_TYPE] = error_type
        self._duration.record(seconds, attrs)
        if input_tokens is not None:
            self._tokens.record(input_tokens, {**attrs, "gen_ai.token.type": "input"})
        if output_tokens is not None:
            self._tokens.record(output_tokens, {**attrs, "gen_ai.token.type": "output"})

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        millis = int(SHUTDOWN_SECONDS * 1000)
        try:
            self._provider.force_flush(millis)
            self._provider.shutdown()
            self._meters.shutdown(timeout_millis=millis)
        except Exception as exc:  # a collector away at stop: the last spans are lost, said once
            log.warning("telemetry: the last spans and metrics were not exported: %s", exc)
        logging.getLogger(_BATCH_LOGGER).removeFilter(self._outage)


def otel_tracer(endpoint: str | None, *, capture_content: bool, company: str) -> OtelTracer:
    """The OpenTelemetry tracer (see :class:`OtelTracer`)."""
    return OtelTracer(endpoint, capture_content=capture_content, company=company)
