"""Budgets seen from the agents (issue 6 acceptance, through the real runtime): the real
daemon's agents, the real anthropic SDK and the loopback Messages API stand-in.

* 8 agents drawing on one $1.00 company budget at once, each looping on tool calls for as
  long as it may: the settled total is ≤ $1.00, the stand-in's own record of what it billed
  equals the ledger, and every agent's run ends ``budget_exhausted`` with the agent paused.
* The day rolling over in the company's time zone resumes an agent paused for its budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentkit import PerAgent, running_company, write_company
from companyd.admin import one_usd
from companyd.agents._calls import (
    STOP_CALL_GRACE,
)
from companyd.alerts._render_kinds import kind_spec, render
from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.llm._claude import ClaudeBackend
from companyd.llm._model import Usage
from companyd.spend import SpendBook
from companyd.testing.daemon import receiver
from companyd.testing.messages_api import (
    MessagesAPIServer,
    RecordedRequest,
    Reply,
    overloaded,
    reply_text,
    reply_tool_use,
    stall,
    usage_of,
)

pytestmark = pytest.mark.anyio

MTOK = Decimal(1_000_000)
# claude-sonnet-5-5 per docs/spend.md and ops-notes §3.6: in 2, write 5m 2.50, read 0.20, out 10
SONNET = {"in": Decimal(2), "w5": Decimal("2.50"), "w1": Decimal(4), "read": Decimal("0.20")}
SONNET_OUT = Decimal(10)


async def _stop_with_a_call_in_flight(d: Daemon, clock: ManualClock) -> None:
    """``d.stop()`` while a model call hangs: the stop gives the call STOP_CALL_GRACE on the
    daemon's clock (it is not over before), then ends it, promptly in real time too: not
    after the SDK's timeout times its attempts.
    """
    stopping = asyncio.ensure_future(d.stop())
    async with asyncio.timeout(10):  # the stop has begun the call's grace
        while clock.next_deadline() != clock.monotonic() + STOP_CALL_GRACE:
            assert not stopping.done(), stopping
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert not stopping.done()  # an answer within the grace would still be kept
    clock.advance(STOP_CALL_GRACE)
    # a deadline far below timeout × attempts (30 s), above STOP_CALL_GRACE (3 s)
    async with asyncio.timeout(STOP_CALL_GRACE + 4):
        await stopping


def billed(u: Usage) -> Decimal:
    """What the stand-in's usage costs at the published Sonnet 5.5 rates (computed here)."""
    return (
        u.input_tokens * SONNET["in"]
        + u.cache_write_5m_tokens * SONNET["w5"]
        + u.cache_write_1h_tokens * SONNET["w1"]
        + u.cache_read_tokens * SONNET["read"]
        + u.output_tokens * SONNET_OUT
    ) / MTOK


class Busy:
    """Every agent keeps calling tools (a new query each time) and bills a realistic share
    of its prompt as input and cache, and most of ``max_tokens`` as output.
    """

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, req: RecordedRequest) -> Reply:
        self.n += 1
        body = req.body
        prompt = len(json.dumps(body)) // 4  # ~4 bytes a token; never above the estimate
        usage = Usage(
            input_tokens=prompt // 2,
            cache_write_5m_tokens=prompt // 4,
            cache_read_tokens=prompt - prompt // 2 - prompt // 4,
            output_tokens=body["max_tokens"] * 3 // 4,
        )
        return reply_tool_use("search_nodes", {"query": f"q{self.n}"}, usage=usage)


async def test_eight_agents_on_one_dollar_stop_with_budget_exhausted(tmp_path: Path) -> None:
    slugs = ["ceo", *(f"agent{i}" for i in range(1, 8))]
    cfg = write_company(
        tmp_path,
        {s: ({} if s == "ceo" else {"reports_to": "ceo"}) for s in slugs},
        company={
            "name": "Test Co",
            "timezone": "UTC",
            "budget": {"daily_usd": 1.00, "monthly_usd": 30},
        },
        defaults={
            "model": {"primary": "claude-sonnet-5-5", "max_output_tokens": 2000},
            "limits": {"max_steps": 500, "max_cost_usd": 5, "max_seconds": "10m"},
            "heartbeat_seconds": 120,
        },
    )
    with MessagesAPIServer(responder=Busy()) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            async with asyncio.timeout(120):
                outs = await asyncio.gather(
                    *(d.ask(s, "Search as much as you can.") for s in slugs)
                )
            paused = d.staff.paused()
            spend = await d.spend("agent", "today")
            exhausted = d.bus.recent({"budget_exhausted"}, limit=100)
        served = srv.responses

    assert [o.status for o in outs] == ["budget_exhausted"] * 8, outs
    assert all("company's daily budget" in str(o.reason) for o in outs), outs
    assert all(o.steps >= 1 for o in outs)  # everyone worked before the money ran out
    assert set(paused) == set(slugs) and all(r.startswith("budget") for r in paused.values())
    assert len(exhausted) == 1
    # the stand-in's own record of what it billed, priced here, is the ledger's total ...
    stand_in = sum(billed(usage_of(m)) for m in served)
    ledger = Decimal(spend.total["cost_usd_exact"])
    assert spend.total["calls"] == len(served) == sum(o.steps for o in outs)
    assert ledger == stand_in
    # ... which never crossed the budget, and the budget was really used
    assert ledger <= Decimal("1.00")
    assert ledger > Decimal("0.80")


async def test_the_day_rolling_over_resumes_an_agent_paused_for_its_budget(
    tmp_path: Path,
) -> None:
    tz = ZoneInfo("Asia/Kathmandu")  # UTC+05:45: a UTC-midnight rollover would be caught out
    clock = ManualClock(start=datetime(2026, 11, 20, 23, 50, tzinfo=tz).timestamp())
    cfg = write_company(
        tmp_path,
        {"ceo": {"budget": {"daily_usd": 0.10}}},
        company={
            "name": "Test Co",
            "timezone": "Asia/Kathmandu",
            "budget": {"daily_usd": 50, "monthly_usd": 500},
        },
    )
    # $0.021 a call; a call's worst case is about $0.064, so two calls fit in a day
    usage = Usage(input_tokens=3000, output_tokens=1500)
    model = PerAgent(
        ceo=[reply_tool_use("search_nodes", {"query": f"q{i}"}, usage=usage) for i in range(9)]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            out = await d.ask("ceo", "Spend it all.")
            assert out.status == "budget_exhausted" and out.steps == 2, out
            assert "it resets at 2026-11-21 00:00 +0545" in str(out.reason)  # local, named
            assert "ceo" in d.staff.paused()
            clock.advance(5 * 60)  # 23:55 local: same day, still paused
            await asyncio.sleep(0.05)
            assert "ceo" in d.staff.paused()
            clock.advance(6 * 60)  # 00:01 local on the 21st (18:16 UTC on the 20th)
            async with asyncio.timeout(10):
                while "ceo" in d.staff.paused():
                    await asyncio.sleep(0.01)
            resumed = d.bus.recent({"agent_resumed"}, limit=10)
            again = await d.ask("ceo", "A new day.")
    assert [e.data["reason"] for e in resumed] == ["budget period rolled over (day)"]
    # a fresh day's budget: two more calls, then the ceiling again
    assert again.status == "budget_exhausted" and again.steps == 2, again
    assert srv.served == 4


async def test_an_agent_refused_by_the_spent_company_budget_is_paused_too(
    tmp_path: Path,
) -> None:
    # issue 15, item 3: once the company's budget is spent, an agent that has not yet made a
    # call of its own is paused (and resumed with the others), not left to fail its routine
    # at every fire.
    cfg = write_company(
        tmp_path,
        {"ceo": {}, "cfo": {"reports_to": "ceo"}},
        company={
            "name": "Test Co",
            "timezone": "UTC",
            "budget": {"daily_usd": 0.10, "monthly_usd": 30},
        },
    )
    usage = Usage(input_tokens=3000, output_tokens=1500)  # $0.021 a call
    model = PerAgent(
        ceo=[reply_tool_use("search_nodes", {"query": f"q{i}"}, usage=usage) for i in range(9)]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("ceo", "Spend it all.")
            assert out.status == "budget_exhausted", out
            assert "ceo" in d.staff.paused()
            refused = await d.ask("cfo", "Anything.")
            assert refused.status == "budget_exhausted", refused
            paused = d.staff.paused()
            assert "cfo" in paused and paused["cfo"].startswith("budget"), paused
            events = [e.data["agent"] for e in d.bus.recent({"agent_paused"}, limit=10)]
            assert events == ["ceo", "cfo"]
            await d.raise_budget(None, 1.0)
            assert d.staff.paused() == {}


async def test_calls_the_client_gave_up_on_count_as_billed(tmp_path: Path) -> None:
    # issue 15, item 1: the API is slower than the client's timeout and bills every request
    # it processed anyway. Each attempt (retries included) is reserved on its own and kept
    # as spent at its worst case, so what the provider billed stays within the cap (plus at
    # most one call's worst case), and one coalescing alert says how many calls timed out.
    cfg_path = write_company(
        tmp_path,
        {"ceo": {}},
        company={
            "name": "Test Co",
            "timezone": "UTC",
            "budget": {"daily_usd": 0.10, "monthly_usd": 30},
        },
        defaults={
            "model": {"primary": "claude-sonnet-5-5", "max_output_tokens": 500},
            "limits": {"max_steps": 30, "max_cost_usd": 5, "max_seconds": "10m"},
            "heartbeat_seconds": 120,
        },
    )
    cfg = load_config(cfg_path)
    with MessagesAPIServer(responder=Busy(), latency=0.6, bill_abandoned=True) as srv:
        backend = ClaudeBackend(
            api_key="test-key", base_url=srv.base_url, max_retries=2, timeout=0.15
        )
        async with Daemon(cfg, tmp_path / "state", backend=backend, oneoff=True) as d:
            outs = []
            async with asyncio.timeout(60):
                for _ in range(12):  # a routine firing again and again
                    outs.append(await d.ask("ceo", "Search."))
                    if outs[-1].status == "budget_exhausted":
                        break
            spend = await d.spend("agent", "today")
            unanswered = d.bus.recent({"spend_unanswered"}, limit=100)
            budget = await d.budget()
        # the stand-in finishes (and bills) what it was given: every request has its outcome
        async with asyncio.timeout(30):
            while any(r.outcome == "pending" for r in srv.requests):
                await asyncio.sleep(0.01)
        provider = sum(billed(usage_of(m)) for m in [*srv.responses, *srv.billed_abandoned])

    assert outs[-1].status == "budget_exhausted", outs
    attempts = len(srv.requests)
    assert attempts >= 2 and len(unanswered) == attempts
    worst = max(Decimal(str(e.data["worst_case_usd"])) for e in unanswered)
    ledger = Decimal(spend.total["cost_usd_exact"])
    assert provider <= Decimal("0.10") + worst, (provider, ledger)
    assert ledger >= provider and ledger <= Decimal("0.10")
    company = next(b for b in budget.budgets if b["agent"] is None and b["period"] == "day")
    assert company["used_usd"] == float(ledger)
    # the runs' own records count their unanswered attempts too: they say what the ledger says
    assert sum(o.cost_usd for o in outs) == pytest.approx(float(ledger), abs=1e-9)
    last = unanswered[-1].data
    assert last["calls"] == attempts
    assert last["message"] == (
        f"{attempts} calls timed out; up to {one_usd(last['total_worst_case_usd'], 4)} "
        "may have been billed"
    )
    rendered, _ = render("spend_unanswered", last, "spend", {}, ["ceo"])
    assert rendered.title.startswith(f"{attempts} calls timed out; up to $0.0")
    assert kind_spec("spend_unanswered").subject == ()  # one coalescing key: one alert


async def test_unanswered_attempts_count_against_the_runs_max_cost(tmp_path: Path) -> None:
    # Two attempts of the first step time out (kept as spent at their worst case: they may
    # have been billed), the third answers. The run's cost — what max_cost_usd is checked
    # against, what `runs` shows, what a resumed run replays — counts all three, as the
    # ledger does; before, it counted the answer alone and the run went on spending.
    cfg = load_config(
        write_company(
            tmp_path,
            {"ceo": {}},
            defaults={
                "model": {"primary": "claude-sonnet-5-5", "max_output_tokens": 500},
                "limits": {"max_steps": 30, "max_cost_usd": 0.02, "max_seconds": "10m"},
                "heartbeat_seconds": 120,
            },
        )
    )
    small = Usage(input_tokens=100, output_tokens=10)
    with MessagesAPIServer(responder=Busy()) as srv:
        srv.enqueue(
            stall(None),
            stall(None),
            reply_tool_use("search_nodes", {"query": "q"}, usage=small),
            reply_text("done", usage=small),
        )
        backend = ClaudeBackend(
            api_key="test-key", base_url=srv.base_url, max_retries=2, timeout=0.1
        )
        try:
            async with Daemon(cfg, tmp_path / "state", backend=backend, oneoff=True) as d:
                async with asyncio.timeout(30):
                    out = await d.ask("ceo", "Search.")
                spend = await d.spend("agent", "today")
                lost = d.bus.recent({"spend_unanswered"}, limit=10)
        finally:
            srv.release_stalls()
    assert len(lost) == 2
    forfeited = sum(Decimal(str(e.data["worst_case_usd"])) for e in lost)
    assert forfeited > Decimal("0.02")  # the two timeouts alone pass the run's limit
    assert out.status == "circuit_breaker" and "max_cost_usd" in str(out.reason), out
    assert out.steps == 1
    assert out.cost_usd == pytest.approx(float(spend.total["cost_usd_exact"]), abs=1e-9)


@contextlib.asynccontextmanager
async def _a_call_in_flight(
    tmp_path: Path, srv: MessagesAPIServer, max_retries: int = 2
) -> AsyncIterator[tuple[Daemon, ManualClock]]:
    """A daemon (one agent, ``ceo``, on a manual clock) whose model call to ``srv`` hangs:
    the call has reached the stand-in when the block starts; the ``ask`` behind it is
    cancelled at its end.
    """
    cfg = load_config(write_company(tmp_path, {"ceo": {}}))
    backend = ClaudeBackend(
        api_key="test-key", base_url=srv.base_url, max_retries=max_retries, timeout=10.0
    )
    clock = ManualClock()
    d = Daemon(cfg, tmp_path / "state", backend=backend, oneoff=True, clock=clock)
    await d.start()
    asker = asyncio.ensure_future(d.ask("ceo", "Search."))
    try:
        async with asyncio.timeout(10):
            await asyncio.to_thread(srv.wait_for_requests, 1)
        yield d, clock
    finally:
        asker.cancel()
        with contextlib.suppress(BaseException):
            await asker


async def test_a_stop_during_an_api_slowdown_makes_no_new_call_and_is_prompt(
    tmp_path: Path,
) -> None:
    # issue 15, item 2: once the stop has begun (STOPPING=1), the call in flight is given up
    # (its worst case kept as spent: it may have been billed) and nothing is retried, rather
    # than the stop waiting out the timeout and the retries (18 s before the fix).
    with MessagesAPIServer(responder=Busy(), latency=60, bill_abandoned=True) as srv:
        async with _a_call_in_flight(tmp_path, srv) as (d, clock):
            await _stop_with_a_call_in_flight(d, clock)
        unanswered = d.bus.recent({"spend_unanswered"}, limit=10)
        assert len(srv.requests) == 1  # no retry, no new call after the stop began
    assert [e.data["reason"] for e in unanswered] == ["cancelled while the request was in flight"]


async def test_the_stop_tells_systemd_which_runs_it_waits_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # during a stop the control socket answers only `stopping`: `systemctl status` (the
    # STATUS= line) and the journal say what the stop waits for
    with receiver() as r, MessagesAPIServer(responder=Busy(), latency=60) as srv:
        monkeypatch.setenv("NOTIFY_SOCKET", r.address)
        async with _a_call_in_flight(tmp_path, srv) as (d, clock):
            [run] = d.staff.in_flight()
            await _stop_with_a_call_in_flight(d, clock)
        said = [m for m in r.drain() if m.startswith("STOPPING=1")]
    assert said == [
        f"STOPPING=1\nSTATUS=stopping: bringing 1 run to a checkpoint: ceo ({run['run_id']})"
    ]


def test_the_stop_line_names_the_first_runs_and_counts_the_rest() -> None:
    from companyd.daemon._main import stop_status

    def run(agent: str) -> Any:
        return {"agent": agent, "run_id": f"run-{agent}"}

    assert stop_status([]) == "stopping: no run in flight"
    assert stop_status([run(a) for a in ("cfo", "coo", "cto", "ceo", "lawyer")]) == (
        "stopping: bringing 5 runs to a checkpoint: cfo (run-cfo), coo (run-coo), cto "
        "(run-cto) and 2 more"
    )


async def test_a_stop_while_a_retry_waits_to_be_sent_keeps_nothing_as_spent(
    tmp_path: Path,
) -> None:
    # The first attempt is answered 529 (nothing billed) with retry-after 20 s; the retry is
    # reserved and waits. A stop cuts that wait: the retry was never sent, so its
    # reservation is given back — before, it was kept as spent at its worst case and the
    # founder was told a call "timed out" that never left.
    cfg = load_config(write_company(tmp_path, {"ceo": {}}))
    clock = ManualClock()
    with MessagesAPIServer(responder=Busy()) as srv:
        srv.enqueue(overloaded(retry_after=20))
        backend = ClaudeBackend(
            api_key="test-key", base_url=srv.base_url, max_retries=2, timeout=10.0, clock=clock
        )
        d = Daemon(cfg, tmp_path / "state", backend=backend, oneoff=True, clock=clock)
        await d.start()
        asker = asyncio.ensure_future(d.ask("ceo", "Search."))
        try:
            async with asyncio.timeout(10):  # the backend waits out the retry-after
                while clock.next_deadline() != clock.monotonic() + 20:
                    await asyncio.sleep(0.01)
            await _stop_with_a_call_in_flight(d, clock)
        finally:
            asker.cancel()
            with contextlib.suppress(BaseException):
                await asker
        assert len(srv.requests) == 1  # the retry never left
    book = SpendBook(cfg, tmp_path / "state", bus=d.bus)
    async with book:
        rows = await book.ledger_rows()
    assert d.bus.recent({"spend_unanswered"}, limit=10) == []
    assert rows == []  # nothing kept as spent


async def test_waiting_for_room_in_the_budget_is_not_a_stall(tmp_path: Path) -> None:
    # The cfo's slow call holds most of the day's $0.06; the ceo's call fits what is spent
    # but not beside that reservation, so it waits for room (up to 15 min). Before, that
    # wait counted as no progress: past heartbeat_seconds the ceo's run was cancelled and
    # the agent crashed (twice: its task quarantined) over a busy moment.
    cfg = write_company(
        tmp_path,
        {"ceo": {"heartbeat_seconds": 10}, "cfo": {"reports_to": "ceo"}},
        company={
            "name": "Test Co",
            "timezone": "UTC",
            "budget": {"daily_usd": 0.06, "monthly_usd": 30},
        },
        defaults={
            "model": {"primary": "claude-sonnet-5-5", "max_output_tokens": 2000},
            "heartbeat_seconds": 1000,
        },
    )
    clock = ManualClock()
    model = PerAgent(cfo=[stall(None, then=reply_text("Thought it through."))])
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv, clock=clock) as d:
            cfo = asyncio.ensure_future(d.ask("cfo", "Think long."))
            ceo: asyncio.Future[Any] | None = None
            try:
                async with asyncio.timeout(10):
                    await asyncio.to_thread(srv.wait_for_requests, 1)
                    ceo = asyncio.ensure_future(d.ask("ceo", "Quick one."))
                    while not d.bus.recent({"run_started"}, limit=10)[1:]:
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(0.2)
                    assert not ceo.done() and (await d.budget()).in_flight == 1  # waiting
                    for _ in range(4):  # 12 s on the daemon's clock: past the heartbeat
                        clock.advance(3)
                        await asyncio.sleep(0.05)
                    srv.release_stalls()
                    outs = await asyncio.gather(cfo, ceo)
            finally:
                srv.release_stalls()
                for t in (cfo, ceo):
                    if t is not None and not t.done():
                        t.cancel()
            restarts = d.bus.recent({"restart"}, limit=10)
    assert [o.status for o in outs] == ["ok", "ok"], outs
    assert restarts == []


async def test_a_run_resumed_after_a_stop_keeps_the_cost_of_the_call_the_stop_cut(
    tmp_path: Path,
) -> None:
    # The stop cuts a call in flight (kept as spent at its worst case: it may have been
    # billed); the run resumes at the next start and finishes. Its cost must still count
    # that call, as the ledger does — before, the resumed run rebuilt its cost from the
    # journal's steps alone, and its max_cost_usd and `runs` forgot the cut call.
    cfg = load_config(write_company(tmp_path, {"ceo": {}}))
    model = PerAgent(ceo=[stall(None), reply_text("Done after the restart.")])
    with MessagesAPIServer(responder=model) as srv:
        try:
            async with _a_call_in_flight(tmp_path, srv, max_retries=0) as (d, clock):
                await _stop_with_a_call_in_flight(d, clock)
        finally:
            srv.release_stalls()
        (cut,) = d.bus.recent({"spend_unanswered"}, limit=10)
        backend = ClaudeBackend(api_key="test-key", base_url=srv.base_url, max_retries=0)
        later = ManualClock(start=clock.time())  # the same day
        async with Daemon(cfg, tmp_path / "state", backend=backend, oneoff=True, clock=later) as d2:
            async with asyncio.timeout(10):
                while not (done := d2.bus.recent({"run_finished"}, limit=10)):
                    await asyncio.sleep(0.02)
            spend = await d2.spend("agent", "today")
    assert done[0].data["run_id"] == cut.data["run_id"]
    ledger = float(spend.total["cost_usd_exact"])
    assert done[0].data["cost_usd"] == pytest.approx(ledger, abs=1e-9)
    assert ledger > cut.data["worst_case_usd"]  # the cut call and the answer after it


async def test_a_stop_ends_a_wait_for_room_in_the_budget_without_pausing_anyone(
    tmp_path: Path,
) -> None:
    # issue 15, item 2's neighbour: while the API is slow, one agent's call holds the
    # company's only room and another agent waits in reserve() for it. A stop ends that wait
    # at once: the waiting run stays journaled to resume, and nobody is paused for a budget
    # that only the stop's forfeited call used up.
    cfg_path = write_company(
        tmp_path,
        {"ceo": {}, "cfo": {"reports_to": "ceo"}},
        company={
            "name": "Test Co",
            "timezone": "UTC",
            "budget": {"daily_usd": 0.05, "monthly_usd": 30},
        },
        defaults={
            "model": {"primary": "claude-sonnet-5-5", "max_output_tokens": 1000},
            "limits": {"max_steps": 30, "max_cost_usd": 5, "max_seconds": "10m"},
            "heartbeat_seconds": 120,
        },
    )
    cfg = load_config(cfg_path)
    with MessagesAPIServer(responder=Busy(), latency=60, bill_abandoned=True) as srv:
        backend = ClaudeBackend(
            api_key="test-key", base_url=srv.base_url, max_retries=2, timeout=10.0
        )
        clock = ManualClock()
        d = Daemon(cfg, tmp_path / "state", backend=backend, oneoff=True, clock=clock)
        await d.start()
        askers = [asyncio.ensure_future(d.ask(a, "Search.")) for a in ("ceo", "cfo")]
        try:
            async with asyncio.timeout(10):
                await asyncio.to_thread(srv.wait_for_requests, 1)
                while len(d.staff.in_flight()) < 2:  # the other run waits for room
                    await asyncio.sleep(0.01)
            assert len(srv.requests) == 1
            await _stop_with_a_call_in_flight(d, clock)
        finally:
            for asker in askers:
                asker.cancel()
                with contextlib.suppress(BaseException):
                    await asker
        paused = d.staff.paused()
        assert len(srv.requests) == 1
    assert paused == {}


async def test_a_run_of_an_offline_daemon_is_offline_even_without_an_answer(
    tmp_path: Path,
) -> None:
    # the run's offline label came from its answers only: one refused before its first call
    # (here by its budget) was recorded as a run on Claude
    from companyd.llm import OfflineModel

    cfg = load_config(write_company(tmp_path, {"ceo": {"budget": {"daily_usd": 0.001}}}))
    async with Daemon(
        cfg, tmp_path / "state", backend=OfflineModel(), offline=True, oneoff=True
    ) as d:
        async with asyncio.timeout(30):
            out = await d.ask("ceo", "Plan the week.")
        failed = d.bus.recent({"run_failed"}, limit=10)
    assert out.status == "budget_exhausted" and out.steps == 0, out
    assert out.offline
    assert [e.data["offline"] for e in failed] == [True]
