"""The OpenTelemetry tracer on its own (issue 30): a collector that cannot be reached drops
spans from a bounded queue and is reported once, not per span or per batch; metrics reach
a collector that answers; the tracer turns on from company.yaml or the environment only.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd.config import load_config_text
from companyd.daemon._main import telemetry_tracer
from companyd.daemon._reload import restart_only_changes
from companyd.errors import ConfigError
from companyd.telemetry import NO_TRACING, telemetry_endpoint
from companyd.telemetry._otel import MAX_QUEUE, OtelTracer
from companyd.testing.otlp import OtlpCollector


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound then closed: connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    yield port


def test_an_unreachable_collector_drops_spans_and_says_so_once(
    refused_port: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each export gives up in 1 s: the exporter's retry backoff inside that second is what
    # lets the queue fill while the spans are made (0.5 s was tried: in a whole run, on a
    # busy machine, the exporter kept up and nothing was dropped — the claim went untested)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    caplog.set_level(logging.INFO)
    tracer = OtelTracer(f"http://127.0.0.1:{refused_port}", capture_content=False, company="X")
    try:
        processor = tracer._provider._active_span_processor._span_processors[0]
        queue = processor._batch_processor._queue  # type: ignore[attr-defined]
        for wave in range(3):
            for i in range(MAX_QUEUE * 2):
                span = tracer.start(f"chat model-{wave}-{i}")
                span.set("gen_ai.usage.input_tokens", i)
                span.end()
            # bounded: never more than MAX_QUEUE spans held, however many are produced
            assert len(queue) <= MAX_QUEUE
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
            "cannot be reached" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
    finally:
        tracer.shutdown()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    unreachable = [m for m in said if "cannot be reached" in m]
    dropping = [m for m in said if "the oldest are dropped" in m]
    assert len(unreachable) == 1, said
    assert f"127.0.0.1:{refused_port}" in unreachable[0]
    assert len(dropping) == 1, said
    # nothing else per span or per batch from the SDK
    assert not [m for m in said if "Queue full" in m or "Failed to export" in m], said


def test_metrics_reach_the_collector_beside_the_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpCollector() as collector:
        tracer = OtelTracer(collector.endpoint, capture_content=False, company="X")
        span = tracer.start("chat claude-sonnet-5-5", kind="client")
        span.end()
        tracer.record_model_call(
            request_model="claude-sonnet-5-5",
            response_model="claude-sonnet-5-5",
            input_tokens=120,
            output_tokens=30,
            seconds=0.4,
            error_type=None,
        )
        tracer.shutdown()  # flushes both signals
        assert [s.name for s in collector.spans] == ["chat claude-sonnet-5-5"]
        usage = collector.metrics["gen_ai.client.token.usage"][0]
        points = usage.histogram.data_points
        by_type = {
            next(a.value.string_value for a in p.attributes if a.key == "gen_ai.token.type"): p.sum
            for p in points
        }
        assert by_type == {"input": 120, "output": 30}
        duration = collector.metrics["gen_ai.client.operation.duration"][0]
        assert duration.unit == "s"
        assert duration.histogram.data_points[0].sum == pytest.approx(0.4)


def test_telemetry_is_on_from_the_file_or_the_environment_only() -> None:
    assert telemetry_endpoint(None, {}) is None
    assert telemetry_endpoint("http://c:4318", {}) == "http://c:4318"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert telemetry_endpoint(None, env) == "http://collector:4318"
    assert telemetry_endpoint("http://c:4318", {**env, "OTEL_SDK_DISABLED": "true"}) is None


BASE = """
schema: companyd/v1
company: {name: T, budget: {daily_usd: 5}}
agents: {writer: {title: Writer, instructions: Write.}}
"""


def test_a_bad_telemetry_section_is_a_clear_error() -> None:
    with pytest.raises(ConfigError) as bad_url:
        load_config_text(BASE + "telemetry: {otlp_endpoint: 'collector:4318'}\n")
    text = str(bad_url.value)
    assert "telemetry.otlp_endpoint" in text and "http:// or https:// URL" in text
    assert "'collector:4318'" in text
    with pytest.raises(ConfigError) as unknown:
        load_config_text(BASE + "telemetry: {capture: true}\n")
    assert "capture" in str(unknown.value)
    ok = load_config_text(BASE + "telemetry: {otlp_endpoint: 'http://127.0.0.1:4318'}\n")
    assert ok.spec.telemetry.otlp_endpoint == "http://127.0.0.1:4318"
    assert ok.spec.telemetry.capture_content is False


def test_a_reload_says_telemetry_needs_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    old = load_config_text(BASE)
    on = BASE + "telemetry: {otlp_endpoint: 'http://127.0.0.1:4318'}\n"
    new = load_config_text(on)
    assert restart_only_changes(old, new, tmp_path) == ["telemetry"]
    assert restart_only_changes(old, old, tmp_path) == []

    # the company's name is read at start where it lives on: the tracer's resource
    # attribute (telemetry on) and the PostgreSQL schema named after it (no state.schema)
    def renamed(text: str) -> str:
        return text.replace("name: T,", "name: T Two,")

    assert restart_only_changes(new, load_config_text(renamed(on)), tmp_path) == ["company.name"]
    assert restart_only_changes(old, load_config_text(renamed(BASE)), tmp_path) == []
    pg = BASE + "state: {backend: postgres}\n"
    assert restart_only_changes(load_config_text(pg), load_config_text(renamed(pg)), tmp_path) == [
        "company.name"
    ]
    named = BASE + "state: {backend: postgres, schema: t}\n"
    assert (
        restart_only_changes(load_config_text(named), load_config_text(renamed(named)), tmp_path)
        == []
    )
    # telemetry on from the environment alone: the tracer carries the name too
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert restart_only_changes(old, load_config_text(renamed(BASE)), tmp_path) == ["company.name"]


def test_the_standard_variables_name_the_service_and_add_resource_attributes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "acme-agents")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=blue")
    with OtlpCollector() as collector:
        tracer = OtelTracer(collector.endpoint, capture_content=False, company="Acme")
        tracer.start("invoke_agent writer").end()
        tracer.shutdown()
        [span] = collector.spans
    assert span.resource["service.name"] == "acme-agents"
    assert span.resource["deployment.environment"] == "prod"
    assert span.resource["companyd.company"] == "Acme"
    assert collector.headers[-1].get("x-team") == "blue"


def test_the_environment_alone_turns_telemetry_on(monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config_text(BASE)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert telemetry_tracer(config) is NO_TRACING
    with OtlpCollector() as collector:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        tracer = telemetry_tracer(config)
        assert tracer.enabled
        tracer.start("fire daily-post").end()
        tracer.shutdown()
        assert [s.name for s in collector.spans] == ["fire daily-post"]
