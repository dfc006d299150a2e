"""Traces and metrics of the company's work, as OpenTelemetry GenAI spans (docs/telemetry.md).

* :class:`Tracer`, :class:`Span` — the port the runtime emits through (the scheduler's
  routine fires, the agents' runs, model calls and tool calls); :data:`NO_TRACING` is the
  default, which does nothing and imports nothing;
* :func:`otel_tracer` — the OpenTelemetry implementation (OTLP/HTTP protobuf traces and
  metrics), built by the composition root when telemetry is on; the OpenTelemetry SDK is
  imported only then (``companyd.telemetry._otel``), so a daemon without telemetry never
  loads it (tests/daemon/test_startup_imports.py);
* :func:`telemetry_endpoint` — whether telemetry is on, and where it goes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from companyd.telemetry._port import (
    NO_SPAN,
    NO_TRACING,
    GenAI,
    Span,
    SpanKind,
    Tracer,
    telemetry_endpoint,
)

if TYPE_CHECKING:
    from companyd.telemetry._otel import OtelTracer, otel_tracer

__all__ = [
    "NO_SPAN",
    "NO_TRACING",
    "GenAI",
    "OtelTracer",
    "Span",
    "SpanKind",
    "Tracer",
    "otel_tracer",
    "telemetry_endpoint",
]

_HOMES: dict[str, str] = {
    "OtelTracer": "companyd.telemetry._otel",
    "otel_tracer": "companyd.telemetry._otel",
}


def __getattr__(name: str) -> Any:
    # the SDK implementation is imported on first use only: no cost while telemetry is off
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
