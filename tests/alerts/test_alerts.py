"""AlertService against the Bot API stand-in, with the real python-telegram-bot.

Time that the service measures (coalescing windows, edit throttling, quiet hours, backoff)
runs on a ManualClock; HTTP is real, on loopback. The Admin side is a small recording
implementation of our own protocol (companyd.admin.Admin), not an SDK mock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.admin import AdminError, ResultDelivery
from companyd.admin._results import AskAnswer, Resumed
from companyd.alerts._commands import RAISE_AGAIN_AFTER
from companyd.alerts._deliver import DeliveryLog
from companyd.alerts._desk_messages import DeskDecisions
from companyd.alerts._service import EDIT_INTERVAL, AlertService
from companyd.clock import ManualClock
from companyd.config import CompanyConfig, load_config
from companyd.events import EventBus, FounderDecided, OperatorAction, RoutineResult
from companyd.testing.bot_api import BotApiServer, DownMode, SentMessage

TOKEN = "123456789:AAH-alerts-test-secret-0123456789abcdef"
SECRET_HALF = TOKEN.split(":", 1)[1]
CHAT = 111
CHAT2 = 222
STRANGER = 999


# ---------------------------------------------------------------------------------------
# Test parts


def answer(agent: str, text: str, cost_usd: float) -> AskAnswer:
    """``ask``'s result for a run that ended well after one model call."""
    return AskAnswer(
        task_id="task-1",
        run_id="run-1",
        agent=agent,
        status="ok",
        reason=None,
        answer=text,
        cost_usd=cost_usd,
        steps=1,
        tokens=1200,
        models=["claude-haiku-4-5"],
        started=1_800_000_000.0,
        ended=1_800_000_004.0,
        offline=False,
    )


class RecordingAdmin:
    """Our Admin protocol, implemented small: records calls, answers canned dicts where
    the pager only shows the result (it renders any shape), and the result dataclasses
    where it reads one (``resume``, ``ask``).
    """

    agents = ("ceo", "cfo")

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.ask_gate: asyncio.Event | None = None

    def _agent(self, agent: str) -> None:
        if agent not in self.agents:
            raise AdminError(f"unknown agent {agent!r}; agents: {', '.join(self.agents)}")

    async def status(self) -> Any:
        self.calls.append(("status",))
        return {
            "agents": {"cfo": {"state": "running", "restarts": 2}},
            "runs_in_flight": 1,
            "spend_today_usd": 1.5,
        }

    async def spend(self, by: str = "agent", period: str = "today", per_day: bool = False) -> Any:
        self.calls.append(("spend", by, period))
        row = {"calls": 3, "cost_usd": 1.25, "cost_usd_exact": "1.2468", "simulated_usd": 0.0}
        return {
            "by": by,
            "period": {"label": period, "from": "2026-11-01", "to": "2026-11-30"},
            "rows": [{"key": "claude-sonnet-5-5", **row}],
            "total": {"key": None, **row},
        }

    async def budget(self) -> Any:
        self.calls.append(("budget",))
        day = {"scope": "company", "agent": None, "reserved_usd": 0.0}
        return {
            "timezone": "UTC",
            "budgets": [
                {**day, "period": "day", "limit_usd": 10.0, "used_usd": 4.0},
                {**day, "period": "month", "limit_usd": 200.0, "used_usd": 40.0},
                {
                    "scope": "agent:cfo",
                    "agent": "cfo",
                    "period": "day",
                    "limit_usd": 2.5,
                    "raised_today_usd": 0.5,
                    "used_usd": 2.5,
                    "reserved_usd": 0.0,
                    "blocked": "the daily budget of $2.50 is exhausted",
                },
            ],
        }

    async def raise_budget(self, agent: str | None, usd: float, via: str = "cli") -> Any:
        self.calls.append(("raise_budget", agent, usd))
        return {"agent": agent, "raised_usd": usd}

    async def jobs(self) -> Any:
        self.calls.append(("jobs",))
        return {"routines": [{"name": "weekly-report", "next_fire_ts": 1_800_003_600.0}]}

    async def job_history(self, routine: str, limit: int = 20) -> Any:
        self.calls.append(("job_history", routine, limit))
        return {"fires": []}

    async def run_job(self, routine: str, via: str = "cli") -> Any:
        self.calls.append(("run_job", routine))
        return {"routine": routine, "started": True}

    async def resume_all(self, via: str = "cli") -> Any:
        self.calls.append(("resume_all", ""))
        return {"resumed": [], "message": "no agent was paused"}

    async def resume_job(self, routine: str, via: str = "cli") -> Any:
        self.calls.append(("resume_job", routine))
        return {"routine": routine, "resumed": True, "message": f"resumed routine {routine}"}

    async def fire_webhook(self, routine: str, webhook_id: str, body: str) -> Any:
        self.calls.append(("fire_webhook", routine))
        return {"routine": routine, "fire_id": "fire-1", "replay": False, "message": "fired"}

    async def pause(self, agent: str, via: str = "cli") -> Any:
        self.calls.append(("pause", agent))
        self._agent(agent)
        return {"agent": agent, "paused": True}

    async def resume(self, agent: str, via: str = "cli") -> Resumed:
        self.calls.append(("resume", agent))
        self._agent(agent)
        return Resumed(agent=agent, resumed=True, message=f"resumed {agent}")

    async def ask(
        self,
        agent: str,
        question: str,
        timeout: float = 300.0,
        reply_to: str | None = None,
        task_id: str | None = None,
        via: str = "cli",
    ) -> AskAnswer:
        self.calls.append(("ask", agent, question))
        if self.ask_gate is not None:
            await self.ask_gate.wait()
        return answer(agent, f"runway is 14 months ({question})", cost_usd=0.0123)

    async def runs(
        self,
        agent: str | None = None,
        status: str | None = None,
        limit: int = 20,
        routine: str | None = None,
        since: float | None = None,
        finished: bool = False,
        deliveries: bool = False,
    ) -> Any:
        self.calls.append(("runs", agent, status, limit))
        return {"runs": []}

    async def run_show(self, run_id: str) -> Any:
        self.calls.append(("run_show", run_id))
        return {"run_id": run_id}

    async def tasks(self, quarantined: bool = False) -> Any:
        self.calls.append(("tasks", quarantined))
        return {"tasks": [{"id": "t-9", "agent": "cfo", "reason": "crashed 3 times"}]}

    async def retry(self, task_id: str, via: str = "cli") -> Any:
        self.calls.append(("retry", task_id))
        return {"task": task_id, "queued": True}

    async def proposals(self) -> Any:
        self.calls.append(("proposals",))
        return {"proposals": []}

    async def approve(self, proposal_id: str, by: str = "", via: str = "cli") -> Any:
        self.calls.append(("approve", proposal_id))
        if proposal_id == "p-missing":
            raise AdminError("no proposal 'p-missing'; pending proposals: p-7")
        return {"proposal": proposal_id, "applied": True}

    async def reject(
        self, proposal_id: str, reason: str = "", by: str = "", via: str = "cli"
    ) -> Any:
        self.calls.append(("reject", proposal_id))
        return {"proposal": proposal_id, "rejected": True}

    async def answer(self, item_id: str, text: str, by: str = "", via: str = "cli") -> Any:
        self.calls.append(("answer", item_id, text))
        return {"id": item_id, "message": f"answered {item_id}"}

    async def inbox(self) -> Any:
        self.calls.append(("inbox",))
        return {"items": []}

    async def revert(self, proposal_id: str, via: str = "cli") -> Any:
        self.calls.append(("revert", proposal_id))
        return {"proposal": proposal_id, "reverted": True}

    async def debug(self, action: str, target: str | None = None, seconds: float = 0.0) -> Any:
        self.calls.append(("debug", action, target, seconds))
        return {"action": action, "target": target}

    async def reload(self, via: str = "cli") -> Any:
        self.calls.append(("reload",))
        return {"reloaded": True}

    async def tools(self, agent: str | None = None) -> Any:
        self.calls.append(("tools", agent))
        return {"day": "2026-01-01", "tools": []}

    async def tools_approve(self, server: str, agent: str | None = None, via: str = "cli") -> Any:
        self.calls.append(("tools_approve", server, agent))
        return {"server": server, "approved": []}

    async def backup(self, to: str) -> Any:
        self.calls.append(("backup", to))
        return {"path": to}

    async def memory_search(self, query: str, limit: int = 50) -> Any:
        self.calls.append(("memory_search", query, limit))
        return {"query": query, "total": 0, "truncated": False, "entities": []}

    async def memory_entity(self, name: str, depth: int = 1) -> Any:
        self.calls.append(("memory_entity", name, depth))
        raise AdminError(f"no entity {name!r} in company memory")

    async def memory_changes(self, limit: int = 50) -> Any:
        self.calls.append(("memory_changes", limit))
        return {"since": 0.0, "changes": []}

    async def config_view(self) -> Any:
        self.calls.append(("config_view",))
        return {"path": "/etc/companyd/company.yaml"}

    async def dashboard_login(self) -> Any:
        self.calls.append(("dashboard_login",))
        return {"url": "http://127.0.0.1:8470/login?token=t", "expires_at": 0.0}


class Ctx:
    """A ChildContext as a supervisor gives it."""

    id = "alerts"
    path = "companyd/alerts"

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self.info: Any = None

    def started(self, info: Any = None) -> None:
        self.info = info
        self.ready.set()


def make_config(
    tmp_path: Path, api_url: str | None, *, timezone: str = "UTC", **alerts: Any
) -> CompanyConfig:
    telegram: dict[str, Any] | None = {"chat_ids": [CHAT], "api_url": api_url}
    if "telegram" in alerts:
        telegram = alerts.pop("telegram")
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Acme", "timezone": timezone, "budget": {"daily_usd": 10}},
        "agents": {
            "ceo": {"title": "CEO", "instructions": "lead"},
            "cfo": {"title": "CFO", "reports_to": "ceo", "instructions": "money"},
        },
        "alerts": {"min_severity": "info", **alerts},
    }
    if telegram is not None:
        doc["alerts"]["telegram"] = telegram
    path = tmp_path / "company.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return load_config(path)


@dataclass
class Harness:
    server: BotApiServer
    clock: ManualClock
    bus: EventBus
    admin: RecordingAdmin
    tmp_path: Path

    async def until(
        self, cond: Callable[[], bool], *, step: float = 0.0, timeout: float = 10.0
    ) -> None:
        """Wait for ``cond``; ``step`` > 0 moves the service clock on while waiting."""
        async with asyncio.timeout(timeout):
            while not cond():
                if step:
                    self.clock.advance(step)
                await asyncio.sleep(0.01)

    async def run_clock(self, seconds: float) -> None:
        """Move the service clock ``seconds`` on, from one wake-up to the next; after each,
        wait until every sleeper it woke is asleep again (what it does in between — a real
        HTTP call — takes real time). No fixed real-time pause per step.

        It counts sleepers, so it suits loops that sleep again after each wake (the command
        poller's backoff); where a wake starts one-shot work (an alert's first booking),
        the count can be back before that work is done — use ``until`` on its result.
        """
        end = self.clock.monotonic() + seconds
        while (left := end - self.clock.monotonic()) > 0:
            asleep = self.clock.sleepers
            due = self.clock.next_deadline()
            self.clock.advance(
                left if due is None else min(max(due - self.clock.monotonic(), 0.0), left)
            )
            await self.until(functools.partial(self._asleep_again, asleep))

    def _asleep_again(self, asleep: int) -> bool:
        return self.clock.sleepers >= asleep

    @contextlib.asynccontextmanager
    async def service(
        self,
        config: CompanyConfig | None = None,
        *,
        connected: bool = True,
        before_run: Callable[[], object] | None = None,
        deliveries: DeliveryLog | None = None,
        desk: DeskDecisions | None = None,
    ) -> AsyncIterator[tuple[AlertService, Ctx]]:
        cfg = config or make_config(self.tmp_path, self.server.url)
        svc = AlertService(
            cfg,
            self.tmp_path / "state",
            bus=self.bus,
            admin=self.admin,
            clock=self.clock,
            deliveries=deliveries,
            desk=desk,
        )
        if before_run is not None:
            before_run()
        ctx = Ctx()
        task = asyncio.create_task(svc.run(ctx))
        try:
            async with asyncio.timeout(10):
                await ctx.ready.wait()
            if connected:
                await self.until(lambda: svc.snapshot()["telegram"] == "ok")
            yield svc, ctx
        finally:
            ctx.stopping.set()
            async with asyncio.timeout(15):
                await task
            svc.close()

    def bot_messages(self, chat: int = CHAT) -> list[SentMessage]:
        return [m for m in self.server.messages if m.chat_id == chat]


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)


@contextlib.asynccontextmanager
async def harness(tmp_path: Path, *, start: float = 1_800_000_000.0) -> AsyncIterator[Harness]:
    clock = ManualClock(start=start)
    async with asyncio.timeout(60), BotApiServer(token=TOKEN) as server:
        yield Harness(server, clock, EventBus(clock), RecordingAdmin(), tmp_path)


def sends(server: BotApiServer) -> int:
    return len([c for c in server.calls_of("sendMessage") if c.status == 200])


# ---------------------------------------------------------------------------------------
# Each alert kind arrives with its content

KIND_CASES: list[tuple[str, str, dict[str, Any], list[str], list[str]]] = [
    (
        "restart",
        "companyd/agents/finance",
        {"child": "cfo", "reason": "error:RuntimeError('boom')", "restarts": 2},
        [
            "cfo crashed and was restarted",
            "RuntimeError('boom')",
            "restart count: 2",
            "companyd/agents/finance",
        ],
        ["Pause cfo"],
    ),
    (
        "child_exited",
        "companyd/agents/ops",
        {"child": "ceo", "reason": "error:ValueError('bad plan')", "restart": "temporary"},
        ["ceo crashed and was not restarted", "ValueError('bad plan')"],
        ["Pause ceo"],
    ),
    (
        "max_intensity",
        "companyd/agents/finance",
        {
            "child": "cfo",
            "reason": "error:KeyError('x')",
            "restarts": 4,
            "max_restarts": 3,
            "within_seconds": 60,
        },
        [
            "supervisor companyd/agents/finance gave up",
            "4 restarts in 60 s",
            "limit of 3",
            "KeyError('x')",
        ],
        ["Pause cfo"],
    ),
    (
        "daemon_started",
        "companyd",
        {"version": "0.1.0", "agents": 2, "routines": 1, "pid": 4242},
        ["companyd started", "2 agents, 1 routine", "version: 0.1.0"],
        [],
    ),
    (
        "daemon_stopping",
        "companyd",
        {"reason": "SIGTERM from systemd"},
        ["companyd is stopping", "SIGTERM from systemd"],
        [],
    ),
    (
        "daemon_reloaded",
        "companyd",
        {"changes": ["agent cfo: model changed", "routine daily-digest added"]},
        ["company.yaml reloaded", "agent cfo: model changed", "routine daily-digest added"],
        [],
    ),
    (
        "config_rejected",
        "companyd",
        {
            "errors": ["company.yaml:7:5: agents.cfo.budget.daily_usd: expected a number"],
            "file": "company.yaml",
        },
        ["change rejected", "company.yaml:7:5: agents.cfo.budget.daily_usd"],
        [],
    ),
    (
        "budget_threshold",
        "spend",
        {
            "scope": "agent",
            "agent": "cfo",
            "period": "day",
            "level": 0.8,
            "used_usd": 1.6,
            "limit_usd": 2.0,
        },
        ["cfo has used 80% of its daily budget", "$1.60 of $2.00"],
        ["Pause cfo", "$5 today"],
    ),
    (
        "budget_threshold",
        "spend",
        {"scope": "company", "period": "month", "level": 0.5, "used_usd": 100, "limit_usd": 200},
        ["the company has used 50% of its monthly budget", "$100.00 of $200.00"],
        ["$5 today (company)"],
    ),
    (
        "budget_exhausted",
        "spend",
        {
            "scope": "agent",
            "agent": "cfo",
            "period": "day",
            "used_usd": 2.0,
            "limit_usd": 2.0,
            "paused": ["cfo"],
        },
        ["cfo reached its daily budget", "$2.00 of $2.00", "paused: cfo"],
        ["$5 today", "Resume cfo"],
    ),
    (
        "api_spend_limit",
        "roles",
        {"message": "enforced_spend_limit_reached", "paused": ["ceo", "cfo"]},
        [
            "spend limit reached",
            "enforced_spend_limit_reached",
            "paused: ceo, cfo",
            "companyd resume --all",
        ],
        [],
    ),
    (
        "quota_wall",
        "agents",
        {
            "agents": ["ceo", "cfo"],
            "models": ["claude-sonnet-5-5"],
            "until": 1_800_000_900.0,
            "until_text": "14:35",
            "message": "claude-sonnet-5-5: ModelRateLimited: rate limited",
        },
        ["rate limited until 14:35: ceo, cfo paused", "resume by themselves at 14:35"],
        [],
    ),
    (
        "quota_wall_lifted",
        "agents",
        {"agents": ["ceo", "cfo"], "until_text": "14:35"},
        ["rate limit lifted (14:35): ceo, cfo run again"],
        [],
    ),
    (
        "routine_paused",
        "scheduler",
        {
            "routine": "daily-post",
            "agent": "marketing",
            "failures": 3,
            "reasons": ["failed: a", "failed: b", "unverified: c"],
        },
        [
            "routine daily-post paused after 3 failed runs in a row",
            "unverified: c",
            "companyd jobs resume daily-post",
        ],
        [],
    ),
    (
        "routine_limit_reached",
        "scheduler",
        {"routine": "poll", "agent": "coo", "max_runs_per_day": 24, "day": "2027-01-04"},
        ["routine poll reached max_runs_per_day (24)", "2027-01-04"],
        [],
    ),
    (
        "founder_reminder",
        "agent/cfo",
        {
            "item_id": "ap-1",
            "item_kind": "approval",
            "agent": "cfo",
            "run_id": "run-1",
            "created": 1_800_000_000.0,
            "deadline": 1_800_086_400.0,
            "summary": "cfo wants to call pay_invoice",
        },
        ["still waiting for you: ap-1", "pay_invoice", "it is denied"],
        ["Approve", "Reject"],
    ),
    (
        "api_key_refused",
        "agents",
        {"message": "HTTP 401 invalid x-api-key", "paused": ["ceo", "cfo"]},
        ["API key refused", "invalid x-api-key", "paused: ceo, cfo", "restart companyd"],
        [],
    ),
    (
        "routine_failed",
        "scheduler",
        {
            "routine": "weekly-report",
            "agent": "cfo",
            "reason": "timeout after 600 s",
            "run_id": "r-17",
        },
        ["routine weekly-report failed", "timeout after 600 s", "run: r-17"],
        ["Run again now"],
    ),
    (
        "routine_missed",
        "scheduler",
        {"routine": "daily-digest", "scheduled_for": 1_800_000_000, "reason": "daemon was down"},
        ["routine daily-digest missed a run", "2027-01-15 08:00 UTC", "daemon was down"],
        ["Run again now"],
    ),
    (
        "routine_skipped",
        "scheduler",
        {"routine": "inbox", "reason": "previous run still active"},
        ["routine inbox skipped a run", "previous run still active"],
        [],
    ),
    (
        "task_quarantined",
        "roles",
        {"task_id": "t-42", "agent": "cfo", "reason": "crashed 3 times", "attempts": 3},
        ["task t-42 quarantined", "crashed 3 times", "/retry t-42"],
        ["Retry task"],
    ),
    (
        "memory_repaired",
        "memory",
        {
            "path": "/var/lib/companyd/memory.jsonl",
            "kept": 120,
            "dropped": 2,
            "fixed": 1,
            "backup": "memory.jsonl.bak-1",
        },
        ["memory file repaired", "kept: 120, dropped: 2, fixed: 1", "memory.jsonl.bak-1"],
        [],
    ),
    (
        "circuit_breaker",
        "roles",
        {"agent": "cfo", "breaker": "max_cost_usd", "value": 0.61, "limit": 0.5, "run_id": "r-9"},
        ["circuit breaker stopped a run of cfo", "max_cost_usd: 0.61 (limit 0.5)"],
        ["Pause cfo"],
    ),
    (
        "proposal_created",
        "improver",
        {
            "proposal_id": "p-7",
            "agent": "improver",
            "title": "cheaper model for accountant",
            "summary": "switch accountant to claude-haiku-5-5",
        },
        ["proposal p-7 awaits approval: cheaper model for accountant", "/approve p-7"],
        ["Approve", "Reject"],
    ),
]


@pytest.mark.anyio
async def test_each_alert_kind_arrives_with_its_content(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h, h.service():
        for kind, source, data, _, _ in KIND_CASES:
            h.bus.emit(kind, source, **data)
        await h.until(lambda: len(h.bot_messages()) == len(KIND_CASES))
        messages = h.bot_messages()
        for (kind, _, _, expected, buttons), msg in zip(KIND_CASES, messages, strict=True):
            for fragment in expected:
                assert fragment in msg.text, f"{kind}: {fragment!r} not in {msg.text!r}"
            labels = [label for label, _ in msg.buttons()]
            assert len(labels) == len(buttons), f"{kind}: buttons {labels}"
            for want, label in zip(buttons, labels, strict=True):
                assert want in label, f"{kind}: {want!r} not in {labels}"
            assert "Acme" in msg.text
        # Severity shows as an icon; info alerts arrive silently.
        by_kind = {k: m for (k, *_), m in zip(KIND_CASES, messages, strict=True)}
        assert by_kind["api_spend_limit"].text.startswith("🔴")
        assert by_kind["routine_failed"].text.startswith("🟠")
        assert by_kind["daemon_started"].text.startswith("🔵")
        assert by_kind["daemon_started"].disable_notification
        assert not by_kind["budget_exhausted"].disable_notification
        # The bot announced its commands.
        assert {c["command"] for c in h.server.commands} >= {"status", "pause", "ask", "retry"}


@pytest.mark.anyio
async def test_a_kind_nobody_documented_still_arrives(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("disk_nearly_full", "daemon", path="/var/lib", free_pct=3)
        h.bus.emit("budget_threshold", "spend")  # every field missing
        await h.until(lambda: len(h.bot_messages()) == 2)
        first, second = h.bot_messages()
        assert "disk nearly full" in first.text
        assert "free_pct: 3" in first.text
        assert "budget" in second.text


@pytest.mark.anyio
async def test_an_approval_gives_its_deadline_on_the_clock_of_its_footer(
    tmp_path: Path, token_env: None
) -> None:
    """One zone per message: the founder in Berlin reads the deadline on the same clock as
    the footer's "when", not one in UTC above one in CET; and so do the replies to commands.
    """
    async with harness(tmp_path) as h:  # 1_800_000_000 is 2027-01-15 08:00 UTC, 09:00 CET
        cfg = make_config(tmp_path, h.server.url, timezone="Europe/Berlin")
        async with h.service(cfg):
            h.bus.emit(
                "founder_approval_requested",
                "agent/cfo",
                item_id="ap-1",
                agent="cfo",
                tool="pay_invoice",
                deadline=1_800_003_600.0,
            )
            await h.until(lambda: len(h.bot_messages()) == 1)
            text = h.bot_messages()[0].text
            # a command's reply is on the same clock: /jobs' next fire
            assert "next 2027-01-15 10:00 CET" in await _command(h, "/jobs")
    assert "unanswered by 2027-01-15 10:00 CET counts as rejected" in text, text
    assert "Acme · 09:00 CET, 15 Jan" in text, text
    assert "UTC" not in text, text


@pytest.mark.anyio
async def test_an_item_decided_after_its_reminder_loses_its_buttons_in_both_messages(
    tmp_path: Path, token_env: None
) -> None:
    """The reminder carries the item's buttons too: once the item is decided elsewhere (here
    it expired), the item's own message and the reminder both lose them and say so — not
    only the newest of the two, leaving a live Approve under the first that can only be
    refused (docs/desk.md: "The item's message loses its buttons").
    """
    async with harness(tmp_path) as h, h.service():
        item: dict[str, Any] = {"item_id": "ap-1", "agent": "cfo", "run_id": "run-1"}
        h.bus.emit(
            "founder_approval_requested",
            "agent/cfo",
            **item,
            tool="pay_invoice",
            deadline=1_800_003_600.0,
        )
        await h.until(lambda: len(h.bot_messages()) == 1)
        h.clock.advance(2_700.0)
        h.bus.emit(
            "founder_reminder",
            "agent/cfo",
            **item,
            item_kind="approval",
            created=1_800_000_000.0,
            deadline=1_800_003_600.0,
            summary="cfo wants to call pay_invoice",
        )
        await h.until(lambda: len(h.bot_messages()) == 2)
        asked, reminder = h.bot_messages()
        assert asked.reply_markup and reminder.reply_markup  # both offer Approve / Reject
        h.clock.advance(900.0)
        h.bus.emit(
            "founder_decided", "agent/cfo", **item, item_kind="approval", state="expired", by=""
        )
        await h.until(lambda: not asked.reply_markup and not reminder.reply_markup)
    for message in (asked, reminder):
        assert message.text.endswith("✔ expired: no answer in time at 09:00"), message.text
    assert len(h.bot_messages()) == 2  # edited, nothing new sent


@pytest.mark.anyio
async def test_an_item_decided_while_the_pager_was_down_loses_its_buttons_at_its_start(
    tmp_path: Path, token_env: None
) -> None:
    """`companyd approve` with the daemon stopped publishes its decision to no pager: at
    its next start the pager reads the desk and edits the item's message, which would
    otherwise offer Approve / Reject for good (docs/desk.md, "Decided anywhere").
    """

    class Desk:
        def __init__(self, decided: list[FounderDecided]) -> None:
            self.items = {e.item_id: e for e in decided}
            self.asked: list[list[str]] = []

        async def decided(self, item_ids: Sequence[str]) -> list[FounderDecided]:
            self.asked.append(list(item_ids))
            return [self.items[i] for i in item_ids if i in self.items]

        async def proposals_decided(self, proposal_ids: Sequence[str]) -> list[OperatorAction]:
            return [
                OperatorAction(
                    source="cli",
                    ts=1_800_000_000.0 + 1_800,
                    action="reject",
                    target=pid,
                    via="cli",
                    ok=True,
                    message=f"rejected {pid} by root: too soon",
                )
                for pid in proposal_ids
                if pid == "p-9"
            ]

    item: dict[str, Any] = {"item_id": "ap-1", "agent": "cfo", "run_id": "run-1"}
    async with harness(tmp_path) as h:
        async with h.service():
            h.bus.emit("founder_approval_requested", "agent/cfo", **item, tool="pay_invoice")
            h.bus.emit("founder_approval_requested", "agent/cfo", **{**item, "item_id": "ap-2"})
            h.bus.emit("proposal_created", "improver", proposal_id="p-9", title="shorter")
            await h.until(lambda: len(h.bot_messages()) == 3)
        asked, other, proposal = h.bot_messages()
        assert proposal.buttons()
        assert asked.reply_markup and other.reply_markup
        decided = FounderDecided(
            source="agent/cfo",
            ts=1_800_000_000.0 + 1_800,  # 08:30 UTC, while the pager was down
            item_kind="approval",
            state="approved",
            by="root",
            via="cli",
            **item,
        )
        desk = Desk([decided])
        async with h.service(desk=desk):
            await h.until(lambda: not asked.reply_markup)
        assert desk.asked == [["ap-1", "ap-2"]]  # one read of the desk, for both offers
        assert asked.text.endswith("✔ approved by root via cli at 08:30"), asked.text
        assert other.reply_markup  # still pending: still offered
        # a proposal rejected with the daemon stopped: its buttons go too
        await h.until(lambda: not proposal.buttons())
        assert "✔ rejected p-9 by root: too soon — via cli at 08:30" in proposal.text
        assert len(h.bot_messages()) == 3  # edited, nothing new sent
        async with h.service(desk=desk):  # a later start has nothing more to do
            pass
        assert desk.asked[-1] == ["ap-2"]


@pytest.mark.anyio
async def test_an_item_decided_by_its_own_button_says_so_once(
    tmp_path: Path, token_env: None
) -> None:
    """The desk publishes ``founder_decided`` while the press is acted on; when the pager
    took it first, the message said the decision twice (its desk line and the press's).
    """
    async with harness(tmp_path) as h, h.service():
        real_approve = h.admin.approve

        async def approve(item_id: str, by: str = "", via: str = "cli") -> Any:
            # as the daemon's desk does: the decision is published before the answer
            h.bus.emit(
                "founder_decided",
                "agent/cfo",
                item_id=item_id,
                item_kind="approval",
                agent="cfo",
                run_id="run-1",
                state="approved",
                by=by,
                via=via,
            )
            await asyncio.sleep(0.1)  # the pager's intake takes the event meanwhile
            return await real_approve(item_id, by=by, via=via)

        h.admin.approve = approve  # type: ignore[method-assign,assignment]
        h.bus.emit(
            "founder_approval_requested",
            "agent/cfo",
            item_id="ap-1",
            agent="cfo",
            run_id="run-1",
            tool="pay_invoice",
        )
        await h.until(lambda: len(h.bot_messages()) == 1)
        (msg,) = h.bot_messages()
        h.server.press_button(CHAT, msg.message_id, msg.buttons()[0][1])
        await h.until(lambda: not msg.reply_markup and "✔" in msg.text)
        await asyncio.sleep(0.1)
    (said,) = [ln for ln in msg.text.splitlines() if ln.startswith("✔")]
    assert said.startswith("✔ approved") and " — by Op (@operator) at " in said, msg.text


@pytest.mark.anyio
async def test_a_question_a_proposal_and_a_task_decided_elsewhere_say_so_on_their_messages(
    tmp_path: Path, token_env: None
) -> None:
    """docs/desk.md, "Decided anywhere, shown everywhere": a question answered on the
    command line, a proposal rejected there and a task retried there kept their messages
    as they were (a question has no buttons; the other two kept theirs, to be refused).
    """
    async with harness(tmp_path) as h, h.service():
        h.bus.emit(
            "founder_question",
            "agent/cfo",
            item_id="q-1",
            agent="cfo",
            run_id="run-1",
            deadline=1_800_003_600.0,
            question="Which bank?",
        )
        h.bus.emit("proposal_created", "improver", proposal_id="p-7", title="cheaper")
        h.bus.emit("task_quarantined", "agent/cfo", task_id="task-1", agent="cfo", crashes=2)
        await h.until(lambda: len(h.bot_messages()) == 3)
        question, proposal, task = h.bot_messages()
        assert proposal.buttons() and task.buttons()
        h.bus.emit(
            "founder_decided",
            "agent/cfo",
            item_id="q-1",
            item_kind="question",
            agent="cfo",
            run_id="run-1",
            state="answered",
            by="root",
            via="cli",
        )
        _acted(h, "reject", "p-7", "rejected proposal p-7")
        _acted(h, "retry", "task-1", "retried task task-1")
        await h.until(lambda: not proposal.buttons() and not task.buttons())
        await h.until(lambda: "✔" in question.text)
    assert question.text.endswith("✔ answered by root via cli at 08:00"), question.text
    assert "✔ rejected proposal p-7 — via cli at 08:00" in proposal.text
    assert "✔ retried task task-1 — via cli at 08:00" in task.text
    # the actions' own info alerts aside, nothing new was sent for the three
    assert len([m for m in h.bot_messages() if "✔" in m.text]) == 3


# ---------------------------------------------------------------------------------------
# Noise control


@pytest.mark.anyio
async def test_fifty_crashes_in_a_minute_are_one_message_edited_to_the_count(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h, h.service():
        for i in range(50):
            h.bus.emit(
                "child_exited",
                "companyd/agents/finance",
                child="cfo",
                reason=f"error:RuntimeError('boom {i}')",
            )
            h.bus.emit(
                "restart",
                "companyd/agents/finance",
                child="cfo",
                reason=f"error:RuntimeError('boom {i}')",
                restarts=i + 1,
            )
            h.clock.advance(1.2)  # 50 crashes within 60 s
            await asyncio.sleep(0.005)
        await h.until(lambda: "50 crashes" in h.bot_messages()[-1].text, step=EDIT_INTERVAL)
        msgs = h.bot_messages()
        assert len(msgs) <= 3
        assert sends(h.server) == len(msgs)
        last = msgs[-1].text
        assert "cfo is crash-looping: 50 crashes" in last
        assert "×50" in last
        assert "restart count: 50" in last
        assert "boom 49" in last
        # Edits are throttled: far fewer than one per crash.
        assert len(h.server.calls_of("editMessageText")) <= 60 / EDIT_INTERVAL + 2

        # Past the coalescing window a crash is news again: a new message (which notifies).
        h.clock.advance(601)
        h.bus.emit(
            "restart", "companyd/agents/finance", child="cfo", reason="error:again", restarts=1
        )
        await h.until(lambda: len(h.bot_messages()) == len(msgs) + 1)
        assert "cfo crashed and was restarted" in h.bot_messages()[-1].text


#: A department's supervisor giving up, as companyd/agents/finance publishes it.
FINANCE_GAVE_UP: dict[str, Any] = {
    "child": "cfo",
    "reason": "error:KeyError('x')",
    "restarts": 4,
    "max_restarts": 3,
    "max_seconds": 60,
    "message": "4 restarts within 60 s exceed max_restarts=3; stopping every child and escalating",
}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("restart_type", "action", "told"),
    [
        ("permanent", "restart", "its supervisor companyd/agents restarted it"),
        (
            "transient",
            "none",
            "its supervisor companyd/agents did not restart it (transient): its subtree stays "
            "down until restarted by hand",
        ),
    ],
)
async def test_a_department_giving_up_and_its_parents_word_on_it_are_one_message(
    tmp_path: Path, token_env: None, restart_type: str, action: str, told: str
) -> None:
    """The sub-supervisor's ``max_intensity`` and its parent's ``child_exited`` (gave up)
    and ``restart`` of it are one incident: one (critical) message, edited to say what the
    parent did — not three messages within a second.
    """
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("max_intensity", "companyd/agents/finance", **FINANCE_GAVE_UP)
        h.bus.emit(
            "child_exited",
            "companyd/agents",
            child="finance",
            restart_type=restart_type,
            action=action,
            reason="error:SupervisorGaveUp('companyd/agents/finance')",
            gave_up=True,
        )
        if action == "restart":
            h.bus.emit(
                "restart",
                "companyd/agents",
                child="finance",
                strategy="one_for_one",
                restarts=1,
                max_restarts=3,
                max_seconds=60,
                group=["finance"],
            )
        await h.until(
            lambda: bool(h.bot_messages()) and told in h.bot_messages()[-1].text,
            step=EDIT_INTERVAL,
        )
        msgs = h.bot_messages()
        assert len(msgs) == 1 and sends(h.server) == 1
        text = msgs[0].text
        assert text.startswith("🔴")  # critical: it reaches the founder in quiet hours too
        assert "supervisor companyd/agents/finance gave up" in text
        # the story keeps the supervisor's own figures, not the parent's restart counter
        assert "4 restarts in 60 s — more than its limit of 3" in text
        assert "last to fail: cfo: error:KeyError('x')" in text
        assert "×" not in text  # one give-up, not a count of its three events


@pytest.mark.anyio
async def test_different_operator_actions_are_told_apart_and_repeats_fold(
    tmp_path: Path, token_env: None
) -> None:
    """``run_job``, ``reload`` and ``ask`` within ``coalesce_seconds`` are three messages, not
    one "operator action ×3" that shows only the last; the same action on the same target
    again folds into its message (×2) — docs/alerts.md "One message per story".
    """

    def act(action: str, target: str) -> None:
        _acted(h, action, target, f"{action} {target}: ok")

    async with harness(tmp_path) as h, h.service():
        act("run_job", "daily-post")
        await h.until(lambda: len(h.bot_messages()) == 1)
        act("reload", "company.yaml")
        act("ask", "cfo")
        await h.until(lambda: len(h.bot_messages()) >= 3)
        act("run_job", "daily-post")
        await h.until(lambda: "×2" in h.bot_messages()[0].text, step=EDIT_INTERVAL)
        texts = [m.text for m in h.bot_messages()]
        assert len(texts) == 3, texts
        assert [t.split("action: ", 1)[1].split("\n", 1)[0] for t in texts] == [
            "run_job",
            "reload",
            "ask",
        ], texts


@pytest.mark.anyio
async def test_a_planned_restart_is_not_a_restart_loop(tmp_path: Path, token_env: None) -> None:
    """A start, then ``systemctl restart`` (SIGTERM, a clean start: ``planned_stop``) within
    ``coalesce_seconds``: "companyd restarted (planned)", not "started 2 times — restart
    loop?"; starts after unplanned ends still fold into the loop question (docs/alerts.md).
    """
    started: dict[str, Any] = {"pid": 1, "version": "0.1.0", "agents": 2, "offline": False}
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("daemon_started", "daemon", **started, company="Acme")
        await h.until(lambda: len(h.bot_messages()) == 1)
        h.bus.emit("daemon_started", "daemon", **started, company="Acme", planned_stop="signal")
        await h.until(lambda: len(h.bot_messages()) == 2)
        texts = [m.text for m in h.bot_messages()]
        assert "restart loop" not in "".join(texts), texts
        assert texts[1].startswith("🔵 companyd restarted (planned)"), texts
        assert "after a planned stop: signal" in texts[1], texts
        h.bus.emit("daemon_started", "daemon", **started, company="Acme")  # after a crash
        await h.until(lambda: "restart loop?" in h.bot_messages()[0].text, step=EDIT_INTERVAL)
        assert len(h.bot_messages()) == 2


@pytest.mark.anyio
async def test_routes_min_severity_and_normal_exits(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h:
        cfg = make_config(
            tmp_path,
            h.server.url,
            min_severity="warning",
            routes={"routine_skipped": "off", "run_failed": "critical", "memory_repaired": "off"},
        )
        async with h.service(cfg) as (svc, _):
            h.bus.emit("agent_paused", "roles", agent="cfo", reason="operator")  # info: dropped
            h.bus.emit("routine_skipped", "scheduler", routine="x", reason="busy")  # off
            h.bus.emit("child_exited", "companyd/agents", child="cfo", reason="normal")
            h.bus.emit("child_exited", "companyd/agents", child="ceo", reason="shutdown")
            h.bus.emit("run_started", "roles", agent="cfo")  # debug
            h.bus.emit("daemon_started", "companyd", agents=2)  # info, but always told
            h.bus.emit("run_failed", "roles", agent="cfo", reason="API 500")  # routed critical
            await h.until(lambda: len(h.bot_messages()) == 2)
            started, failed = h.bot_messages()
            assert "companyd started" in started.text
            assert started.disable_notification
            assert failed.text.startswith("🔴 a run of cfo failed")

            # A reload changes routing at once.
            svc.update_config(
                make_config(
                    tmp_path, h.server.url, min_severity="warning", routes={"run_failed": "off"}
                )
            )
            h.bus.emit("run_failed", "roles", agent="ceo", reason="API 500")
            h.bus.emit("memory_repaired", "memory", dropped=1)  # warning now: sent
            await h.until(lambda: len(h.bot_messages()) == 3)
            assert "memory file repaired" in h.bot_messages()[-1].text
            assert sends(h.server) == 3


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.anyio
async def test_quiet_hours_hold_non_critical_alerts_for_one_digest(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path, start=_utc("2027-01-15T23:30:00")) as h:
        cfg = make_config(tmp_path, h.server.url, quiet_hours={"start": "23:00", "end": "07:00"})
        async with h.service(cfg) as (svc, _):
            h.bus.emit("routine_failed", "scheduler", routine="nightly", reason="timeout")
            h.clock.advance(3600)
            h.bus.emit("circuit_breaker", "roles", agent="cfo", breaker="max_steps")
            h.bus.emit("api_spend_limit", "roles", message="spend limit")  # critical: now
            await h.until(lambda: len(h.bot_messages()) == 1)
            assert "spend limit" in h.bot_messages()[0].text
            assert svc.snapshot()["held"] == 2
            # At 07:00 the held alerts come as one digest.
            h.clock.advance(_utc("2027-01-16T07:00:00") - h.clock.time())
            await h.until(lambda: len(h.bot_messages()) == 2)
            digest = h.bot_messages()[1].text
            assert "While quiet hours were on: 2 alerts" in digest
            assert "routine nightly failed" in digest
            assert "circuit breaker stopped a run of cfo" in digest
            assert svc.snapshot()["held"] == 0
            # The next night, a single held alert is simply sent, buttons and all.
            h.clock.advance(_utc("2027-01-16T23:10:00") - h.clock.time())
            h.bus.emit("budget_exhausted", "spend", scope="agent", agent="cfo", period="day")
            h.bus.emit("daemon_reloaded", "companyd", changes=["x"])
            h.bus.emit("daemon_reloaded", "companyd", changes=["y"])  # coalesced with x
            await asyncio.sleep(0.1)
            assert len(h.bot_messages()) == 2
            h.clock.advance(_utc("2027-01-17T07:00:00") - h.clock.time())
            await h.until(lambda: len(h.bot_messages()) == 3)
            assert "2 alerts" in h.bot_messages()[2].text
            assert "(×2)" in h.bot_messages()[2].text


@pytest.mark.anyio
async def test_429_is_retried_by_the_rate_limiter(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h, h.service():
        h.server.fail_next(status=429, retry_after=1, method="sendMessage")
        h.bus.emit("task_quarantined", "roles", task_id="t-1", reason="x")
        await h.until(lambda: len(h.bot_messages()) == 1)
        assert [c.status for c in h.server.calls_of("sendMessage")] == [429, 200]


@pytest.mark.anyio
async def test_a_chat_that_refuses_does_not_hold_up_the_rest(
    tmp_path: Path, token_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path) as h, h.service() as (svc, _):
        h.server.fail_next(
            status=403, description="Forbidden: bot was blocked by the user", method="sendMessage"
        )
        h.bus.emit("task_quarantined", "roles", task_id="t-1", reason="x")
        h.bus.emit("task_quarantined", "roles", task_id="t-2", reason="y")
        await h.until(lambda: len(h.bot_messages()) == 1)
        assert "t-2" in h.bot_messages()[0].text
        assert svc.snapshot()["failed"] == 1
        assert "blocked by the user" in caplog.text
        assert "unblock the bot" in caplog.text


class DeliveryRecords:
    """The pager's DeliveryLog as the daemon's would keep it, in memory."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, ResultDelivery]] = []
        self.kept: list[tuple[str, str]] = []

    async def record(self, run_id: str, entry: ResultDelivery) -> None:
        self.entries.append((run_id, entry))

    async def keep(self, data: Mapping[str, Any], reason: str) -> str | None:
        self.kept.append((str(data.get("run_id")), reason))
        return f"k-{data.get('run_id')}"

    async def records(self, run_ids: Sequence[str]) -> Mapping[str, Sequence[ResultDelivery]]:
        return {r: [e for run, e in self.entries if run == r] for r in run_ids}


def a_result(run_id: str, ended: float) -> RoutineResult:
    return RoutineResult(
        source="scheduler",
        routine="daily-post",
        agent="cfo",
        run_id=run_id,
        cost_usd=0.0123,
        answer="Five ways clinics lose patients.",
        task="Draft today's post.",
        deliver=["telegram"],
        scheduled="2027-01-15T08:00:00+00:00",
        fire_id=f"fire-{run_id}",
        ended=ended,
    )


@pytest.mark.anyio
async def test_each_telegram_delivery_of_a_result_is_recorded_and_a_refused_one_kept(
    tmp_path: Path, token_env: None
) -> None:
    """Issue 28: the run's record says the result was delivered to Telegram, when and as
    which message; a chat that refuses it for good is recorded as not delivered, and the
    result is kept in the inbox — never nowhere.
    """
    records = DeliveryRecords()
    async with harness(tmp_path) as h, h.service(deliveries=records):
        h.bus.publish(a_result("run-ok", h.clock.time()))
        await h.until(lambda: any(e["outcome"] == "delivered" for _, e in records.entries))
        (sent,) = h.bot_messages()
        said = {(run, e["outcome"]): e for run, e in records.entries}
        assert said[("run-ok", "queued")]["text"].startswith("queued for telegram at ")
        delivered = said[("run-ok", "delivered")]
        hhmm = datetime.fromtimestamp(h.clock.time(), UTC).strftime("%H:%M")
        assert delivered["text"] == f"delivered to telegram at {hhmm} (message {sent.message_id})"
        assert delivered["message_id"] == sent.message_id and records.kept == []

        h.server.fail_next(
            status=403, description="Forbidden: bot was blocked by the user", method="sendMessage"
        )
        h.bus.publish(a_result("run-refused", h.clock.time()))
        await h.until(lambda: bool(records.kept))
        (refused,) = [e for run, e in records.entries if e["outcome"] == "not_delivered"]
        assert refused["to"] == "telegram" and refused["kept"] == "k-run-refused"
        assert refused["text"].startswith(
            f"not delivered to telegram: Telegram refused it in chat {CHAT}: "
        )
        assert "blocked by the user" in refused["text"]
        assert refused["text"].endswith("— kept in the inbox (k-run-refused)")
        assert records.kept[0][0] == "run-refused"


@pytest.mark.anyio
async def test_a_result_is_recorded_queued_only_once_its_message_is_in_the_outbox(
    tmp_path: Path, token_env: None
) -> None:
    """A stop between the run's "queued for telegram" record and the outbox's write would
    leave a record of a message that was never queued: the record comes after the write.
    """
    in_outbox_when_recorded: list[bool] = []

    class Checking(DeliveryRecords):
        async def record(self, run_id: str, entry: ResultDelivery) -> None:
            if entry["outcome"] == "queued":
                outbox = f"file:{tmp_path / 'state' / 'alerts.sqlite'}?mode=ro"
                with contextlib.closing(sqlite3.connect(outbox, uri=True)) as db:
                    bodies = [b for (b,) in db.execute("SELECT body FROM alerts")]
                in_outbox_when_recorded.append(any(run_id in b for b in bodies))
            await super().record(run_id, entry)

    records = Checking()
    async with harness(tmp_path) as h, h.service(deliveries=records):
        h.bus.publish(a_result("run-ok", h.clock.time()))
        await h.until(lambda: any(e["outcome"] == "delivered" for _, e in records.entries))
    assert [e["outcome"] for _, e in records.entries] == ["queued", "delivered"]
    assert in_outbox_when_recorded == [True]


@pytest.mark.anyio
async def test_a_new_digest_time_takes_the_results_already_waiting(
    tmp_path: Path, token_env: None
) -> None:
    """Results waiting for the digest when a reload moves ``alerts.digest_at`` go out with
    the new digest, not at the old time apart from their day's other results.
    """
    async with harness(tmp_path) as h:  # 08:00 UTC
        cfg = make_config(tmp_path, h.server.url, digest_at="09:00")
        async with h.service(cfg) as (svc, _):
            first = dataclasses.replace(a_result("run-a", h.clock.time()), deliver=["digest"])
            h.bus.publish(first)
            await asyncio.sleep(0.05)
            svc.update_config(make_config(tmp_path, h.server.url, digest_at="10:00"))
            h.bus.publish(dataclasses.replace(first, run_id="run-b", fire_id="fire-b"))
            await asyncio.sleep(0.05)
            h.clock.advance(3_600.0)  # 09:00, the old time: nothing
            await asyncio.sleep(0.2)
            assert [m for m in h.bot_messages() if "📰" in m.text] == []
            h.clock.advance(3_600.0)  # 10:00
            await h.until(lambda: any("📰" in m.text for m in h.bot_messages()))
        (digest,) = [m for m in h.bot_messages() if "📰" in m.text]
        assert "2 results" in digest.text.splitlines()[0], digest.text


# ---------------------------------------------------------------------------------------
# Outages: nothing lost, nothing resent


OUTAGE_ALERTS: list[tuple[str, str, dict[str, Any]]] = [
    ("restart", "companyd/agents/finance", {"child": "cfo", "reason": "error:X", "restarts": 1}),
    (
        "budget_threshold",
        "spend",
        {"scope": "company", "period": "day", "level": 0.8, "used_usd": 8, "limit_usd": 10},
    ),
    ("routine_failed", "scheduler", {"routine": "weekly-report", "reason": "timeout"}),
    ("proposal_created", "improver", {"proposal_id": "p-3", "title": "fewer tokens"}),
    ("memory_repaired", "memory", {"dropped": 2}),
]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["refuse", "502"])
async def test_telegram_down_for_60_s_loses_no_alert(
    tmp_path: Path, token_env: None, mode: DownMode
) -> None:
    async with harness(tmp_path) as h, h.service() as (svc, _):
        await h.server.go_down(mode)
        for kind, source, data in OUTAGE_ALERTS:
            h.bus.emit(kind, source, **data)
        for _ in range(60):  # one minute on the service clock; each try fails
            h.clock.advance(1.0)
            await asyncio.sleep(0.01)
        assert h.bot_messages() == []
        assert svc.snapshot()["queued"] == len(OUTAGE_ALERTS)
        assert svc.snapshot()["telegram"] == "degraded"
        await h.server.go_up()
        await h.until(lambda: len(h.bot_messages()) == len(OUTAGE_ALERTS), step=1.0)
        texts = [m.text for m in h.bot_messages()]
        for (kind, _, _), text, want in zip(
            OUTAGE_ALERTS,
            texts,
            ["cfo crashed", "80% of its daily", "weekly-report failed", "p-3", "repaired"],
            strict=True,
        ):
            assert want in text, kind
        # The stand-in records a message before the service reads the answer.
        await h.until(lambda: svc.snapshot()["queued"] == 0)
        assert svc.snapshot()["telegram"] == "ok"
        # Exactly once each, even with more time for retries.
        for _ in range(5):
            h.clock.advance(30)
            await asyncio.sleep(0.01)
        assert sends(h.server) == len(OUTAGE_ALERTS)
        # Commands work again once polling has recovered.
        h.server.inject_command(CHAT, "/status")
        await h.until(lambda: any("📊 status" in m.text for m in h.bot_messages()), step=1.0)


@pytest.mark.anyio
async def test_restart_sends_what_waited_and_never_resends_what_was_delivered(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h:
        async with h.service():
            h.bus.emit(
                "restart", "companyd/agents/finance", child="cfo", reason="error:A", restarts=1
            )
            h.bus.emit("routine_failed", "scheduler", routine="r1", reason="x")
            await h.until(lambda: len(h.bot_messages()) == 2)
            await h.server.go_down("refuse")
            h.bus.emit("routine_failed", "scheduler", routine="r2", reason="y")
            h.bus.emit("task_quarantined", "roles", task_id="t-5", reason="z")
            await asyncio.sleep(0.05)
        # The daemon stopped during the outage; two alerts wait in alerts.sqlite.
        assert (tmp_path / "state" / "alerts.sqlite").exists()
        await h.server.go_up()
        h.clock.advance(60)
        # Published after the service was built but before run() started: not missed.
        async with h.service(before_run=lambda: h.bus.emit("daemon_started", "companyd")):
            await h.until(lambda: len(h.bot_messages()) == 5, step=1.0)
            texts = [m.text for m in h.bot_messages()]
            assert "r2 failed" in texts[2]
            assert "t-5" in texts[3]
            assert "companyd started" in texts[4]
            # Still inside the first crash's window: the same message is edited.
            h.bus.emit(
                "restart", "companyd/agents/finance", child="cfo", reason="error:B", restarts=2
            )
            await h.until(lambda: "2 crashes" in h.bot_messages()[0].text, step=EDIT_INTERVAL)
            assert sends(h.server) == 5


@pytest.mark.anyio
async def test_ready_while_telegram_is_unreachable_then_delivers(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h:
        await h.server.go_down("refuse")
        async with h.service(connected=False) as (svc, ctx):
            assert ctx.info["telegram"] == "connecting"
            h.bus.emit("api_spend_limit", "roles", message="limit")
            for _ in range(20):
                h.clock.advance(1.0)
                await asyncio.sleep(0.01)
            assert svc.snapshot()["telegram"] == "degraded"
            await h.server.go_up()
            await h.until(lambda: len(h.bot_messages()) == 1, step=1.0)
            assert "spend limit" in h.bot_messages()[0].text
            assert svc.snapshot()["telegram"] == "ok"


@pytest.mark.anyio
async def test_stopping_flushes_the_pending_edit(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h:
        async with h.service():
            h.bus.emit("routine_failed", "scheduler", routine="r", reason="x")
            await h.until(lambda: len(h.bot_messages()) == 1)
            h.bus.emit("routine_failed", "scheduler", routine="r", reason="x again")
            h.bus.emit("daemon_stopping", "companyd", reason="SIGTERM")
            # Stop immediately: no clock movement, the edit throttle has not expired.
        texts = [m.text for m in h.bot_messages()]
        assert "failed 2 times" in texts[0], texts
        assert "companyd is stopping" in texts[1]


@pytest.mark.anyio
async def test_a_corrupt_outbox_is_set_aside(
    tmp_path: Path, token_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "alerts.sqlite").write_bytes(b"this is not a database" * 100)
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("routine_failed", "scheduler", routine="r", reason="x")
        await h.until(lambda: len(h.bot_messages()) == 1)
    assert "was unreadable" in caplog.text
    assert list(state.glob("alerts.sqlite.corrupt-*"))
    with sqlite3.connect(state / "alerts.sqlite") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM alerts").fetchone()[0] == 1


# ---------------------------------------------------------------------------------------
# Commands and buttons


async def _command(h: Harness, text: str, chat: int = CHAT) -> str:
    before = len(h.bot_messages(chat))
    h.server.inject_command(chat, text)
    await h.until(lambda: len(h.bot_messages(chat)) > before)
    return h.bot_messages(chat)[-1].text


@pytest.mark.anyio
async def test_commands_from_the_allowed_chat_call_admin(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h, h.service():
        status = await _command(h, "/status")
        assert "📊 status" in status
        assert "cfo:" in status
        assert "restarts: 2" in status
        assert "spend_today_usd: $1.50" in status
        # spend and budgets as a phone shows them: a line per model (agent, scope), not
        # every field of every row
        assert (await _command(h, "/spend model month")).splitlines() == [
            "💵 spend by model, month (2026-11-01 – 2026-11-30)",
            "• claude-sonnet-5-5 — $1.25 · 3 calls",  # cents above a dollar, as the CLI
            "total $1.25 · 3 calls",
        ]
        assert (await _command(h, "/budget")).splitlines() == [
            "💰 budgets (UTC)",
            "• company: today $4.00 of $10.00 · month $40.00 of $200.00",
            "• cfo: today $2.50 of $2.50 (+$0.50 raised)",
            "⛔ cfo today: the daily budget of $2.50 is exhausted",
        ]
        assert "weekly-report" in await _command(h, "/jobs")
        assert "⏸ paused cfo" in await _command(h, "/pause cfo")
        assert "▶ resumed cfo" in await _command(h, "/resume@companyd_test_bot cfo")
        assert "approved p-7" in await _command(h, "/approve p-7")
        assert "rejected p-8" in await _command(h, "/reject p-8")
        assert "t-9" in await _command(h, "/quarantine")
        assert "retrying t-9" in await _command(h, "/retry t-9")
        # Admin refusals are shown as they are; usage errors name the choices.
        assert await _command(h, "/pause cmo") == "⚠️ unknown agent 'cmo'; agents: ceo, cfo"
        assert "pending proposals: p-7" in await _command(h, "/approve p-missing")
        assert "usage: /pause AGENT (agents: ceo, cfo)" in await _command(h, "/pause")
        assert "/status" in await _command(h, "/help")
        h.server.inject_command(CHAT, "/status@some_other_bot")  # not for us: no answer
        assert "unknown command '/frobnicate'" in await _command(h, "/frobnicate")
        assert not any("some_other_bot" in m.text for m in h.bot_messages())
        assert h.admin.calls == [
            ("status",),
            ("spend", "model", "month"),
            ("budget",),
            ("jobs",),
            ("pause", "cfo"),
            ("resume", "cfo"),
            ("approve", "p-7"),
            ("reject", "p-8"),
            ("tasks", True),
            ("retry", "t-9"),
            ("pause", "cmo"),
            ("approve", "p-missing"),
        ]


@pytest.mark.anyio
async def test_commands_from_another_chat_do_nothing(
    tmp_path: Path, token_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path) as h, h.service():
        h.server.inject_command(STRANGER, "/pause cfo")
        h.server.inject_command(STRANGER, "/status")
        h.server.inject_command(STRANGER, "hello bot")
        # A command from the operator afterwards proves the strangers' updates were handled.
        await _command(h, "/help")
        assert h.admin.calls == []
        assert h.bot_messages(STRANGER) == []
        assert f"ignored a message from chat {STRANGER}" in caplog.text
        assert "only chats in alerts.telegram.chat_ids" in caplog.text


@pytest.mark.anyio
async def test_ask_runs_alongside_other_commands(tmp_path: Path, token_env: None) -> None:
    async with harness(tmp_path) as h, h.service():
        h.admin.ask_gate = asyncio.Event()
        assert "asking cfo" in await _command(h, "/ask cfo what is our runway?")
        # The model is still thinking; /status is answered meanwhile.
        assert "📊 status" in await _command(h, "/status")
        h.admin.ask_gate.set()
        await h.until(lambda: "runway is 14 months" in h.bot_messages()[-1].text)
        answer = h.bot_messages()[-1].text
        assert "(what is our runway?)" in answer
        # as a follow-up's answer reads: the answer, then its cost and run
        assert answer.splitlines()[0] == "💬 cfo"
        assert answer.splitlines()[-1] == "— $0.0123 · run-1 · reply to follow up"
        assert ("ask", "cfo", "what is our runway?") in h.admin.calls
        assert "usage: /ask AGENT question" in await _command(h, "/ask cfo")


def _acted(h: Harness, action: str, target: str, message: str) -> None:
    """Publish the founder's ``action`` on ``target`` done on the command line."""
    h.bus.emit(
        "operator_action", "cli", action=action, target=target, via="cli", ok=True, message=message
    )


def _cfo_out_of_budget(h: Harness) -> None:
    """Publish that the daily budget of cfo is exhausted (cfo paused): its alert offers
    "➕ $5 today" and Resume.
    """
    h.bus.emit(
        "budget_exhausted",
        "spend",
        scope="agent",
        agent="cfo",
        period="day",
        used_usd=2.0,
        limit_usd=2.0,
        paused=["cfo"],
    )


@pytest.mark.anyio
async def test_buttons_act_through_admin_and_edit_the_alert(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h:
        cfg = make_config(
            tmp_path, h.server.url, telegram={"chat_ids": [CHAT, CHAT2], "api_url": h.server.url}
        )
        async with h.service(cfg):
            _cfo_out_of_budget(h)
            h.bus.emit("proposal_created", "improver", proposal_id="p-7", title="cheaper")
            await h.until(lambda: len(h.server.messages) == 4)
            budget, proposal = h.bot_messages(CHAT)
            budget2, _ = h.bot_messages(CHAT2)
            assert [label for label, _ in budget.buttons()] == ["➕ $5 today", "▶ Resume cfo"]

            # Raise the budget from the second chat: both copies show who did it.
            raise_data = budget2.buttons()[0][1]
            h.server.press_button(
                CHAT2, budget2.message_id, raise_data, user_id=7, first_name="Dana", username="dana"
            )
            await h.until(
                lambda: "by Dana (@dana)" in budget.text and "by Dana (@dana)" in budget2.text
            )
            assert ("raise_budget", "cfo", 5.0) in h.admin.calls
            assert "raised cfo's budget for today by $5.00" in budget.text
            assert h.server.callback_answers[-1]["text"].startswith("raised cfo's budget")
            # Resume flips to Pause.
            h.server.press_button(CHAT, budget.message_id, budget.buttons()[1][1])
            await h.until(lambda: "resumed cfo" in budget.text)
            assert [label for label, _ in budget.buttons()] == ["➕ $5 today", "⏸ Pause cfo"]
            assert ("resume", "cfo") in h.admin.calls

            # Approve: the decision buttons go away; a stale press does nothing.
            approve = proposal.buttons()[0][1]
            h.server.press_button(CHAT, proposal.message_id, approve)
            await h.until(lambda: "approved proposal p-7" in proposal.text)
            assert proposal.buttons() == []
            calls = len(h.admin.calls)
            h.server.press_button(CHAT, proposal.message_id, approve)
            await h.until(
                lambda: h.server.callback_answers[-1]["text"] == "this button is no longer active"
            )
            assert len(h.admin.calls) == calls


@pytest.mark.anyio
async def test_a_double_tap_on_a_raise_button_raises_once(tmp_path: Path, token_env: None) -> None:
    """The raise button stays (raising again is allowed), so a double tap on a slow phone
    raised twice: a second press within RAISE_AGAIN_AFTER is answered, not acted on.
    """
    async with harness(tmp_path) as h, h.service():
        _cfo_out_of_budget(h)
        await h.until(lambda: len(h.bot_messages()) == 1)
        (budget,) = h.bot_messages()
        raise_data = budget.buttons()[0][1]
        h.server.press_button(CHAT, budget.message_id, raise_data)
        await h.until(lambda: len(h.server.callback_answers) == 1)
        h.server.press_button(CHAT, budget.message_id, raise_data)
        await h.until(lambda: len(h.server.callback_answers) == 2)
        assert h.server.callback_answers[-1]["text"].startswith("raised a moment ago")
        assert h.admin.calls.count(("raise_budget", "cfo", 5.0)) == 1
        h.clock.advance(RAISE_AGAIN_AFTER)
        h.server.press_button(CHAT, budget.message_id, raise_data)
        await h.until(lambda: h.admin.calls.count(("raise_budget", "cfo", 5.0)) == 2)


@pytest.mark.anyio
async def test_a_refused_button_tells_why_and_changes_nothing(
    tmp_path: Path, token_env: None
) -> None:
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("proposal_created", "improver", proposal_id="p-missing", title="gone")
        await h.until(lambda: len(h.bot_messages()) == 1)
        msg = h.bot_messages()[0]
        h.server.press_button(CHAT, msg.message_id, msg.buttons()[0][1])
        await h.until(lambda: len(h.server.callback_answers) == 1)
        answer = h.server.callback_answers[0]
        assert answer["text"] == "no proposal 'p-missing'; pending proposals: p-7"
        assert answer["show_alert"] is True
        assert msg.edits == []
        assert len(msg.buttons()) == 2


@pytest.mark.anyio
async def test_buttons_pressed_in_another_chat_are_ignored(
    tmp_path: Path, token_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path) as h, h.service():
        h.bus.emit("proposal_created", "improver", proposal_id="p-7", title="x")
        await h.until(lambda: len(h.bot_messages()) == 1)
        msg = h.bot_messages()[0]
        # The stranger forwards the message and presses its button (same callback data).
        h.server.messages.append(
            SentMessage(
                chat_id=STRANGER,
                message_id=msg.message_id,
                text=msg.text,
                reply_markup=msg.reply_markup,
                date=msg.date,
            )
        )
        h.server.press_button(STRANGER, msg.message_id, msg.buttons()[0][1])
        await _command(h, "/help")
        assert h.admin.calls == []
        assert h.server.callback_answers == []
        assert "ignored a button press" in caplog.text


# ---------------------------------------------------------------------------------------
# Secrets and degraded modes


@pytest.mark.anyio
async def test_the_token_never_appears_in_logs_alerts_or_errors(
    tmp_path: Path,
    token_env: None,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    # httpx logs each request URL (token included) at INFO; make sure it really logs here.
    caplog.set_level(logging.DEBUG, logger="httpx")
    async with harness(tmp_path) as h:
        async with h.service():
            h.bus.emit("routine_failed", "scheduler", routine="r", reason=f"leak {TOKEN}")
            await _command(h, "/status")
            await h.until(lambda: len(h.bot_messages()) == 2)
            await h.server.go_down("502")
            h.bus.emit("task_quarantined", "roles", task_id="t", reason="x")
            for _ in range(5):
                h.clock.advance(2)
                await asyncio.sleep(0.01)
            await h.server.go_up()
            await h.until(lambda: len(h.bot_messages()) == 3, step=1.0)
            try:
                raise RuntimeError("wrapped") from ValueError(f"token {TOKEN} in a cause")
            except RuntimeError:
                logging.getLogger("some.library").exception("failed calling %s", TOKEN)
        # A token Telegram rejects: python-telegram-bot puts it into InvalidToken's message.
        rejecting = BotApiServer(token="1:some-other-token-that-is-right")
        async with rejecting:
            cfg = make_config(tmp_path, rejecting.url)
            svc = AlertService(cfg, tmp_path / "state2", bus=h.bus, admin=h.admin, clock=h.clock)
            ctx = Ctx()
            task = asyncio.create_task(svc.run(ctx))
            await h.until(lambda: any(c.status == 401 for c in rejecting.calls))
            await h.until(lambda: "rejected the bot token" in caplog.text)
            ctx.stopping.set()
            async with asyncio.timeout(10):
                await task
    out, err = capfd.readouterr()
    everything = caplog.text + out + err + "\n".join(m.text for m in h.server.messages)
    everything += "\n".join(str(c.params) for c in h.server.calls)
    assert TOKEN not in everything
    assert SECRET_HALF not in everything
    for record in caplog.records:
        assert SECRET_HALF not in record.getMessage()
    # The redaction was exercised, not vacuous: httpx URLs and the alert text had it.
    assert "bot<telegram-bot-token>/getUpdates" in caplog.text
    # (the alert and the /status answer race to Telegram: either may arrive first)
    assert any("leak <telegram-bot-token>" in m.text for m in h.bot_messages())
    assert "token <telegram-bot-token> in a cause" in caplog.text


@pytest.mark.anyio
async def test_without_telegram_settings_the_service_is_a_quiet_sink(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    async with harness(tmp_path) as h:
        cases = [
            (make_config(tmp_path, None, telegram=None), "no 'alerts.telegram' section"),
            (make_config(tmp_path, h.server.url), "$TELEGRAM_BOT_TOKEN is unset"),
        ]
        for cfg, reason in cases:
            caplog.clear()
            async with h.service(cfg, connected=False) as (svc, ctx):
                assert ctx.info["telegram"] == "off"
                assert reason in ctx.info["reason"]
                h.bus.emit("api_spend_limit", "roles", message="limit")
                h.bus.emit("restart", "companyd/agents", child="cfo", reason="error:x")
                await asyncio.sleep(0.05)
                assert svc.snapshot()["telegram"] == "off"
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1
            assert reason in warnings[0].getMessage()
        assert h.server.calls == []
        assert not (tmp_path / "state" / "alerts.sqlite").exists()


@pytest.mark.anyio
async def test_token_from_a_systemd_credential_and_chats_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "telegram_bot_token").write_text(TOKEN + "\n", encoding="utf-8")
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    monkeypatch.setenv("OPS_CHATS", f"{CHAT}, {CHAT2}")
    async with harness(tmp_path) as h:
        cfg = make_config(
            tmp_path,
            h.server.url,
            telegram={"chat_ids_env": "OPS_CHATS", "api_url": h.server.url},
        )
        async with h.service(cfg):
            h.bus.emit("api_spend_limit", "roles", message="limit")
            await h.until(lambda: len(h.server.messages) == 2)
        assert {m.chat_id for m in h.server.messages} == {CHAT, CHAT2}


# ---------------------------------------------------------------------------------------
# Command polling (issue 15 item 7)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (401, "401 Unauthorized"),
        (404, "404 Not Found"),
        (0, "network error"),
        (502, "network error: Bad Gateway"),
        (409, "409 Conflict"),
        (429, "429 flood control"),
    ],
)
async def test_command_polling_survives_getupdates_errors_and_says_so(
    tmp_path: Path,
    token_env: None,
    status: int,
    shown: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``getUpdates`` failing (a refused token, a wrong URL, a broken connection) while
    sendMessage works: polling is retried with backoff for as long as the service runs,
    the snapshot tells which half works, one alert says commands stopped, and commands work
    again once getUpdates does. python-telegram-bot's own polling gives up on a 401/404.
    """
    async with harness(tmp_path) as h, h.service() as (svc, _):
        await h.until(lambda: svc.snapshot()["commands"] == "ok")
        failing_from = h.clock.time()
        # Flood control as Telegram sends it for a poller: wait 30 s (each poll honours it).
        h.server.fail_next(10**6, status=status, method="getUpdates", retry_after=30)
        await h.until(lambda: svc.snapshot()["commands"] == "failing")
        snap = svc.snapshot()
        assert snap["telegram"] == "ok"  # sending still works
        assert shown in snap["commands_error"], snap
        assert snap["commands_since"] == pytest.approx(failing_from, abs=5)
        # Retried with backoff long after a library would have given up: ten minutes.
        await h.run_clock(600)
        await h.until(
            lambda: len([c for c in h.server.calls_of("getUpdates") if c.status == status]) >= 8,
            step=1.0,
        )
        await h.until(lambda: any("commands" in m.text for m in h.bot_messages()), step=1.0)
        stopped = [m.text for m in h.bot_messages() if "Telegram commands" in m.text]
        assert len(stopped) == 1, stopped
        assert "not reaching companyd" in stopped[0] and shown in stopped[0]
        assert svc.snapshot()["commands"] == "failing"
        # Ten minutes of failing polls are one or two log lines, not one per poll.
        polling = [
            r
            for r in caplog.records
            if r.levelno >= logging.WARNING and "polling" in r.getMessage()
        ]
        assert 1 <= len(polling) <= 2, [r.getMessage() for r in polling]
        # getUpdates works again: commands are answered, the snapshot and one alert say so.
        h.server.clear_failures()
        await h.until(lambda: svc.snapshot()["commands"] == "ok", step=1.0)
        assert svc.snapshot()["commands_since"] is None
        h.server.inject_command(CHAT, "/status")
        await h.until(lambda: any("📊 status" in m.text for m in h.bot_messages()))
        await h.until(
            lambda: any("commands work again" in m.text for m in h.bot_messages()), step=1.0
        )
        for _ in range(5):
            h.clock.advance(30)
            await asyncio.sleep(0.01)
        texts = [m.text for m in h.bot_messages()]
        assert len([t for t in texts if "Telegram commands" in t]) == 2, texts


@pytest.mark.anyio
async def test_a_refused_token_at_start_shows_both_halves_failing_with_the_reason(
    tmp_path: Path, token_env: None
) -> None:
    """``getMe`` refused (401) at start: neither half can work. The snapshot says so with the
    reason, instead of 'degraded' and 'starting' with no why.
    """
    from companyd.admin import telegram_health

    async with harness(tmp_path) as h:
        rejecting = BotApiServer(token="1:some-other-token-that-is-right")
        async with rejecting:
            cfg = make_config(tmp_path, rejecting.url)
            async with h.service(cfg, connected=False) as (svc, _):
                await h.until(lambda: svc.snapshot()["commands"] == "failing")
                snap = svc.snapshot()
                assert snap["telegram"] == "degraded"
                assert snap["reason"] == "bot token rejected by Telegram"
                assert snap["commands_error"] == "bot token rejected by Telegram"
                line = telegram_health(snap, h.clock.time(), "UTC")
                assert line.startswith(
                    "sending degraded (bot token rejected by Telegram) · commands failing since"
                )


@pytest.mark.anyio
async def test_an_update_that_cannot_be_read_is_skipped_not_retried_forever(
    tmp_path: Path, token_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    """An update python-telegram-bot cannot decode made every getUpdates fail on the same
    offset: commands were stuck for good. It is skipped (confirmed) with one warning, and
    the commands behind it are answered.
    """
    async with harness(tmp_path) as h, h.service() as (svc, _):
        await h.until(lambda: svc.snapshot()["commands"] == "ok")
        h.server.inject_update({"message": "not a message"})
        h.server.inject_update({"callback_query": {"id": "1"}})
        h.server.inject_command(CHAT, "/status")
        await h.until(lambda: any("📊 status" in m.text for m in h.bot_messages()), step=1.0)
        assert svc.snapshot()["commands"] == "ok"
        skipped = [r for r in caplog.records if "could not read" in r.getMessage()]
        assert len(skipped) == 2, [r.getMessage() for r in skipped]
