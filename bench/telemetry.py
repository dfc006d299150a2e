"""The cost of OpenTelemetry tracing on a run, against the same runs untraced.

    .venv/bin/python bench/telemetry.py                  # 5 rounds of 40 runs per mode
    .venv/bin/python bench/telemetry.py --rounds 3 --runs 20

Three one-off daemons (``Daemon(oneoff=True)``, what ``companyd ask`` runs) are built in this
process from the same company, differing only in ``telemetry:``: **off**; **on**, exporting
to a loopback OTLP/HTTP collector (:class:`companyd.testing.otlp.OtlpCollector`); and **on
with capture_content**. Each run is an operator task whose agent, through the real anthropic
SDK and the loopback Messages API stand-in, calls one tool (``read_graph`` on the company
memory) and then answers: one ``invoke_agent``, two ``chat`` and one ``execute_tool`` span.
The modes take turns, round after round (the machine is shared and noisy: each round's
ratio is against the untraced runs of the same round). Per run: wall time and the process's
CPU time (the batch processor's export thread and the collector's thread included — the
stand-in's too, equally in every mode).

Then the daemon's memory: a fresh process builds the example company's daemon without
telemetry and reports its peak RSS (``ru_maxrss``), and which top-level packages it loaded;
``--baseline-src DIR`` runs the same against another source tree (e.g. a worktree of main)
so "telemetry off costs nothing" is a number, not a promise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.llm import ClaudeBackend
from companyd.telemetry import NO_TRACING, GenAI, Tracer, otel_tracer
from companyd.testing.messages_api import MessagesAPIServer, RecordedRequest, Reply
from companyd.testing.messages_script import reply_text, reply_tool_use
from companyd.testing.otlp import OtlpCollector

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "on", "on+content")


def company(telemetry: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Bench Co", "timezone": "UTC", "budget": {"daily_usd": 10_000}},
        "defaults": {"model": {"primary": "claude-sonnet-5-5"}},
        "agents": {"writer": {"title": "Writer", "instructions": "You are the writer."}},
    }
    if telemetry:
        spec["telemetry"] = telemetry
    return spec


def responder(request: RecordedRequest) -> Reply:
    """A tool call first, the answer once the tool's result is in."""
    messages = request.body.get("messages", []) if isinstance(request.body, dict) else []
    last = messages[-1]["content"] if messages else ""
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        return reply_text("Today's post: the phone rings out before the first visit. " * 4)
    return reply_tool_use("read_graph", {})


async def measure(rounds: int, runs: int) -> dict[str, Any]:
    with OtlpCollector() as collector, MessagesAPIServer(responder=responder) as srv:
        telemetry = {
            "off": None,
            "on": {"otlp_endpoint": collector.endpoint},
            "on+content": {"otlp_endpoint": collector.endpoint, "capture_content": True},
        }
        async with contextlib.AsyncExitStack() as stack:
            daemons: dict[str, Daemon] = {}
            for mode in MODES:
                work = Path(tempfile.mkdtemp(prefix="cd-bench-otel-"))
                (work / "company.yaml").write_text(yaml.safe_dump(company(telemetry[mode])))
                backend = ClaudeBackend(api_key="test-key", base_url=srv.base_url, max_retries=0)
                d = Daemon(
                    load_config(work / "company.yaml"), work / "s", backend=backend, oneoff=True
                )
                daemons[mode] = await stack.enter_async_context(d)
            for mode in MODES:  # warm up: tool servers, caches, the first export
                assert (await daemons[mode].ask("writer", "Warm up.")).status == "ok"
            wall: dict[str, list[float]] = {m: [] for m in MODES}
            cpu: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(rounds):
                # the modes take turns run by run, so a burst of load elsewhere hits them alike
                per_wall: dict[str, float] = dict.fromkeys(MODES, 0.0)
                per_cpu: dict[str, float] = dict.fromkeys(MODES, 0.0)
                for i in range(runs):
                    for mode in MODES:
                        w0, c0 = time.perf_counter(), time.process_time()
                        out = await daemons[mode].ask("writer", f"Draft post {i}.")
                        per_wall[mode] += time.perf_counter() - w0
                        per_cpu[mode] += time.process_time() - c0
                        assert out.status == "ok", out
                for mode in MODES:
                    wall[mode].append(per_wall[mode] / runs * 1000)
                    cpu[mode].append(per_cpu[mode] / runs * 1000)
        spans = len(collector.spans)
    return {"wall_ms": wall, "cpu_ms": cpu, "spans_received": spans}


def emit_one_run(tracer: Tracer) -> None:
    """The spans and metrics of one traced run (as the runtime emits them), nothing else."""
    run = tracer.start("invoke_agent writer", attributes={GenAI.AGENT_NAME: "writer"})
    for stop in ("tool_use", "end_turn"):
        chat = tracer.start("chat claude-sonnet-5-5", parent=run, kind="client")
        for key in (GenAI.REQUEST_MODEL, GenAI.RESPONSE_MODEL):
            chat.set(key, "claude-sonnet-5-5")
        for key in (GenAI.INPUT_TOKENS, GenAI.OUTPUT_TOKENS, GenAI.CACHE_READ_TOKENS):
            chat.set(key, 1200)
        chat.set(GenAI.FINISH_REASONS, [stop])
        chat.end()
        tracer.record_model_call(
            request_model="claude-sonnet-5-5",
            response_model="claude-sonnet-5-5",
            input_tokens=1200,
            output_tokens=80,
            seconds=0.5,
            error_type=None,
        )
        if stop == "tool_use":
            tool = tracer.start("execute_tool read_graph", parent=run)
            tool.set(GenAI.TOOL_NAME, "read_graph")
            tool.carrier()
            tool.end()
    run.set(GenAI.COST, 0.0123)
    run.end()


def span_cost(n: int) -> tuple[float, float]:
    """CPU ms per run of emitting one run's spans: the no-op tracer, then the SDK's (to a
    collector on loopback, its export thread included).
    """
    with OtlpCollector() as collector:
        real = otel_tracer(collector.endpoint, capture_content=False, company="Bench")
        got = []
        for tracer in (NO_TRACING, real):
            c0 = time.process_time()
            for _ in range(n):
                emit_one_run(tracer)
            if tracer is real:
                real.shutdown()  # the export thread's work counts too
            got.append((time.process_time() - c0) / n * 1000)
    return got[0], got[1]


PROBE = """
import json, resource, sys, tempfile
from pathlib import Path
from companyd.config import load_config
from companyd.daemon import Daemon  # the face: trees from before the _x.py rename have it
from companyd.llm import OfflineModel
d = Daemon(load_config(sys.argv[1]), Path(tempfile.mkdtemp()) / "s", backend=OfflineModel(),
           offline=True)
print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "otel": any(m.split(".")[0] == "opentelemetry" for m in sys.modules)}))
"""


def rss(src: Path | None, samples: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    got = []
    for _ in range(samples):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(ROOT / "company.yaml")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "maxrss_mb": statistics.median(g["maxrss_kb"] for g in got) / 1000,
        "opentelemetry_loaded": any(g["otel"] for g in got),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--rss-samples", type=int, default=5)
    ap.add_argument("--span-runs", type=int, default=2000)
    ap.add_argument("--baseline-src", type=Path, help="another tree's src/ for the RSS baseline")
    args = ap.parse_args()
    result = asyncio.run(measure(args.rounds, args.runs))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{args.rounds} rounds × {args.runs} runs per mode; spans received: "
        f"{result['spans_received']}"
    )
    for what in ("wall_ms", "cpu_ms"):
        off = result[what]["off"]
        for mode in MODES:
            per = result[what][mode]
            ratios = [p / o for p, o in zip(per, off, strict=True)]
            print(
                f"  {what} per run, {mode:>10}: median {statistics.median(per):7.2f} "
                f"(rounds {', '.join(f'{p:.1f}' for p in per)}); ratio vs off "
                f"median {statistics.median(ratios):.3f}"
            )
    noop, sdk = span_cost(args.span_runs)
    run_cpu = statistics.median(result["cpu_ms"]["off"])
    print(
        f"emitting one run's spans and metrics ({args.span_runs} runs): no-op tracer "
        f"{noop * 1000:.1f} µs, OpenTelemetry {sdk * 1000:.0f} µs of CPU "
        f"= {sdk / run_cpu * 100:.1f} % of an untraced run's {run_cpu:.1f} ms"
    )
    here = rss(None, args.rss_samples)
    print(
        f"daemon without telemetry, this tree: peak RSS {here['maxrss_mb']:.1f} MB, "
        f"opentelemetry loaded: {here['opentelemetry_loaded']}"
    )
    if args.baseline_src:
        base = rss(args.baseline_src, args.rss_samples)
        print(
            f"daemon without telemetry, {args.baseline_src}: peak RSS {base['maxrss_mb']:.1f} "
            f"MB (ratio {here['maxrss_mb'] / base['maxrss_mb']:.3f}), opentelemetry loaded: "
            f"{base['opentelemetry_loaded']}"
        )


if __name__ == "__main__":
    main()
