"""How alerts read: every kind renders from any data, quiet hours, admin results."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companyd.alerts._render import MAX_TEXT, compose, split_text
from companyd.alerts._render_kinds import KINDS, agent_of, is_abnormal_exit, render
from companyd.alerts._render_status import (
    format_budget,
    format_jobs,
    format_result,
    format_spend,
    format_status,
)
from companyd.alerts._service import quiet_until
from companyd.config import QuietHoursSpec
from untraced import drawn_untraced

AGENTS = frozenset({"ceo", "cfo"})

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "agent",
        "child",
        "reason",
        "restarts",
        "scope",
        "period",
        "level",
        "used_usd",
        "limit_usd",
        "errors",
        "changes",
        "paused",
        "routine",
        "task_id",
        "proposal_id",
        "breaker",
        "value",
        "limit",
        "max_restarts",
        "within_seconds",
        "scheduled_for",
        "kept",
        "dropped",
        "fixed",
        "title",
        "summary",
        "factor",
        "message",
    ]
) | st.text(max_size=10)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from([*KINDS, "something_new"]),
    data=drawn_untraced(st.dictionaries(field_names, json_values, max_size=8)),
    counts=st.dictionaries(
        st.sampled_from(["restart", "child_exited", "x"]), st.integers(0, 10_000), max_size=3
    ),
    source=drawn_untraced(st.text(max_size=200)),
)
def test_every_kind_renders_from_any_data(
    kind: str, data: dict[str, Any], counts: dict[str, int], source: str
) -> None:
    rendered, buttons = render(kind, data, source, counts, AGENTS)
    text = compose(
        severity="warning",
        rendered=rendered,
        count=max(1, sum(counts.values())),
        first_ts=1_800_000_000.0,
        last_ts=1_800_000_060.0,
        company="Acme",
        tz=ZoneInfo("UTC"),
        footer=["✔ done"],
    )
    assert text.startswith("🟠 ")
    assert 0 < len(text) <= MAX_TEXT
    for b in buttons:
        assert b.label
        assert b.action in ("pause", "resume", "raise", "approve", "reject", "retry", "run_job")
        if b.action in ("pause", "resume"):
            assert b.arg in AGENTS


def test_split_text_cuts_at_line_ends_then_spaces_then_anywhere() -> None:
    assert split_text("short") == ["short"]
    assert split_text("aaaa\nbbbb\ncc", limit=10) == ["aaaa\nbbbb", "cc"]
    assert split_text("aaaa bbbb cc", limit=10) == ["aaaa bbbb", "cc"]
    assert split_text("x" * 25, limit=10) == ["x" * 10, "x" * 10, "x" * 5]
    # Beyond max_parts the last part is clipped, marked as cut.
    parts = split_text("x" * 100, limit=10, max_parts=2)
    assert parts[0] == "x" * 10 and parts[1].endswith("…") and len(parts[1]) == 10


@given(
    drawn_untraced(st.text(alphabet="ab \n😀", max_size=400)), st.integers(4, 50), st.integers(1, 5)
)
@settings(max_examples=300, deadline=None)
def test_split_text_parts_always_fit(text: str, limit: int, max_parts: int) -> None:
    parts = split_text(text, limit=limit, max_parts=max_parts)
    assert len(parts) <= max_parts
    assert all(p.strip() and len(p) <= limit for p in parts)


def test_compose_counts_and_clips() -> None:
    rendered, _ = render(
        "routine_failed",
        {"routine": "r", "reason": "x" * 10_000},
        "s",
        {"routine_failed": 3},
        AGENTS,
    )
    text = compose(
        severity="critical",
        rendered=rendered,
        count=3,
        first_ts=1_800_000_000.0,
        last_ts=1_800_000_000.0 + 125,
        company="Acme",
        tz=ZoneInfo("UTC"),
    )
    assert text.startswith("🔴 routine r failed 3 times")
    assert "×3 in 2 min (first 08:00, last 08:02)" in text
    assert "Acme · 08:00 UTC, 15 Jan" in text
    huge, _ = render("config_rejected", {"errors": ["e" * 300] * 5}, "", {}, AGENTS)
    long_text = compose(
        severity="warning",
        rendered=huge,
        count=1,
        first_ts=0.0,
        last_ts=0.0,
        company="A",
        tz=ZoneInfo("UTC"),
        footer=["f" * 5000],
    )
    assert len(long_text) == MAX_TEXT
    assert long_text.endswith("\n…")


@pytest.mark.parametrize(
    ("reason", "abnormal"),
    [
        ("normal", False),
        ("shutdown", False),
        ("{shutdown, reload}", False),
        ("shutdown:auto_shutdown", False),
        ("error:RuntimeError('x')", True),
        ("killed", True),
        (None, False),
        (3, True),
    ],
)
def test_normal_exits_are_not_crashes(reason: Any, abnormal: bool) -> None:
    assert is_abnormal_exit(reason) is abnormal


def test_agent_of_reads_supervisor_child_ids() -> None:
    assert agent_of({"agent": "cfo"}, AGENTS) == "cfo"
    assert agent_of({"child": "cfo"}, AGENTS) == "cfo"
    assert agent_of({"child": "agent:cfo"}, AGENTS) == "cfo"
    assert agent_of({"child": "agents/finance/cfo"}, AGENTS) == "cfo"
    assert agent_of({"child": "memory"}, AGENTS) is None
    assert agent_of({}, AGENTS) is None


def _ts(iso: str, tz: str = "UTC") -> float:
    return datetime.fromisoformat(iso).replace(tzinfo=ZoneInfo(tz)).timestamp()


@pytest.mark.parametrize(
    ("start", "end", "now", "tz", "until"),
    [
        ("23:00", "07:00", "2027-01-15T23:30", "UTC", "2027-01-16T07:00"),
        ("23:00", "07:00", "2027-01-16T03:00", "UTC", "2027-01-16T07:00"),
        ("23:00", "07:00", "2027-01-16T07:00", "UTC", None),
        ("23:00", "07:00", "2027-01-16T12:00", "UTC", None),
        ("09:00", "17:00", "2027-01-16T09:00", "UTC", "2027-01-16T17:00"),
        ("09:00", "17:00", "2027-01-16T17:30", "UTC", None),
        ("08:00", "08:00", "2027-01-16T08:00", "UTC", None),
        # The night the clocks go forward in Berlin: the window still ends at 07:00 local.
        ("22:00", "07:00", "2027-03-27T23:30", "Europe/Berlin", "2027-03-28T07:00"),
    ],
)
def test_quiet_until(start: str, end: str, now: str, tz: str, until: str | None) -> None:
    spec = QuietHoursSpec(start=start, end=end)
    got = quiet_until(_ts(now, tz), spec, ZoneInfo(tz))
    assert got == (None if until is None else _ts(until, tz))


def test_berlin_window_end_is_the_local_morning() -> None:
    spec = QuietHoursSpec(start="22:00", end="07:00")
    got = quiet_until(_ts("2027-03-27T23:30", "Europe/Berlin"), spec, ZoneInfo("Europe/Berlin"))
    assert got is not None
    assert datetime.fromtimestamp(got, UTC).isoformat() == "2027-03-28T05:00:00+00:00"
    assert quiet_until(0.0, None, ZoneInfo("UTC")) is None


def test_format_result_is_compact_for_a_phone() -> None:
    text = format_result(
        "📊 status",
        {
            "agents": {"cfo": {"state": "running", "restarts": 2}, "ceo": {"state": "paused"}},
            "spend_today_usd": 1.5,
            "next_fire_ts": 1_800_000_000,
            "success_rate": 0.857,
            "models": ["claude-sonnet-5-5", "claude-haiku-5-5"],
            "runs": [{"id": "r-1", "agent": "cfo", "cost_usd": 0.1}],
            "empty": [],
            "ok": True,
            "nothing": None,
        },
    )
    assert text.splitlines() == [
        "📊 status",
        "agents:",
        "  cfo:",
        "    state: running",
        "    restarts: 2",
        "  ceo:",
        "    state: paused",
        "spend_today_usd: $1.50",
        "next_fire_ts: 2027-01-15 08:00 UTC",
        "success_rate: 86%",
        "models: claude-sonnet-5-5, claude-haiku-5-5",
        "runs:",
        "  • id=r-1, agent=cfo, cost_usd=$0.10",
        "empty: (none)",
        "ok: yes",
        "nothing: –",
    ]
    long = format_result("t", {"rows": [{"i": i} for i in range(500)]})
    assert long.splitlines()[-1] == "… 422 more lines"


def test_status_for_a_phone_is_the_headline_what_is_wrong_and_what_comes_next() -> None:
    def worker(id: str, state: str = "running", restarts: int = 0, **kw: Any) -> dict[str, Any]:
        return {"id": id, "kind": "worker", "state": state, "restarts": restarts, **kw}

    status = {
        "now": 1_800_000_000.0,
        "daemon": {"state": "running", "uptime_s": 7380.0, "offline": True},
        "company": {"name": "Northwind Solo"},
        "agents": {"total": 3, "running": 1, "paused": 1},
        "tree": {
            "id": "companyd",
            "kind": "supervisor",
            "state": "running",
            "restarts": 0,
            "children": [
                worker("memory"),
                {
                    "id": "agents",
                    "kind": "supervisor",
                    "state": "running",
                    "restarts": 1,
                    "children": [
                        worker("ceo"),
                        worker("cfo", "paused", pause_reason="operator"),
                        worker("accountant", "restarting", 3, last_exit="error:RuntimeError('x')"),
                    ],
                },
            ],
        },
        "runs_in_flight": [
            {
                "agent": "ceo",
                "run_id": "run-1",
                "routine": "weekly",
                "elapsed_s": 72,
                "cost_usd": 0.02,
            }
        ],
        "spend": {
            "today": {"used_usd": 1.23, "limit_usd": 10.0},
            "month": {"used_usd": 12.34, "limit_usd": 200.0},
        },
        "routines": [
            {"routine": "later", "agent": "cfo", "next_fire": 1_800_090_000.0},
            {"routine": "soon", "agent": "ceo", "next_fire": 1_800_003_600.0, "last_outcome": "ok"},
            {"routine": "off", "agent": "ceo", "next_fire": None},
        ],
    }
    assert format_status(status).splitlines() == [
        "📊 Northwind Solo — running, up 2.0 h · OFFLINE model",
        "1/3 agents up, 1 paused · 1 run in flight · $1.23 of $10.00 today",
        "not plainly running:",
        "  agents: running, restarted 1×",
        "  cfo: paused (operator)",
        "  accountant: restarting, restarted 3×, last exit: error:RuntimeError('x')",
        "runs in flight:",
        "  ▶ ceo run-1 weekly 72 s $0.02",
        "this month: $12.34 of $200.00",
        "next routines:",
        "  2027-01-15 09:00 UTC soon → ceo (last: ok)",
        "  2027-01-16 09:00 UTC later → cfo",
        "  not scheduled off → ceo",
    ]
    # in a company in Berlin the next fires are on its clock, named as an alert's footer does
    berlin = {**status, "company": {"name": "Northwind Solo", "timezone": "Europe/Berlin"}}
    assert "  2027-01-15 10:00 CET soon → ceo (last: ok)" in format_status(berlin).splitlines()
    # Telegram's two halves, when one of them is not fine (issue 15 item 7)
    status["now"] = 1_800_000_000.0
    status["alerts"] = {
        "telegram": "ok",
        "commands": "failing",
        "commands_since": 1_800_000_000.0 - 600,
        "commands_error": "404 Not Found",
    }
    assert (
        "telegram: sending ok · commands failing since 07:50 (404 Not Found)"
        in format_status(status).splitlines()
    )
    status["alerts"] = {"telegram": "ok", "commands": "ok"}
    assert not any(line.startswith("telegram") for line in format_status(status).splitlines())
    # the other channels (issue 30): a line only when one of them is not fine
    ok = {"name": "email", "state": "ok", "since": None, "error": ""}
    status["alerts"] = {"telegram": "ok", "commands": "ok", "channels": [ok]}
    assert not any(line.startswith("channels") for line in format_status(status).splitlines())
    failing = {"name": "slack", "state": "failing", "since": 1_800_000_000.0 - 600, "error": "x"}
    status["alerts"] = {"telegram": "ok", "commands": "ok", "channels": [ok, failing]}
    assert (
        "channels: email ok · slack failing since 07:50 (x)" in format_status(status).splitlines()
    )
    # anything that is not the daemon's status shape is shown as it is
    assert format_status({"spend_today_usd": 1.5}) == "📊 status\nspend_today_usd: $1.50"


status_nodes = st.recursive(
    st.fixed_dictionaries(
        {},
        optional=dict.fromkeys(
            ("id", "state", "restarts", "last_exit", "pause_reason"), json_values
        ),
    ),
    lambda inner: st.fixed_dictionaries(
        {"children": st.lists(inner, max_size=4) | json_values},
        optional={"id": json_values, "state": st.sampled_from(["running", "restarting"])},
    ),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None)
@given(
    status=drawn_untraced(
        st.dictionaries(
            st.sampled_from(["tree", "daemon", "company", "runs_in_flight", "spend", "routines"])
            | st.text(max_size=8),
            json_values,
            max_size=6,
        )
    ),
    tree=drawn_untraced(status_nodes),
)
def test_status_for_a_phone_renders_from_any_json(status: dict[str, Any], tree: Any) -> None:
    for candidate in (status, {**status, "tree": tree}):
        text = format_status(candidate)
        assert 0 < len(text) <= MAX_TEXT


@settings(max_examples=100, deadline=None)
@given(
    routines=drawn_untraced(
        st.lists(st.dictionaries(st.text(max_size=12) | field_names, json_values), max_size=5)
        | json_values
    )
)
def test_jobs_for_a_phone_renders_from_any_json(routines: Any) -> None:
    text = format_jobs({"routines": routines})
    assert text.startswith("⏰ routines") and len(text) <= MAX_TEXT


@settings(max_examples=100, deadline=None)
@given(
    rows=drawn_untraced(
        st.lists(st.dictionaries(st.text(max_size=12) | field_names, json_values), max_size=5)
        | json_values
    ),
    other=drawn_untraced(json_values),
)
def test_spend_and_budgets_for_a_phone_render_from_any_json(rows: Any, other: Any) -> None:
    for text in (
        format_spend({"rows": rows, "total": other, "period": other, "by": other}),
        format_spend(other),
        format_budget({"budgets": rows, "timezone": other}),
        format_budget(other),
    ):
        assert text.startswith(("💵", "💰")) and len(text) <= MAX_TEXT


def test_spend_says_what_is_simulated_and_budgets_what_has_none_of_its_own() -> None:
    # an offline daemon's spend (no money spent) in the CLI table's precision, the part an
    # offline run makes of a mixed total; a scope with no budget says what it used, and why
    simulated = {"calls": 2, "cost_usd": 0.01, "cost_usd_exact": "0.0053", "simulated_usd": 0.0053}
    on_claude = {"calls": 1, "cost_usd": 0.02, "cost_usd_exact": "0.0204", "simulated_usd": 0.0}
    total = {"calls": 3, "cost_usd": 0.03, "cost_usd_exact": "0.0257", "simulated_usd": 0.0053}
    spend = {
        "by": "agent",
        "period": {"label": "today", "from": "2026-11-29", "to": "2026-11-29"},
        "rows": [{"key": "ceo", **simulated}, {"key": "cfo", **on_claude}],
        "total": {"key": None, **total},
    }
    assert format_spend(spend).splitlines() == [
        "💵 spend by agent, today (2026-11-29)",
        "• ceo — $0.0053 (simulated) · 2 calls",
        "• cfo — $0.0204 · 1 call",
        "total $0.0257 ($0.0053 simulated) · 3 calls",
    ]
    budgets = {
        "timezone": "Europe/Berlin",
        "budgets": [
            {
                "scope": "routine:digest",
                "agent": None,
                "period": None,
                "limit_usd": None,
                "used_today_usd": 0.25,
                "used_month_usd": 3.0,
                "reserved_usd": 0.0,
                "note": "no budget of its own: its agent's applies",
            }
        ],
    }
    assert format_budget(budgets).splitlines() == [
        "💰 budgets (Europe/Berlin)",
        "• routine:digest: today $0.25 · month $3.00 (no budget of its own: its agent's applies)",
    ]


def _text(kind: str, data: dict[str, Any], source: str = "src", **counts: int) -> str:
    rendered, buttons = render(kind, data, source, counts or {kind: 1}, AGENTS)
    labels = " | ".join(b.label for b in buttons)
    text = compose(
        severity="warning",
        rendered=rendered,
        count=1,
        first_ts=1_800_000_000.0,
        last_ts=1_800_000_000.0,
        company="Acme",
        tz=ZoneInfo("UTC"),
    )
    return f"{text}\n[{labels}]"


def test_the_shapes_the_supervisor_sends() -> None:
    """Field names as companyd.supervision._supervisor emits them (docs/events.md)."""
    exited = {
        "child": "cfo",
        "restart_type": "permanent",
        "action": "restart",
        "reason": "error:RuntimeError('boom')",
        "exception": "RuntimeError",
        "message": "boom",
    }
    restart = {
        "child": "cfo",
        "strategy": "one_for_one",
        "restarts": 2,
        "max_restarts": 3,
        "max_seconds": 60.0,
        "group": ["cfo"],
    }
    merged = {**exited, **restart}
    text = _text("child_exited", merged, "companyd/agents/finance", child_exited=1, restart=1)
    assert "cfo crashed and was restarted" in text
    assert "reason: error:RuntimeError('boom')" in text
    assert "restarts in the last 60 s: 2 (the supervisor gives up above 3)" in text
    assert "[⏸ Pause cfo]" in text
    # five crashes in the story, the supervisor's count 1: its supervisor was restarted
    # (it gave up) and counts again — said so, not a contradiction
    looping = _text("child_exited", {**merged, "restarts": 1}, "companyd/agents/finance", restart=5)
    assert "cfo is crash-looping: 5 crashes" in looping
    assert (
        "restarts in the last 60 s: 1 (counted again since its supervisor was restarted; it "
        "gives up above 3)"
    ) in looping

    temporary = {**exited, "restart_type": "temporary", "action": "none"}
    assert "cfo crashed and was not restarted (temporary)" in _text("child_exited", temporary)

    gave_up = {
        "child": "finance",
        "restart_type": "transient",
        "action": "none",
        "reason": "error:SupervisorGaveUp(...)",
        "gave_up": True,
        "message": "sub-supervisor 'finance' gave up and, being transient, is not "
        "restarted (OTP rule): its subtree stays down until restarted by hand",
    }
    assert "its subtree stays down" in _text("child_exited", gave_up)

    mi = {
        "child": "cfo",
        "restarts": 4,
        "max_restarts": 3,
        "max_seconds": 60.0,
        "reason": "error:RuntimeError('boom')",
        "message": "4 restarts within 60 s exceed max_restarts=3; stopping every child",
    }
    text = _text("max_intensity", mi, "companyd/agents/finance")
    assert "supervisor companyd/agents/finance gave up" in text
    assert "4 restarts in 60 s — more than its limit of 3" in text

    text = _text("child_start_failed", {"child": None, "phase": "init", "reason": "error:X"})
    assert "a supervisor failed to start" in text
    assert "while: init" in text


def test_the_shapes_the_daemon_sends() -> None:
    started = {
        "pid": 42,
        "version": "0.1.0",
        "agents": 8,
        "routines": 5,
        "offline": True,
        "company": "Acme",
    }
    text = _text("daemon_started", started, "daemon")
    assert "companyd started" in text
    assert "8 agents, 5 routines" in text
    # a first company's first message: "1 agent, 1 routine", not "1 agents, 1 routines"
    one = _text("daemon_started", {**started, "agents": 1, "routines": 1}, "daemon")
    assert "\n1 agent, 1 routine\n" in one, one
    assert "offline mode" in text
    reloaded = {
        "started": ["cmo"],
        "stopped": [],
        "restarted": ["cfo"],
        "unchanged": 6,
        "routines": {"added": ["weekly"]},
    }
    text = _text("daemon_reloaded", reloaded, "daemon")
    assert "agents started: cmo" in text
    assert "agents restarted: cfo" in text
    assert "agents stopped" not in text
    assert "weekly" in text
    # an agent the reload could not start: the alert says so, and why (it said only "agents
    # started: analyst" — the founder was told of an agent that never ran)
    failed = {**reloaded, "started": ["analyst"], "failures": ["analyst: no api key"]}
    text = _text("daemon_reloaded", failed, "daemon")
    assert "company.yaml reloaded, 1 change not applied" in text, text
    assert "not applied: analyst: no api key" in text, text
    assert "not applied" not in _text("daemon_reloaded", reloaded, "daemon")
    # a worst case under a hundredth of a cent read "up to $0.0000" (`:.4f`): a run's cost
    # as `companyd runs` prints it (alerts._values.run_cost)
    small = {"calls": 1, "total_worst_case_usd": 0.00002}
    assert "1 call timed out; up to $0.00002 may have been billed" in _text(
        "spend_unanswered", small, "spend"
    )
    rejected = {
        "file": "/etc/companyd/company.yaml",
        "errors": [f"e{i}" for i in range(10)],
        "count": 12,
    }
    text = _text("config_rejected", rejected, "daemon")
    assert "• e4" in text
    assert "• e5" not in text
    assert "… and 7 more — run `companyd validate`" in text
    assert "companyd is stopping" in _text("daemon_stopping", {"pid": 1, "reason": "signal"})


def test_the_shapes_the_agent_runtime_sends() -> None:
    quarantined = {
        "agent": "cfo",
        "task_id": "t-9",
        "run_id": "r-1",
        "routine": "weekly",
        "crashes": 3,
        "errors": ["KeyError('a')", "KeyError('b')"],
        "prompt": "Summarise the week",
    }
    text = _text("task_quarantined", quarantined, "agent/cfo")
    assert "task t-9 quarantined after 3 crashes" in text
    assert "last error: KeyError('b')" in text
    assert "task: Summarise the week" in text
    assert "[🔁 Retry task]" in text
    breaker = {
        "agent": "cfo",
        "task_id": "t",
        "run_id": "r-2",
        "routine": None,
        "limit": "max_steps",
        "reason": "max_steps: 21 steps > 20",
    }
    text = _text("circuit_breaker", breaker, "agent/cfo")
    assert "circuit breaker stopped a run of cfo" in text
    assert "max_steps\n" in text
    assert "reason: max_steps: 21 steps > 20" in text
    proposal = {
        "proposal_id": "p-3",
        "agent": "accountant",
        "proposer": "improver",
        "reason": "cut cost",
        "diff": "-model: a\n+model: b",
    }
    text = _text("proposal_created", proposal, "improver")
    assert "proposal p-3 awaits approval" in text
    assert "for: accountant" in text
    assert "from: improver" in text
    assert "why: cut cost" in text
    assert "+model: b" in text
    assert "[✅ Approve | ✖ Reject]" in text
    failed = {
        "agent": "cfo",
        "status": "failed",
        "reason": "API 500",
        "task_id": "t",
        "run_id": "r-3",
        "routine": None,
        "cost_usd": 0.1,
        "steps": 2,
    }
    assert "a run of cfo failed" in _text("run_failed", failed, "agent/cfo")


def test_the_shapes_memory_and_reload_send() -> None:
    """Field names as the memory owner and the daemon emit them (docs/events.md)."""
    repaired = _text(
        "memory_repaired",
        {
            "path": "/var/lib/companyd/memory.jsonl",
            "summary": "1 unusable line quarantined",
            "quarantined_lines": 1,
            "dropped_lines": 1,
            "merged_entities": 0,
            "corrupt_file": "/var/lib/companyd/memory.jsonl.corrupt",
        },
    )
    assert "1 unusable line quarantined" in repaired
    assert "quarantined_lines: 1" in repaired and "merged_entities" not in repaired
    assert "kept in: /var/lib/companyd/memory.jsonl.corrupt" in repaired
    reloaded = _text(
        "daemon_reloaded",
        {
            "started": ["analyst"],
            "stopped": [],
            "restarted": ["cfo"],
            "unchanged": 6,
            "routines": {"added": ["payroll"], "removed": [], "changed": [], "unchanged": ["x"]},
        },
    )
    assert "agents started: analyst" in reloaded and "agents restarted: cfo" in reloaded
    assert "agents stopped" not in reloaded
    assert "routines added: payroll" in reloaded and "unchanged" not in reloaded


def test_a_result_too_long_for_its_approval_message_says_so_and_where_to_read_it() -> None:
    """Review of the desk: the approval message cut a long result at 3,000 characters with
    only an ellipsis, so the founder could approve a report whose end they never saw.
    """
    data = {
        "item_id": "rs-1",
        "routine": "month-end",
        "agent": "cfo",
        "run_id": "run-abc",
        "answer": "x" * 5000,
        "cost_usd": 0.01,
    }
    rendered, buttons = render("founder_result_for_approval", data, "cfo", {}, AGENTS)
    text = "\n".join(rendered.lines)
    assert "only the first 3,000 of 5,000 characters are shown" in text
    assert "companyd runs show run-abc" in text
    assert [b.label for b in buttons] == ["✅ Approve", "✏️ Request changes", "✖ Reject"]
    short, _ = render("founder_result_for_approval", {**data, "answer": "ok"}, "cfo", {}, AGENTS)
    assert not any("only the first" in line for line in short.lines)
    # its cost as its result's messages show it: a run's precision, simulated when offline
    assert "cost $0.0100 · run run-abc" in short.lines
    offline, _ = render("founder_result_for_approval", {**data, "offline": True}, "cfo", {}, AGENTS)
    assert "cost $0.0100 (simulated) · run run-abc" in offline.lines


def test_a_finished_run_says_its_cost_as_money_and_no_routine_when_it_was_asked() -> None:
    """``run_finished`` of an ``ask`` (no routine) and of a tiny cost: no ``routine: ?``, no
    ``cost_usd: 6e-05`` — money printed as the spend CLI prints it — and no ``offline:
    False`` (docs/alerts.md).
    """
    asked = {
        "status": "ok",
        "agent": "cfo",
        "task_id": "t-1",
        "run_id": "r-1",
        "routine": None,
        "cost_usd": 6e-05,
        "steps": 1,
        "models": ["claude-haiku-5-5"],
        "offline": False,
    }
    text = _text("run_finished", asked, "agent/cfo")
    assert "routine" not in text, text
    assert "e-05" not in text, text
    # exact to a millionth: never "$0.00", nor "$0.0001"
    assert "cost_usd: $0.00006\n" in text, text
    scheduled = _text("run_finished", {**asked, "routine": "daily-post", "cost_usd": 0.7})
    assert "routine: daily-post" in scheduled
    assert "$0.70" in scheduled and "0.7\n" not in scheduled, scheduled
    # a flag that is off says nothing; one that is on is worded as daemon_started words it
    assert "offline" not in text and "False" not in text, text
    offline = _text("run_finished", {**asked, "offline": True}, "agent/cfo")
    assert "offline mode: no model is called\n" in offline and "True" not in offline, offline


def test_a_budget_alert_says_the_share_spent_not_the_level_crossed() -> None:
    """One call that crossed 50%, 80% and 100% at once (only the highest level is published)
    is told as what was spent: 141%, not "100%" (docs/alerts.md).
    """
    over = {
        "scope": "agent",
        "agent": "writer",
        "period": "day",
        "level": 1.0,
        "used_usd": 0.707,
        "limit_usd": 0.5,
    }
    text = _text("budget_threshold", over, "spend")
    assert "141%" in text, text
    assert "100%" not in text, text
    assert "$0.707 of $0.50" in text, text  # each exact: not "$0.71", nor padded
    # without the amounts, the level is all there is to say
    assert "has used 80%" in _text("budget_threshold", {**over, "level": 0.8, "used_usd": None})


def test_a_sub_supervisor_giving_up_is_told_in_its_parents_story_of_it() -> None:
    from companyd.alerts._render_kinds import joining_data, story_key

    gave_up = story_key("max_intensity", "companyd/agents/finance", {"child": "cfo"})
    assert gave_up == story_key("child_exited", "companyd/agents", {"child": "finance"})
    assert gave_up == story_key("restart", "companyd/agents", {"child": "finance"})
    assert gave_up != story_key("restart", "companyd/agents", {"child": "operations"})
    # the root has no parent to tell it: its giving up is a story of its own
    assert story_key("max_intensity", "companyd", {"child": "agents"}) == "max_intensity|companyd|"
    # the parent's events add what it did, never its own figures over the supervisor's
    restart = {"child": "finance", "restarts": 1, "max_restarts": 3, "group": ["finance"]}
    assert joining_data("max_intensity", "restart", restart) == {}
    exited = {"child": "finance", "action": "none", "restart_type": "transient", "reason": "x"}
    assert joining_data("max_intensity", "child_exited", exited) == {
        "parent_action": "none",
        "restart_type": "transient",
    }
    assert joining_data("restart", "child_exited", exited) == exited  # any other story


def test_a_commands_answer_is_its_message_and_quarantine_a_line_per_task() -> None:
    # as the CLI prints an answer: its message when it has one, not every field under it
    from companyd.alerts._ops import _told
    from companyd.alerts._render_status import format_quarantine

    paused = {"agent": "cfo", "paused": True, "message": "paused cfo: it finishes its run"}
    assert _told("⏸", "paused cfo", paused) == "⏸ paused cfo: it finishes its run"
    assert _told("⏸", "paused cfo", {"agent": "cfo", "paused": True}).splitlines() == [
        "⏸ paused cfo",
        "agent: cfo",
        "paused: yes",
    ]
    assert format_quarantine({"tasks": []}) == "🧊 no quarantined tasks"
    task = {"id": "task-1", "agent": "cfo", "prompt": "p", "source": "operator", "created": 0}
    stuck = {**task, "state": "quarantined", "crashes": 3, "errors": ["a", "KeyError: 'x'"]}
    assert format_quarantine({"tasks": [stuck]}).splitlines() == [
        "🧊 quarantined tasks (a task whose runs crashed its agent again and again)",
        "• task-1 — cfo, 3 crash(es): KeyError: 'x'",
        "run one again: /retry TASK_ID",
    ]
