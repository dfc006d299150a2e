"""The Runs, Routines, Spend, Memory, Inbox and Config pages against a real daemon in process
(offline model, real journal, ledger, memory file, desk and proposals): what each shows,
its filters, the CSV export, actions through Admin recorded "via dashboard", a POST without
the CSRF token refused, and no configured secret on any page.
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.requests import Request

from companyd.admin._blocks import BudgetRow
from companyd.clock import ManualClock, clock_time
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.dashboard._pages.inbox import waiting
from companyd.dashboard._pages.spend import CSV_COLUMNS
from companyd.desk import ItemKind
from companyd.llm._offline import OfflineModel
from companyd.runs import Task, new_id
from companyd.scheduler import _guards as guards
from companyd.testing.daemon import short_dir

from .pagekit import COMPANY, KEY_VAR, SECRET, Page, Site, running_site

pytestmark = pytest.mark.anyio

PAGES = (
    "/",
    "/today",
    "/runs",
    "/routines",
    "/routines/weekly-review",
    "/spend",
    "/memory",
    "/memory/entity?name=Acme",
    "/inbox",
    "/config",
)


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(KEY_VAR, SECRET)
    with short_dir() as d:
        yield d


@pytest.fixture
async def site(work: Path) -> AsyncIterator[Site]:
    async with running_site(work) as s:
        yield s


async def remember_acme(site: Site) -> None:
    await site.daemon.memory.call(
        "create_entities",
        {
            "entities": [
                {"name": "Acme", "entityType": "customer", "observations": ["pays 400 EUR"]},
                {"name": "Bob", "entityType": "person", "observations": ["CFO of Acme"]},
            ]
        },
        by="cfo",
    )
    await site.daemon.memory.call(
        "create_relations",
        {"relations": [{"from": "Bob", "to": "Acme", "relationType": "works_at"}]},
        by="cfo",
    )


async def test_runs_list_filters_and_a_transcript(site: Site) -> None:
    cfo = await site.daemon.ask("cfo", "What did we spend this week?")
    ceo = await site.daemon.ask("ceo", "How are we doing?")
    every = await site.get("/runs")
    assert cfo.run_id in every.text and ceo.run_id in every.text
    only_cfo = await site.get("/runs?agent=cfo&since=1h&status=ok")
    assert cfo.run_id in only_cfo.text and ceo.run_id not in only_cfo.text
    assert '<option value="cfo" selected>' in only_cfo.text  # the form keeps the filters
    assert ceo.run_id not in (await site.get("/runs?routine=weekly-review")).text
    bad = await site.get("/runs?status=bogus", 400)
    assert "unknown status &#39;bogus&#39;; choose one of running, ok" in bad.text
    since = await site.get("/runs?since=last+tuesday", 400)
    assert "duration back from now (90m, 24h, 7d, 2w)" in since.text

    shown = await site.get(f"/runs/{cfo.run_id}")
    assert "What did we spend this week?" in shown.text  # the task
    assert "<strong>Model</strong>" in shown.text and cfo.answer.strip()[:40] in shown.text
    assert 'href="/agents/cfo"' in shown.text
    missing = await site.get("/runs/run-000000000000", 404)
    assert "no run &#39;run-000000000000&#39;" in missing.text


async def test_run_now_of_a_routine_needing_approval_says_its_result_waits(work: Path) -> None:
    """Issue 28: Run now of a routine with ``approval: required`` answers as soon as the
    result waits for the founder, and says where — not "ran: ok" while nothing is done.
    """
    company = COMPANY.replace(
        '    trigger: {cron: "0 9 * * mon"}\n',
        '    trigger: {cron: "0 9 * * mon"}\n    approval: required\n',
    )
    assert "approval: required" in company
    async with running_site(work, company) as site:
        ran = await site.post("/routines/weekly-review/run", htmx=True)
        [item] = (await site.daemon.inbox()).items
    assert ran.status_code == 200
    assert "its result waits for your approval in the" in ran.text
    assert f"({item.id})" in ran.text and 'href="/inbox"' in ran.text


async def test_routines_run_now_goes_through_admin_with_csrf(site: Site) -> None:
    listed = await site.get("/routines")
    assert 'href="/routines/weekly-review"' in listed.text and "Run now" in listed.text
    refused = await site.client.post("/routines/weekly-review/run", data={})
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert (await site.daemon.job_history("weekly-review")).fires == []

    sub = site.daemon.bus.subscribe(kinds={"operator_action"})
    ran = await site.post("/routines/weekly-review/run", htmx=True)
    assert ran.status_code == 200 and "weekly-review ran" in ran.text
    fires = (await site.daemon.job_history("weekly-review")).fires
    assert len(fires) == 1
    run_id = fires[0]["run_id"]
    assert run_id is not None and run_id in ran.text
    event = sub.get_nowait()
    assert event is not None and event.data["via"] == "dashboard"
    assert (event.data["action"], event.data["target"], event.data["ok"]) == (
        "run_job",
        "weekly-review",
        True,
    )

    history = await site.get("/routines/weekly-review")
    assert f'href="/runs/{fires[0]["run_id"]}"' in history.text
    assert f"outcome-{fires[0]['outcome']}" in history.text
    unknown = await site.get("/routines/no-such-routine", 404)
    assert "no-such-routine" in unknown.text

    # pressed in the first instant of a stop (the agents told to drain, the page still up):
    # nothing is fired, and the page says so with what to do here, as the phone and the
    # CLI say it with theirs (tests/desk/test_founder_e2e.py, tests/daemon/test_operator_actions.py)
    site.daemon.staff.drain()
    stopping = await site.post("/routines/weekly-review/run", htmx=True)
    assert (
        "the daemon is stopping; routine weekly-review was not fired — press Run now again "
        "once the daemon has started"
    ) in stopping.text
    assert len((await site.daemon.job_history("weekly-review")).fires) == 1


async def test_a_routine_paused_after_failures_is_resumed_from_its_page(site: Site) -> None:
    sched = site.daemon.scheduler
    why = "paused after 3 runs in a row that did not succeed (pause_after_failures: 3)"
    store = sched._rec.store  # the routine history's writer (what a third failure does)
    assert store is not None
    await store.call(lambda c: guards.set_routine_paused(c, "weekly-review", why, 0.0))
    page = await site.get("/routines/weekly-review")
    assert why in page.text and 'aria-label="Resume weekly-review"' in page.text
    sub = site.daemon.bus.subscribe(kinds={"operator_action", "routine_resumed"})
    resumed = await site.post("/routines/weekly-review/resume")
    assert resumed.status_code == 200 and "Resume weekly-review" not in resumed.text
    assert await sched.paused_routines() == {}
    kinds = [e.kind for e in (sub.get_nowait(), sub.get_nowait()) if e is not None]
    assert sorted(kinds) == ["operator_action", "routine_resumed"]


async def test_an_agent_behind_a_quota_wall_shows_paused_until_its_time(site: Site) -> None:
    d = site.daemon
    until = d.clock.time() + 900
    hhmm = clock_time(until, d.config.timezone)
    d.staff.pauses.pause_until(["cfo"], until, f"rate limit until {hhmm}: test")
    page = await site.get("/agents/cfo")
    assert f"paused until {hhmm} (rate limit)" in page.text
    assert 'aria-label="Resume cfo"' in page.text
    assert d.staff.resume("cfo")


async def test_spend_page_and_its_csv_export(site: Site) -> None:
    await site.daemon.ask("cfo", "What did we spend this week?")
    await site.daemon.spend_book.flush()
    page = await site.get("/spend")
    assert "Per day, by agent" in page.text and 'data-stacked="' in page.text
    assert "By model" in page.text and "By routine" in page.text
    assert "Budgets (times in UTC)" in page.text and "$10.00" in page.text  # company/day
    # the offline model's spend is labelled simulated (issue 28): the spend page and the
    # overview's spend block
    assert page.text.count('<span class="badge"') >= 1 and ">simulated</span>" in page.text
    overview = await site.get("/")
    assert ">simulated</span>" in overview.text
    bad = await site.get("/spend?period=fortnight", 400)
    assert "unknown period &#39;fortnight&#39;" in bad.text

    export = await site.get("/spend.csv?period=month&by=agent")
    assert export.headers["content-type"].startswith("text/csv")
    disposition = export.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="companyd-spend-by-agent-')
    assert disposition.endswith('.csv"')
    rows = list(csv.reader(io.StringIO(export.text)))
    assert tuple(rows[0]) == CSV_COLUMNS
    today = (await site.daemon.budget()).day
    assert [(r[0], r[1]) for r in rows[1:]] == [(today, "cfo")]
    assert int(rows[1][2]) >= 1  # calls
    by_model = await site.get("/spend.csv?by=model")
    assert len(list(csv.reader(io.StringIO(by_model.text)))) == 2
    wrong = await site.client.get("/spend.csv?by=colour")
    assert wrong.status_code == 400 and "choose one of agent, model, routine" in wrong.text


def _money_in(html: str, start: str, end: str = "</table>") -> list[str]:
    part = html[html.index(start) :]
    return re.findall(r"\$[\d,]+\.\d+", part[: part.index(end)])


async def test_every_money_cell_of_a_table_has_one_precision(site: Site) -> None:
    """Issue 28: within one table every amount has the same decimals, enough that the
    smallest amount that is not zero shows as not zero: a raise of $0.0042 makes the
    budgets table $2.0042 / $10.0000, never $2.0042 above $10.00.
    """
    await site.daemon.raise_budget("cfo", 0.0042)
    page = await site.get("/spend")
    cells = _money_in(page.text, 'id="h-budgets"')
    assert "$2.0042" in cells and "$10.0000" in cells and "$100.0000" in cells, cells
    assert {len(c.split(".")[1]) for c in cells} == {4}, cells


async def test_offline_costs_are_labelled_simulated_on_every_page_that_shows_a_run(
    site: Site,
) -> None:
    """Issue 28: offline spend is labelled simulated everywhere: the runs list, an agent's
    runs, a run's totals and a routine's last result.
    """
    await site.daemon.run_job("weekly-review")
    run = (await site.daemon.runs(routine="weekly-review", limit=1)).runs[0]
    assert run["offline"]
    cost = re.escape(f"${run['cost_usd']:.4f}")
    for url in ("/runs", "/agents/cfo", f"/runs/{run['run_id']}", "/routines/weekly-review"):
        page = await site.get(url)
        assert re.search(cost + r"\d* \(simulated\)", page.text), url


async def test_memory_search_entity_graph_and_recent_changes(site: Site) -> None:
    await remember_acme(site)
    found = await site.get("/memory?q=acme")
    assert 'href="/memory/entity?name=Acme"' in found.text
    assert 'href="/memory/entity?name=Bob"' in found.text  # matched by an observation
    assert "CFO of Acme" in found.text
    assert "Recent changes" in found.text and "create_relations" in found.text
    assert 'href="/agents/cfo"' in found.text  # who made the change
    nothing = await site.get("/memory?q=zeppelin")
    assert "Nothing in memory mentions" in nothing.text

    acme = await site.get("/memory/entity?name=Acme")
    assert "pays 400 EUR" in acme.text and "works_at" in acme.text
    assert '<svg class="memory-graph"' in acme.text
    assert acme.text.count('class="node node-') == 2  # Acme and its neighbour Bob
    missing = await site.get("/memory/entity?name=Zeppelin", 404)
    assert "no entity &#39;Zeppelin&#39; in company memory" in missing.text
    # a page pasted into an observation: its start, and where to read the whole of it
    pasted = "x" * 100_000
    await site.daemon.memory.call(
        "add_observations", {"observations": [{"entityName": "Bob", "contents": [pasted]}]}
    )
    bob = await site.get("/memory/entity?name=Bob")
    assert "x" * 4000 + "…" in bob.text and "x" * 4001 not in bob.text
    assert "100000 characters; the whole of it: <code>companyd memory open</code>" in bob.text


async def test_inbox_actions_are_admin_operations_recorded_via_dashboard(site: Site) -> None:
    d = site.daemon
    question = await d.desk.request(
        key="test:q1",
        kind=ItemKind.QUESTION,
        agent="cfo",
        run_id=None,
        routine=None,
        payload={"question": "May I cancel the unused SaaS seats?"},
        timeout=3600,
    )
    proposal = await d.proposal_store.propose(
        "ceo", "cfo", "You are the cfo. Be brief.", "shorter answers"
    )
    page = await site.get("/inbox")
    assert "May I cancel the unused SaaS seats?" in page.text
    # its age and expiry: asked just now, an hour to go, then its agent goes on without it
    # (a question is not "denied")
    assert re.search(
        r"waiting \d+s · expires in (1h 00m|59m \d\ds) \(then the agent goes on without an "
        r"answer\)",
        page.text,
    )
    assert f"/inbox/{question.id}/answer" in page.text
    assert f"/inbox/{proposal.id}/approve" in page.text and "shorter answers" in page.text
    assert "Be brief." in page.text  # the proposal's diff

    refused = await site.client.post(f"/inbox/{question.id}/answer", data={"text": "yes"})
    assert refused.status_code == 403
    assert [i.id for i in (await d.inbox()).items if i.id == question.id] == [question.id]

    sub = d.bus.subscribe(kinds={"operator_action"})
    empty = await site.post(f"/inbox/{question.id}/answer", {"text": "  "})
    assert empty.status_code == 409 and "write your answer first" in empty.text
    answered = await site.post(f"/inbox/{question.id}/answer", {"text": "Yes, cancel them."})
    assert answered.status_code == 200 and f"answered {question.id}" in answered.text
    decided = await d.desk.get(question.id)
    assert decided is not None and decided.text == "Yes, cancel them."
    rejected = await site.post(
        f"/inbox/{proposal.id}/reject", {"reason": "keep them detailed"}, htmx=True
    )
    assert rejected.status_code == 200 and f'id="item-{proposal.id}"' in rejected.text
    assert f"rejected {proposal.id}" in rejected.text
    assert (await d.inbox()).items == []
    actions = []
    while (event := sub.get_nowait()) is not None:
        actions.append((event.data["action"], event.data["target"], event.data["via"]))
    assert actions == [
        ("answer", question.id, "dashboard"),
        ("reject", proposal.id, "dashboard"),
    ]
    again = await site.post(f"/inbox/{question.id}/answer", {"text": "again"})
    assert again.status_code == 409 and question.id in again.text
    assert "Nothing waits for you." in (await site.get("/inbox")).text
    unknown = await site.post(f"/inbox/{question.id}/shred")
    assert unknown.status_code == 400 and "choose one of approve, reject" in unknown.text


async def test_a_quarantined_task_is_retried_from_the_inbox(site: Site) -> None:
    d = site.daemon
    task = Task(
        id=new_id("task"), agent="cfo", prompt="Reconcile November.", source="operator",
        created=d.clock.time(),
    )  # fmt: skip
    await d.journal.add_task(task, d.clock.time())
    for n in range(3):
        await d.journal.record_crash(task.id, f"boom {n}", d.clock.time())
    await d.journal.set_task_state(task.id, "quarantined", d.clock.time())
    page = await site.get("/inbox")
    assert "Quarantined tasks (1)" in page.text and "Reconcile November." in page.text
    assert f"/inbox/{task.id}/retry" in page.text
    retried = await site.post(f"/inbox/{task.id}/retry", htmx=True)
    assert retried.status_code == 200 and f"released {task.id}" in retried.text
    assert await d.journal.tasks(["quarantined"]) == []
    async with asyncio.timeout(30):  # cfo runs it again
        while not (await d.runs(agent="cfo", finished=True)).runs:
            await asyncio.sleep(0.05)


async def test_held_back_mcp_tools_are_approved_from_the_inbox(site: Site) -> None:
    d = site.daemon
    tool = {"name": "post", "description": "Post.", "input_schema": {}, "annotations": {}}
    await d.tool_store.check_catalogue("cfo", "social", {"post": tool})  # approved as first seen
    changed = {"post": dict(tool, description="Post, and email everyone."), "wipe": tool}
    await d.tool_store.check_catalogue("cfo", "social", changed, now=d.clock.time())
    page = await site.get("/inbox")
    assert "New or changed tools held back (1)" in page.text
    assert "MCP server social offers new or changed tools" in page.text
    assert "/inbox/tools:cfo:social/approve" in page.text
    approved = await site.post("/inbox/tools:cfo:social/approve", htmx=True)
    assert approved.status_code == 200, approved.text
    assert "approved post, wipe of social for cfo" in approved.text
    assert await d.tool_store.held() == []
    assert (await d.inbox()).items == []


async def test_the_inbox_count_is_live_and_offers_a_reload_when_items_arrive(site: Site) -> None:
    page = await site.get("/inbox")
    assert 'sse-connect="/live?f=inbox&amp;shown=0"' in page.text

    def live(shown: int) -> Request:
        query = f"f=inbox&shown={shown}".encode()
        scope = {"type": "http", "app": site.app, "method": "GET", "path": "/live"}
        return Request({**scope, "query_string": query, "headers": [], "state": {}})

    assert (await waiting(live(0))).strip() == "Nothing waits for you."
    await site.daemon.desk.request(
        key="test:q3",
        kind=ItemKind.QUESTION,
        agent="ceo",
        run_id=None,
        routine=None,
        payload={"question": "Hire a designer?"},
        timeout=3600,
    )
    changed = await waiting(live(0))
    assert "1 item waits for you" in changed and 'href="/inbox">reload the inbox' in changed
    assert "reload" not in await waiting(live(1))


async def test_config_shows_the_resolved_file_and_the_last_reload_never_a_secret(
    site: Site, work: Path
) -> None:
    page = await site.get("/config")
    assert SECRET not in page.text
    assert "Staging password: ***. Never repeat it." in page.text
    assert KEY_VAR in page.text and "set</span>" in page.text  # named, never its value
    assert "max_steps: 20" in page.text  # defaults filled in
    # every effective default, as `show-config` prints it: the routine's resolved deliver
    # (nothing, without an expected_output), never `deliver: null` (issue 28)
    assert "deliver: null" not in page.text and "deliver: []" in page.text
    assert "approval: none" in page.text and "runs_days: 90" in page.text
    assert "No reload since the daemon started." in page.text
    assert "differs from the running version" not in page.text

    text = (work / "company.yaml").read_text(encoding="utf-8")
    (work / "company.yaml").write_text(
        text.replace("daily_usd: 10", "daily_usd: ten"), encoding="utf-8"
    )
    await site.daemon.reload()
    after = await site.get("/config")
    assert "differs from the running version" in after.text
    assert "rejected" in after.text and "company.budget.daily_usd" in after.text
    assert SECRET not in after.text
    assert "Waiting for a restart" not in after.text


async def test_config_says_which_settings_wait_for_a_restart(site: Site, work: Path) -> None:
    """The page shows the file a reload loaded; what in it only a restart applies is said,
    for as long as the daemon runs the values it started with.
    """
    cfg = work / "company.yaml"
    started = cfg.read_text(encoding="utf-8")
    cfg.write_text(started + "memory: {path: elsewhere/memory.jsonl}\n", encoding="utf-8")
    assert (await site.daemon.reload()).applied is True
    page = await site.get("/config")
    assert "Waiting for a restart: <code>memory.path</code>" in page.text
    assert "elsewhere/memory.jsonl" in page.text  # the file's value, said to be waiting
    cfg.write_text(started, encoding="utf-8")
    assert (await site.daemon.reload()).applied is True
    assert "Waiting for a restart" not in (await site.get("/config")).text


async def test_no_page_shows_a_secret_inline_script_or_style_or_an_unnamed_control(
    site: Site,
) -> None:
    await remember_acme(site)
    await site.daemon.ask("cfo", f"Remember {SECRET} for later.")
    await site.daemon.desk.request(
        key="test:q2",
        kind=ItemKind.QUESTION,
        agent="cfo",
        run_id=None,
        routine=None,
        payload={"question": "Shall I pay the invoice?"},
        timeout=3600,
    )
    run_id = (await site.daemon.runs(limit=1)).runs[0]["run_id"]
    for url in (*PAGES, f"/runs/{run_id}", "/spend?period=today"):
        r = await site.get(url)
        assert SECRET not in r.text, url
        page = Page(r.text)
        assert page.inline_scripts == 0 and page.style_attributes == 0, url
        assert page.handlers == [], url
        assert page.post_forms == page.post_forms_with_csrf, url
        assert page.unnamed_controls() == [], url


async def test_a_decision_records_the_front_end_it_was_made_in(site: Site) -> None:
    """Issue 32 item 9: the dashboard's Approve/Reject/Answer are recorded "via
    dashboard" on the desk (the record the run's transcript and ``runs show`` read), the
    CLI's and Telegram's as theirs, and each front end's decision is an
    ``operator_action`` event with its ``via``.
    """
    d = site.daemon

    async def ask(key: str, kind: ItemKind) -> str:
        payload = {"question": "May I?"} if kind is ItemKind.QUESTION else {"tool": "send"}
        item = await d.desk.request(
            key=key, kind=kind, agent="cfo", run_id=None, routine=None, payload=payload,
            timeout=3600,
        )  # fmt: skip
        return item.id

    sub = d.bus.subscribe(kinds={"operator_action"})
    approval, rejected, question = (
        await ask("t:a", ItemKind.APPROVAL),
        await ask("t:r", ItemKind.APPROVAL),
        await ask("t:q", ItemKind.QUESTION),
    )
    assert (await site.post(f"/inbox/{approval}/approve")).status_code == 200
    assert (await site.post(f"/inbox/{rejected}/reject", {"reason": "no"})).status_code == 200
    answered = await site.post(f"/inbox/{question}/answer", {"text": "Yes."})
    assert answered.status_code == 200
    by_telegram, by_cli = (
        await ask("t:tg", ItemKind.APPROVAL),
        await ask("t:cli", ItemKind.QUESTION),
    )
    await d.approve(by_telegram, by="ana", via="telegram")
    await d.answer(by_cli, "Fine.", by="ana", via="cli")
    vias = {}
    for item_id in (approval, rejected, question, by_telegram, by_cli):
        item = await d.desk.get(item_id)
        assert item is not None
        vias[item_id] = item.via
    assert vias == {
        approval: "dashboard",
        rejected: "dashboard",
        question: "dashboard",
        by_telegram: "telegram",
        by_cli: "cli",
    }
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append((event.data["action"], event.data["target"], event.data["via"]))
    assert events == [
        ("approve", approval, "dashboard"),
        ("reject", rejected, "dashboard"),
        ("answer", question, "dashboard"),
        ("approve", by_telegram, "telegram"),
        ("answer", by_cli, "cli"),
    ]


BACKUP_COMPANY = """\
schema: companyd/v1
company: {name: Acme Ops, timezone: UTC, budget: {daily_usd: 10}}
dashboard: {enabled: false}
agents:
  ceo: {title: CEO, instructions: lead}
routines:
  nightly:
    backup: {every: 24h, keep: 3, to: %s}
"""


async def test_run_now_on_a_backup_routine_answers_with_the_backup() -> None:
    """Admin ``run_job`` (what ``companyd jobs run`` calls) and the dashboard's Run now on a
    backup routine answer with the outcome (seen failing first: AssertionError in run_now,
    exit 70 / HTTP 500, although the backup was written).
    """
    with short_dir() as work:
        backups = work / "backups"
        path = work / "company.yaml"
        path.write_text(BACKUP_COMPANY % backups, encoding="utf-8")
        cfg = load_config(path)
        async with Daemon(cfg, work / "s", backend=OfflineModel(), offline=True) as d:
            answer = await d.run_job("nightly")
            assert answer.status == "ok" and answer.run_id == "", answer
            assert answer.answer.startswith("backup written: ")
            first = sorted(backups.iterdir())
            assert len(first) == 1 and str(first[0]) in answer.answer
            site = Site(d, ManualClock(start=d.clock.time()))
            async with site.client:
                await site.login()
                ran = await site.post("/routines/nightly/run", htmx=True)
                assert ran.status_code == 200, ran.text[:2000]
                assert "nightly ran" in ran.text and "backup written: " in ran.text
                assert 'href="/runs/"' not in ran.text
            fires = (await d.job_history("nightly")).fires
        assert [f["outcome"] for f in fires] == ["ok", "ok"]
        assert len(list(backups.iterdir())) == 2


#: A routine whose result someone waits for (so it delivers to telegram by default) and
#: that waits for the founder's approval.
DAILY_POST = """\
  daily-post:
    assignee: ceo
    description: Draft today's post for the blog about <b>clinics</b> & scheduling.
    expected_output: One paragraph, under 120 words.
    trigger: {cron: "0 8 * * *"}
    approval: required
"""


def live_request(site: Site, *names: str) -> Request:
    """A ``/live`` request for the fragments ``names`` (as the page's stream sends)."""
    query = "&".join(f"f={n}" for n in names).encode()
    scope = {"type": "http", "app": site.app, "method": "GET", "path": "/live"}
    return Request({**scope, "query_string": query, "headers": [], "state": {}})


def strip_of(html: str) -> str:
    """The attention strip's HTML in a page."""
    start = html.index('<section id="attention"')
    return html[start : html.index("</section>", start)]


def rewrite_run(work: Path, run_id: str, **columns: object) -> None:
    """Set ``columns`` of a run in the journal's file (a status another front end writes,
    a long answer, a time yesterday) as the daemon's journal would have stored them.
    """
    names = ", ".join(f"{k} = ?" for k in columns)
    with sqlite3.connect(work / "s" / "runs.sqlite", timeout=10) as db:
        db.execute(f"UPDATE runs SET {names} WHERE id = ?", (*columns.values(), run_id))


async def test_today_shows_every_result_with_routine_agent_status_deliveries_and_its_text(
    site: Site, work: Path
) -> None:
    empty = await site.get("/today")
    assert "Nothing was produced today." in empty.text
    assert 'href="/today" aria-current="page"' in empty.text  # in the navigation bar
    await site.daemon.run_job("weekly-review")
    asked = await site.daemon.ask("cfo", "Is <script>alert(1)</script> & co paid?")
    long = await site.daemon.ask("ceo", "Summarise the week.")
    answer = "A long answer. " * 200 + "THE END"
    rewrite_run(work, long.run_id, answer=answer)
    old = await site.daemon.ask("cfo", "What happened yesterday?")
    yesterday = site.daemon.clock.time() - 86_400
    rewrite_run(work, old.run_id, started=yesterday, ended=yesterday + 1)
    page = await site.get("/today")
    text = page.text
    weekly = (await site.daemon.runs(routine="weekly-review", limit=1)).runs[0]
    # each result: its routine (a link) or who asked, its agent, its status, its run
    assert 'href="/routines/weekly-review">weekly-review</a>' in text
    assert f'id="result-{weekly["run_id"]}" data-status="ok"' in text
    assert f'href="/runs/{asked.run_id}"' in text and 'href="/agents/cfo"' in text
    assert "(simulated)" in text  # offline spend is labelled
    # where it went: the routine delivers nowhere (no expected_output, no deliver)
    assert "delivers nowhere" in text
    # the text, escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co paid?" in text
    assert "<script>alert(1)" not in text
    # bounded: a long answer is cut, saying its full size, with a link to the whole
    assert f"of {len(answer)} characters" in text and "THE END" not in text
    assert f'<a href="/runs/{long.run_id}">the whole result</a>' in text
    # yesterday's result is under Yesterday, today's under Today
    today_part, yesterday_part = text.split('id="h-day-2"', 1)
    assert old.run_id in yesterday_part and old.run_id not in today_part
    assert asked.run_id in today_part


async def test_today_shows_any_status_a_run_has_and_where_the_bus_saw_it_delivered(
    site: Site, work: Path
) -> None:
    """A status the page has never heard of (another front end's, e.g. ``unverified``)
    is shown as it is, and the deliveries the bus saw for a run replace the configured ones.
    """
    from companyd.dashboard._pages.today import deliveries_of
    from companyd.events import ResultDelivered, ResultUndelivered

    row = {"run_id": "run-1", "routine": "daily-post", "status": "unverified", "asked_by": None}
    site.daemon.bus.publish(
        ResultDelivered(source="alerts", routine="daily-post", run_id="run-1", to="file",
                        where="outputs/daily-post/2026-11-28.md")
    )  # fmt: skip
    site.daemon.bus.publish(
        ResultUndelivered(source="alerts", routine="daily-post", run_id="run-1", to="memory",
                          reason="memory is restarting")
    )  # fmt: skip
    seen = deliveries_of(row, {"daily-post": ("telegram",)}, site.daemon.bus.recent())
    assert seen == [
        {"state": "delivered", "text": "delivered to file: outputs/daily-post/2026-11-28.md"},
        {"state": "undelivered", "text": "not delivered to memory: memory is restarting"},
    ]
    assert deliveries_of({**row, "run_id": "run-2"}, {"daily-post": ("telegram",)}, []) == [
        {"state": "configured", "text": "delivers to telegram"}
    ]
    own = {**row, "deliveries": ["delivered to telegram at 14:02 (message 812)"]}
    assert deliveries_of(own, {}, [])[0]["text"] == "delivered to telegram at 14:02 (message 812)"
    run_id = (await site.daemon.ask("cfo", "Anything new?")).run_id
    rewrite_run(work, run_id, state="unverified")
    page = await site.get("/today")
    assert f'id="result-{run_id}" data-status="unverified"' in page.text
    assert '<span class="badge run-unverified">unverified</span>' in page.text


async def test_the_routine_page_shows_what_it_asks_where_it_goes_and_its_last_result(
    work: Path,
) -> None:
    berlin = COMPANY.replace("timezone: UTC", "timezone: Europe/Berlin")
    async with running_site(work, berlin + DAILY_POST) as site:
        before = await site.get("/routines/daily-post")
        # its 08:00 on the company's clock, named as the alerts name it (not 07:00 UTC)
        assert re.search(r"<dt>Next fire</dt><dd>[-\d]{10} 08:00 CES?T</dd>", before.text), (
            before.text
        )
        assert "Draft today&#39;s post for the blog about &lt;b&gt;clinics&lt;/b&gt; &amp;" in (
            before.text
        )
        assert "One paragraph, under 120 words." in before.text
        # deliver resolved: the effective default (telegram, as it names an expected output)
        assert '<dd class="routine-deliver">telegram</dd>' in before.text
        assert "Telegram is off: results, approvals and alerts reach no phone</dd>" in before.text
        assert '<dd class="routine-approval">required' in before.text
        assert "daily-post has produced no result yet." in before.text
        assert "0 8 * * *" in before.text
        job = asyncio.create_task(site.daemon.run_job("daily-post"))
        async with asyncio.timeout(30):  # its result waits for the founder's approval
            while not (waiting_items := [i for i in (await site.daemon.inbox()).items
                                         if i.kind == "result"]):  # fmt: skip
                await asyncio.sleep(0.05)
        await site.daemon.approve(waiting_items[0].id)
        async with asyncio.timeout(30):
            await job
        after = await site.get("/routines/daily-post")
        run = (await site.daemon.runs(routine="daily-post", limit=1)).runs[0]
        assert f'href="/runs/{run["run_id"]}">run {run["run_id"]}</a></p>' in after.text
        assert "[offline] ceo handled the task" in after.text
        quiet = await site.get("/routines/weekly-review")
        assert '<dd class="routine-deliver">nowhere</dd>' in quiet.text
        assert '<dd class="routine-approval">none' in quiet.text


async def test_reload_and_raise_budget_on_a_routine_page_are_admin_operations_via_dashboard(
    site: Site, work: Path
) -> None:
    page = await site.get("/routines/weekly-review")
    assert 'action="/routines/weekly-review/reload"' in page.text
    assert 'action="/routines/weekly-review/raise"' in page.text
    refused = await site.client.post("/routines/weekly-review/raise", data={"usd": "5"})
    assert refused.status_code == 403
    assert (await site.client.post("/routines/weekly-review/reload", data={})).status_code == 403

    def cfo_limit(budgets: list[BudgetRow]) -> object:
        return next(b["limit_usd"] for b in budgets if b["agent"] == "cfo" and b["period"] == "day")

    assert cfo_limit((await site.daemon.budget()).budgets) == 2.0
    sub = site.daemon.bus.subscribe(kinds={"operator_action"})
    bad = await site.post("/routines/weekly-review/raise", {"usd": "lots"})
    assert bad.status_code == 409 and "got &#39;lots&#39;; nothing was raised" in bad.text
    raised = await site.post("/routines/weekly-review/raise", {"usd": "3"})
    assert raised.status_code == 200 and "raised today&#39;s budget of cfo by $3.00" in raised.text
    assert cfo_limit((await site.daemon.budget()).budgets) == 5.0
    event = sub.get_nowait()
    assert event is not None
    assert (event.data["action"], event.data["target"], event.data["via"], event.data["ok"]) == (
        "raise_budget", "cfo", "dashboard", True,
    )  # fmt: skip
    assert sub.get_nowait() is None  # the refused amount never reached the daemon

    text = (work / "company.yaml").read_text(encoding="utf-8")
    (work / "company.yaml").write_text(text.replace("daily_usd: 2", "daily_usd: 4"), "utf-8")
    reloaded = await site.post("/routines/weekly-review/reload", htmx=True)
    assert reloaded.status_code == 200
    assert "company.yaml reloaded: changed cfo" in reloaded.text
    event = sub.get_nowait()
    assert event is not None
    assert (event.data["action"], event.data["via"], event.data["ok"]) == (
        "reload",
        "dashboard",
        True,
    )
    (work / "company.yaml").write_text(text.replace("daily_usd: 10", "daily_usd: ten"), "utf-8")
    rejected = await site.post("/routines/weekly-review/reload", htmx=True)
    assert 'role="alert"' in rejected.text or "rejected" in rejected.text


async def test_every_page_has_the_attention_strip_and_the_inbox_badge(site: Site) -> None:
    await remember_acme(site)
    for url in PAGES:
        page = await site.get(url)
        strip = strip_of(page.text)
        assert 'data-key="offline"' in strip, url
        assert 'data-key="telegram"' in strip and "Telegram is off" in strip, url
        assert 'data-key="inbox"' not in strip, url
        assert 'sse-connect="/live?f=attention&amp;f=inbox_badge"' in page.text, url
        assert 'id="inbox-badge"' in page.text and "count-badge" not in page.text, url


async def test_the_strip_says_what_waits_and_what_is_wrong_and_counts_move_live(
    site: Site, work: Path
) -> None:
    from companyd.dashboard._attention import live as strip_live
    from companyd.events import RoutineFailed, StateDiskFull

    badge = next(f for f in strip_live if f.name == "inbox_badge")
    strip = next(f for f in strip_live if f.name == "attention")
    assert (await badge.render(live_request(site, "inbox_badge"))).strip() == ""
    d = site.daemon
    item = await d.desk.request(
        key="test:strip", kind=ItemKind.QUESTION, agent="cfo", run_id=None, routine=None,
        payload={"question": "Pay the invoice?"}, timeout=3600,
    )  # fmt: skip
    await d.pause("cfo")
    text = (work / "company.yaml").read_text(encoding="utf-8")
    (work / "company.yaml").write_text(text.replace("daily_usd: 10", "daily_usd: ten"), "utf-8")
    await d.reload()
    d.bus.publish(
        StateDiskFull(source="state", what="the run journal", path="/s/runs.sqlite",
                      error="No space left on device", message="the state disk is full")
    )  # fmt: skip
    d.bus.publish(
        RoutineFailed(source="scheduler", routine="weekly-review", agent="cfo",
                      scheduled="2026-11-28T09:00:00+00:00", reason="budget exhausted: cfo",
                      run_id="run-abc", outcome="failed", fire_kind="scheduled", fire_id="f-1")
    )  # fmt: skip
    page = await site.get("/runs")
    shown = strip_of(page.text)
    assert '<a href="/inbox">1 item waits for you in the inbox</a>' in shown
    assert '<span class="count-badge" data-count="1"' in page.text
    assert 'data-key="paused"' in shown and '<a href="/agents/cfo">cfo</a>' in shown
    assert 'data-key="reload"' in shown and "company.budget.daily_usd" in shown
    assert 'data-key="store"' in shown and "the state disk is full" in shown
    # the last alert: what, the routine and agent, the reason, a link to its run
    assert '<a href="/runs/run-abc">routine failed</a>' in shown
    assert 'routine <a href="/routines/weekly-review">weekly-review</a>' in shown
    assert "budget exhausted: cfo" in shown

    # an action elsewhere: the live fragments change without reloading the page
    await site.post(f"/inbox/{item.id}/answer", {"text": "Yes."})
    await d.resume("cfo")
    after = await strip.render(live_request(site, "attention"))
    assert 'data-key="inbox"' not in after and 'data-key="paused"' not in after
    assert (await badge.render(live_request(site, "inbox_badge"))).strip() == ""
    assert {"founder_decided", "operator_action", "agent_resumed"} <= strip.kinds


def test_an_alert_names_the_server_and_the_repair_it_is_about() -> None:
    # three MCP servers of one agent failing read alike; a memory repair said nothing
    from companyd.dashboard._attention import alert_view
    from companyd.events._catalog import event_from

    failed = event_from(
        "mcp_server_failed",
        source="agent/ops",
        data={
            "agent": "ops",
            "server": "probe",
            "reason": "did not answer the MCP handshake within 30 s",
        },
    )
    assert alert_view(failed)["reason"] == (
        "server 'probe': did not answer the MCP handshake within 30 s"
    )
    repaired = event_from(
        "memory_repaired",
        source="memory",
        data={
            "path": "/s/memory.jsonl",
            "summary": "2 damaged lines set aside",
            "corrupt_file": "/s/memory.jsonl.corrupt",
        },
    )
    assert alert_view(repaired)["reason"] == (
        "2 damaged lines set aside (set aside in /s/memory.jsonl.corrupt)"
    )
