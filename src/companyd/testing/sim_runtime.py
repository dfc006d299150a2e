"""Compressed time through the real agent runtime: routines → agents → Claude → stand-in.

:func:`simulate_company` runs a company's routines for simulated days the way the daemon
runs them — the scheduler hands each fire to :class:`~companyd.agents._staff.Staff`; the agents
run the tool-use loop with the real memory and spend services, the run journal, breakers
and model fallback; every model call goes through :class:`~companyd.llm._claude.ClaudeBackend`
and the real ``anthropic`` SDK over loopback HTTP to the Messages API stand-in
(:class:`~companyd.testing.messages_api.MessagesAPIServer`, which may inject transient 529 and
500 errors) — and audits the result: the scheduler's history against the schedule
(:class:`~companyd.scheduler._sim.SimReport`), and the model calls the stand-in served against
the steps the run journal completed.

How time is compressed: one :class:`~companyd.clock.ManualClock` drives everything (the
scheduler, the agents' heartbeats and breakers, spend periods, ClaudeBackend's retry
backoff). It jumps from one scheduler wakeup to the next; while a run is in flight it stands
still — HTTP, SQLite and memory work take real time but no simulated time — except that when
every model call in flight is sleeping out a retry backoff, the clock moves to the end of
that sleep (:class:`~companyd.scheduler._sim.ModelCallGate`). Other sleepers of the daemon
(the loop-lag monitor, status updates, the spend book's minute tick) are not stepped through:
they wake late, when the clock passes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from companyd.clock import ManualClock
from companyd.config import CompanyConfig
from companyd.daemon import Daemon
from companyd.events import Event
from companyd.llm import ClaudeBackend, ContentBlock, tool_uses_of
from companyd.runs import Journal
from companyd.scheduler import ModelCallGate, SimReport, simulate
from companyd.storage import Backend
from companyd.testing.messages_api import (
    AgentLikeResponder,
    MessagesAPIServer,
    RecordedRequest,
    Reply,
    ScriptItem,
)

__all__ = ["RoutineResponder", "RuntimeSimReport", "simulate_company"]

_TASK = re.compile(r"^Task (\S+) from ")
_WHO = re.compile(r"You are .*? \(([a-z][a-z0-9_-]*)\) at ")
_REVIEW = "Reply with APPROVE or REJECT"


class RoutineResponder:
    """A deterministic model for routine work, for the Messages API stand-in.

    It answers like :class:`~companyd.testing.messages_api.AgentLikeResponder` (token usage
    derived from the request, prompt caching of the stable prefix), with two differences so
    that routine runs behave like real ones:

    * a task's first turn records the task in the company memory (``create_entities``: one
      entity per task, with an observation naming the agent), so memory changes as work is
      done and a ``memory_changed`` heartbeat has something to look at; then the turn ends;
    * a review request (a reviewer checking a result against ``expected_output``) is
      answered ``APPROVE`` at once — the stand-in judges nothing; it answers as a model would
      when the work is right.
    """

    def __init__(self) -> None:
        self._inner = AgentLikeResponder(prefer="create_entities", text="Done.")

    def __call__(self, request: RecordedRequest) -> ScriptItem:
        """The reply to ``request`` by the rules in the class docstring: a task's first turn
        records it in memory, a review is approved, anything else as :class:`AgentLikeResponder`
        answers.
        """
        item = self._inner(request)
        body = request.body if isinstance(request.body, dict) else {}
        messages = body.get("messages") or []
        first = messages[0].get("content") if messages and isinstance(messages[0], dict) else ""
        first_text = first if isinstance(first, str) else ""
        if not isinstance(item, Reply):
            return item
        if _REVIEW in first_text:
            return _with_content(
                item, [{"type": "text", "text": "APPROVE — it does what the task asked."}]
            )
        uses = tool_uses_of(item.content)
        if len(uses) == 1 and uses[0].get("name") == "create_entities":
            m = _TASK.match(first_text)
            task = m.group(1) if m else "unknown"
            agent = _agent(body.get("system"))
            entity = {
                "name": f"task {task}",
                "entityType": "task",
                "observations": [f"{agent} worked on it: {first_text.splitlines()[-1][:120]}"],
            }
            return _with_content(
                item, [{**uses[0], "input": {"entities": [entity]}}], stop_reason="tool_use"
            )
        return item


def _agent(system: Any) -> str:
    text = (
        system
        if isinstance(system, str)
        else " ".join(str(b.get("text", "")) for b in system or [] if isinstance(b, dict))
    )
    m = _WHO.search(text)
    return m.group(1) if m else "an agent"


def _with_content(item: Reply, content: list[ContentBlock], stop_reason: str = "end_turn") -> Reply:
    # Output tokens follow the content, as AgentLikeResponder counts them (4 bytes a token).
    size = len(json.dumps(content, separators=(",", ":"), sort_keys=True).encode())
    usage = dataclasses.replace(item.usage, output_tokens=max(1, math.ceil(size / 4)))
    return dataclasses.replace(item, content=tuple(content), stop_reason=stop_reason, usage=usage)


@dataclass
class RuntimeSimReport:
    """What :func:`simulate_company` found.

    Attributes:
        sim: the scheduler's audit (due fire times, outcomes, reasons, completeness).
        served: model calls the stand-in answered successfully.
        requests: model calls it received (including injected faults).
        injected_faults: of them, failed on purpose (529 / 500).
        journal_llm_steps: completed model calls in the run journal (``runs.sqlite``).
        journal_run_steps: the sum of the journal's per-run step counts.
        runs: agent runs by final status (routine runs, reviews, resumed runs).
        models: completed model calls by the model that served them.
        fallbacks: ``model_fallback`` events (a model gave up after its retries).
        backoff_seconds: simulated seconds ClaudeBackend slept between attempts.
        stalls: see :class:`~companyd.scheduler._sim.ModelCallGate`.
        ledger_calls: model calls the spend ledger settled.
        spent_usd: what the spend ledger recorded.
        events: every event by kind.
    """

    sim: SimReport
    served: int
    requests: int
    injected_faults: int
    journal_llm_steps: int
    journal_run_steps: int
    runs: dict[str, int]
    models: dict[str, int]
    fallbacks: int
    backoff_seconds: float
    stalls: int
    ledger_calls: int
    spent_usd: float
    events: Counter[str] = field(default_factory=Counter)

    @property
    def calls_match(self) -> bool:
        """Every model call served is one completed step in the run journal and one call
        settled in the spend ledger, and vice versa: none paid twice, none unaccounted.
        """
        return self.served == self.journal_llm_steps == self.journal_run_steps == self.ledger_calls

    def to_dict(self) -> dict[str, Any]:
        """The scheduler's audit (:meth:`SimReport.to_dict`) plus the model-call, spend and event
        figures, JSON-ready.
        """
        return {
            **self.sim.to_dict(),
            "model_calls": {
                "requests": self.requests,
                "served": self.served,
                "injected_faults": self.injected_faults,
                "journal_llm_steps": self.journal_llm_steps,
                "journal_run_steps": self.journal_run_steps,
                "ledger_calls": self.ledger_calls,
                "calls_match": self.calls_match,
                "by_model": self.models,
                "fallbacks": self.fallbacks,
                "backoff_seconds": round(self.backoff_seconds, 1),
            },
            "agent_runs": self.runs,
            "stalls": self.stalls,
            "spent_usd": round(self.spent_usd, 6),
            "events": dict(self.events),
        }


async def simulate_company(
    config: CompanyConfig,
    days: float,
    server: MessagesAPIServer,
    clock: ManualClock,
    *,
    state_dir: Path,
    downtime: tuple[tuple[float, float], ...] = (),
) -> RuntimeSimReport:
    """Run ``config``'s routines for ``days`` through the real agent runtime and audit it.

    The daemon is started in-process without its scheduler, alerts or control socket
    (``Daemon(..., oneoff=True)``: memory, spend and the agents' supervision tree); the
    compressed-time harness runs the scheduler against its :class:`Staff`.

    Args:
        config: the company (its ``anthropic`` block sets ClaudeBackend's timeout and
            ``max_retries``, as in the daemon).
        days: simulated duration from the clock's current time.
        server: a started Messages API stand-in (the responder and fault rate are its own).
        clock: the simulated time, shared by every part.
        state_dir: a fresh state directory.
        downtime: scheduler restarts, as :func:`~companyd.scheduler._sim.simulate` takes them.
    """
    gate = ModelCallGate(clock)
    claude = ClaudeBackend.from_config(
        config.spec.anthropic,
        environ={
            config.spec.anthropic.api_key_env: "sim-key",
            "ANTHROPIC_BASE_URL": server.base_url,
        },
        clock=gate,
    )
    daemon = Daemon(config, state_dir, backend=gate.backend(claude), clock=clock, oneoff=True)
    events: Counter[str] = Counter()
    served_before = server.served
    requests_before = len(server.requests)
    faults_before = server.injected_faults

    def count(e: Event) -> None:
        events[e.kind] += 1

    async with daemon:
        remove = daemon.bus.add_listener(count)
        try:
            report = await simulate(
                config,
                days,
                daemon.staff,
                clock,
                state_dir=state_dir,
                bus=daemon.bus,
                downtime=downtime,
                gate=gate,
            )
            # Every day of the run (in the company's time zone): the ledger's own totals.
            tz = ZoneInfo(config.timezone)
            first = datetime.fromtimestamp(report.start, tz).date()
            last = datetime.fromtimestamp(clock.time(), tz).date()
            ledger = await daemon.spend_book.spend_report("agent", f"{first}..{last}")
        finally:
            remove()
    # The memory owner's request reaper outlives a stop by up to ten idle ticks of the clock;
    # on a clock that no longer moves it would be left pending (and destroyed so, loudly).
    for _ in range(12):
        clock.advance(1.0)
        await asyncio.sleep(0)
    journal = _journal_totals(state_dir / "runs.sqlite", daemon.storage)
    return RuntimeSimReport(
        sim=report,
        served=server.served - served_before,
        requests=len(server.requests) - requests_before,
        injected_faults=server.injected_faults - faults_before,
        journal_llm_steps=journal["llm_steps"],
        journal_run_steps=journal["run_steps"],
        runs=journal["runs"],
        models=journal["models"],
        fallbacks=events["model_fallback"],
        backoff_seconds=gate.slept,
        stalls=gate.stalls,
        ledger_calls=int(ledger["total"]["calls"]),
        spent_usd=float(ledger["total"]["cost_usd"]),
        events=events,
    )


def _journal_totals(path: Path, backend: Backend) -> dict[str, Any]:
    # Read after the daemon stopped: its journal connection is closed, nothing writes. Read
    # through the journal's read-only API: the file, or the company's PostgreSQL schema.
    def totals(conn: Any) -> dict[str, Any]:
        llm = conn.execute("SELECT COUNT(*) FROM steps WHERE kind = 'llm'").fetchone()[0]
        run_steps = conn.execute("SELECT COALESCE(SUM(steps), 0) FROM runs").fetchone()[0]
        runs = dict(conn.execute("SELECT state, COUNT(*) FROM runs GROUP BY state").fetchall())
        models: Counter[str] = Counter()
        for (payload,) in conn.execute("SELECT payload FROM steps WHERE kind = 'llm'"):
            models[json.loads(payload).get("model", "?")] += 1
        return {"llm_steps": llm, "run_steps": run_steps, "runs": runs, "models": dict(models)}

    journal = Journal(path, backend=backend, readonly=True)
    try:
        return journal.run_sync(totals)
    finally:
        journal.close_sync()
