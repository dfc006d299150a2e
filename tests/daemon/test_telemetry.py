"""OpenTelemetry GenAI traces (issue 30): the daemon with ``telemetry.otlp_endpoint`` set
exports, for one routine fire whose agent calls a tool and then answers (the loopback
Messages API through the real anthropic SDK), the fire's span, ``invoke_agent``, two
``chat`` spans and one ``execute_tool`` span in one trace to a loopback OTLP/HTTP collector
(the real OpenTelemetry SDK and OTLP exporter), with the GenAI attributes — and no message
content unless ``capture_content: true``.

The daemon is ``companyd run``'s composition root in this process
(:class:`~companyd.testing.inprocess.InProcessDaemon`): nothing here is about a process.
The tracer and meter providers are the daemon's own objects, never OpenTelemetry's
process-global ones (``telemetry/_otel.py`` calls no ``set_tracer_provider``), and a span's
parent is passed explicitly, not through a context variable, so several daemons in one
process cannot see each other's spans; the stop that flushes the last batches and the
metrics is the daemon's own graceful stop, the one SIGTERM starts. The tool server of
``test_an_mcp_tool_server_gets_the_trace_context_of_its_call`` is still a real process in
its sandbox, started by the daemon.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentkit import tool_server
from companyd.testing.daemon import short_dir
from companyd.testing.inprocess import InProcessDaemon
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use
from companyd.testing.otlp import CollectedSpan, OtlpCollector

pytestmark = pytest.mark.anyio


CONTENT = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


#: a value that looks like an Anthropic key: the redactor masks it by its pattern
LEAKED = "sk-ant-api03-" + "x" * 40


def company(
    endpoint: str,
    *,
    capture: bool = False,
    writer: dict[str, Any] | None = None,
    others: dict[str, Any] | None = None,
    routine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    telemetry: dict[str, Any] = {"otlp_endpoint": endpoint}
    if capture:
        telemetry["capture_content"] = True
    return {
        "schema": "companyd/v1",
        "company": {"name": "Trace Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "defaults": {"model": {"primary": "claude-sonnet-5-5"}},
        "agents": {
            "writer": {"title": "Writer", "instructions": "You are the writer.", **(writer or {})},
            **(others or {}),
        },
        "routines": {
            "daily-post": {
                "assignee": "writer",
                "description": "Draft today's post.",
                "trigger": {"cron": "0 14 * * *"},
                **(routine or {}),
            }
        },
        "telemetry": telemetry,
    }


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # the exporters read OTEL_* from the environment: only what a test sets counts
    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)
    with short_dir() as d:
        yield d


def complete(spans: list[CollectedSpan]) -> bool:
    names = [s.name for s in spans]
    return "fire daily-post" in names and names.count("chat claude-sonnet-5-5") >= 2


async def fire_once(
    work: Path,
    *,
    capture: bool,
    tool: str = "read_graph",
    writer: dict[str, Any] | None = None,
    requests: list[Any] | None = None,
    metrics: set[str] | None = None,
    script: list[Any] | None = None,
    others: dict[str, Any] | None = None,
    routine: dict[str, Any] | None = None,
) -> list[CollectedSpan]:
    script = script or [
        reply_tool_use(tool, {}, id="toolu_read_1"),
        reply_text(f"Today's post: the phone rings out. Key: {LEAKED}"),
    ]
    with OtlpCollector() as collector, MessagesAPIServer(script=script) as srv:
        cfg = work / "company.yaml"
        spec = company(
            collector.endpoint, capture=capture, writer=writer, others=others, routine=routine
        )
        cfg.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        env = {
            "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789abcdef",
            "ANTHROPIC_BASE_URL": srv.base_url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        async with InProcessDaemon(cfg, work / "s", offline=False, env=env) as d:
            await d.call("run_job", routine="daily-post")
            await asyncio.to_thread(collector.wait_for, complete)
            await d.stop()  # the graceful stop flushes the metrics
        if requests is not None:
            requests.extend(srv.requests)
        if metrics is not None:
            metrics.update(collector.metrics)
        return list(collector.spans)


def by_name(spans: list[CollectedSpan], name: str) -> list[CollectedSpan]:
    return [s for s in spans if s.name == name]


async def test_one_fire_with_a_tool_call_is_one_trace_of_genai_spans(work: Path) -> None:
    metrics: set[str] = set()
    spans = await fire_once(work, capture=False, metrics=metrics)
    # the GenAI client metrics too, flushed at the daemon's stop
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= metrics
    [fire] = by_name(spans, "fire daily-post")
    [agent] = by_name(spans, "invoke_agent writer")
    chats = by_name(spans, "chat claude-sonnet-5-5")
    [tool] = by_name(spans, "execute_tool read_graph")
    assert len(chats) == 2
    # one trace: fire → invoke_agent → (chat, execute_tool, chat)
    assert {s.trace_id for s in (fire, agent, tool, *chats)} == {fire.trace_id}
    assert fire.parent_span_id == ""
    assert agent.parent_span_id == fire.span_id
    assert {c.parent_span_id for c in chats} == {agent.span_id}
    assert tool.parent_span_id == agent.span_id

    assert fire.attributes["companyd.routine"] == "daily-post"
    assert fire.attributes["companyd.fire.outcome"] == "ok"
    a = agent.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.agent.name"] == "writer"
    assert a["gen_ai.agent.id"] == "writer"
    assert a["gen_ai.conversation.id"].startswith("run-")
    assert a["companyd.routine"] == "daily-post"
    assert a["companyd.run.status"] == "ok"
    # nothing to check (no done_when, and the answer claims no tool): said as such
    assert a["companyd.run.verification"] == "none"
    assert fire.attributes["companyd.run.verification"] == "none"
    assert a["companyd.cost.usd"] > 0
    first, second = sorted(chats, key=lambda c: c.attributes["gen_ai.response.finish_reasons"][0])
    for c in chats:
        ca = c.attributes
        assert c.kind == 3  # SPAN_KIND_CLIENT
        assert ca["gen_ai.operation.name"] == "chat"
        assert ca["gen_ai.provider.name"] == "anthropic"
        assert ca["gen_ai.request.model"] == "claude-sonnet-5-5"
        assert ca["gen_ai.response.model"]
        assert ca["gen_ai.usage.input_tokens"] > 0
        assert ca["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.usage.cache_read.input_tokens" in ca
        assert "gen_ai.usage.cache_creation.input_tokens" in ca
        assert "error.type" not in ca
    assert first.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert second.attributes["gen_ai.response.finish_reasons"] == ["tool_use"]
    assert tool.attributes["gen_ai.tool.name"] == "read_graph"
    assert tool.attributes["gen_ai.tool.call.id"] == "toolu_read_1"
    assert fire.resource["service.name"] == "companyd"
    # no message content unless capture_content is on
    for s in spans:
        assert not CONTENT & s.attributes.keys(), s


@pytest.mark.parametrize(
    ("tool", "verification", "status"),
    [("read_graph", "verified", "ok"), ("create_entities", "unverified", "unverified")],
)
async def test_the_verification_outcome_is_its_own_attribute(
    work: Path, tool: str, verification: str, status: str
) -> None:
    # done_when names read_graph: the run calls it (verified), or create_entities, a tool
    # the run never calls (unverified; on_unmet: report, so no second chance)
    spans = await fire_once(
        work, capture=False, routine={"done_when": [{"tool": tool}], "on_unmet": "report"}
    )
    [fire] = by_name(spans, "fire daily-post")
    [agent] = by_name(spans, "invoke_agent writer")
    assert agent.attributes["companyd.run.verification"] == verification
    assert agent.attributes["companyd.run.status"] == status
    assert fire.attributes["companyd.run.verification"] == verification
    assert fire.attributes["companyd.fire.outcome"] == status


async def test_capture_content_exports_redacted_messages(work: Path) -> None:
    spans = await fire_once(work, capture=True)
    chats = by_name(spans, "chat claude-sonnet-5-5")
    answered = next(
        c for c in chats if c.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    )
    assert "the phone rings out" in answered.attributes["gen_ai.output.messages"]
    assert all(LEAKED not in str(s.attributes) for s in spans)
    assert "Draft today's post." in answered.attributes["gen_ai.input.messages"]
    assert "You are the writer." in answered.attributes["gen_ai.system_instructions"]
    [tool] = by_name(spans, "execute_tool read_graph")
    assert "gen_ai.tool.call.result" in tool.attributes


async def test_an_mcp_tool_server_gets_the_trace_context_of_its_call(work: Path) -> None:
    server = tool_server(TOOL_TRACE="1")  # in its sandbox, as every tool server runs
    requests: list[Any] = []
    spans = await fire_once(
        work,
        capture=False,
        tool="trace_context",
        writer={"mcp_servers": {"tools": server}},
        requests=requests,
    )
    [tool] = by_name(spans, "execute_tool trace_context")
    # the tool's answer (its params._meta) went back to the model in the second request
    second = requests[1].body["messages"][-1]["content"][0]
    meta = json.loads(
        second["content"] if isinstance(second["content"], str) else second["content"][0]["text"]
    )
    version, trace_id, parent_id, flags = meta["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    assert trace_id == tool.trace_id
    assert parent_id == tool.span_id


async def test_a_consultation_joins_the_asking_runs_trace(work: Path) -> None:
    editor = {"title": "Editor", "instructions": "You are the editor.", "reports_to": "writer"}
    spans = await fire_once(
        work,
        capture=False,
        tool="consult",
        writer={"consult": ["editor"]},
        others={"editor": editor},
        script=[
            reply_tool_use("consult", {"agent": "editor", "question": "Angle?"}, id="toolu_c"),
            reply_text("Lead with the phone."),
            reply_text("Today's post: the phone rings out."),
        ],
    )
    [fire] = by_name(spans, "fire daily-post")
    [writer] = by_name(spans, "invoke_agent writer")
    [editor_run] = by_name(spans, "invoke_agent editor")
    assert editor_run.trace_id == writer.trace_id == fire.trace_id
    assert editor_run.parent_span_id == writer.span_id
