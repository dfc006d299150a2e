"""The run journal on both backends: runs.sqlite and a company's PostgreSQL schema (a
throwaway cluster). The same calls give the same answers; on PostgreSQL a second daemon on
the same schema — the standby that took over from a leader killed mid-run — reads the open
task and every completed step, so it resumes the run without paying for a journaled call
again (issue 19).
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from agentkit import company_yaml
from companyd.cli import main as cli_main
from companyd.runs import Journal, LlmStep, RunOutcome, RunStatus, Task, TaskState
from companyd.spend._ledger import Ledger
from companyd.storage import Backend

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0


def _task(task_id: str, agent: str = "writer", **kw: Any) -> Task:
    fields: dict[str, Any] = {"prompt": f"do {task_id}", "source": "operator", "created": T0}
    fields.update(kw)
    return Task(id=task_id, agent=agent, **fields)


def _llm(text: str) -> LlmStep:
    return {
        "model": "claude-sonnet-5-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "cost": "0.0001",
        "offline": False,
        "request_id": "req_1",
    }


def _outcome(t: Task, run_id: str, ended: float, status: RunStatus = RunStatus.OK) -> RunOutcome:
    return RunOutcome(
        task_id=t.id,
        run_id=run_id,
        agent=t.agent,
        status=status,
        started=ended - 1,
        ended=ended,
        answer=f"answer of {run_id}",
        cost_usd=0.25,
        steps=1,
        models=("claude-sonnet-5-5",),
        offline=True,
    )


@pytest.fixture
async def journal(tmp_path: Path, state_backend: Backend) -> AsyncIterator[Journal]:
    j = Journal(tmp_path / "runs.sqlite", backend=state_backend)
    await j.open()
    try:
        yield j
    finally:
        await j.close()


async def test_tasks_pauses_and_outcomes_are_the_same_on_both_backends(journal: Journal) -> None:
    # three tasks queued in the same instant come back in the order they were accepted
    for name in ("t-c", "t-a", "t-b"):
        await journal.add_task(_task(name), T0)
    await journal.add_task(_task("t-a", prompt="a second add changes nothing"), T0 + 5)
    assert [t.id for t in await journal.queued_tasks("writer")] == ["t-c", "t-a", "t-b"]
    assert (await journal.get_task("t-a") or (None,))[0] == _task("t-a")

    # two crashes, a quarantine, a retry
    assert await journal.record_crash("t-c", "boom 1", T0 + 1) == 1
    assert await journal.record_crash("t-c", "boom 2", T0 + 2) == 2
    await journal.set_task_state("t-c", TaskState.QUARANTINED, T0 + 2)
    (row,) = await journal.tasks([TaskState.QUARANTINED])
    assert (row["id"], row["crashes"], row["errors"]) == ("t-c", 2, ["boom 1", "boom 2"])
    await journal.release_task("t-c", T0 + 3)
    assert await journal.get_task("t-c") == (_task("t-c"), "queued", 0, ["boom 1", "boom 2"])

    # two runs ending in the same instant: the last one started is the task's outcome
    t = _task("t-a")
    for run_id, status in (("run-1", RunStatus.FAILED), ("run-2", RunStatus.OK)):
        await journal.start_run(t, run_id, int(run_id[-1]), T0 + 10)
        await journal.finish_run(_outcome(t, run_id, T0 + 11, status), TaskState.DONE)
    outcome = await journal.last_outcome("t-a")
    assert outcome == _outcome(t, "run-2", T0 + 11)
    assert await journal.attempts("t-a") == 2
    assert await journal.turn("run-2") == (t, "ok", "answer of run-2")
    assert await journal.open_tasks() == {"t-b", "t-c"}

    # a pause replaces the earlier one and survives (it is a row); clearing forgets it
    await journal.set_paused("writer", "budget: spent", True, T0)
    await journal.set_paused("writer", "the founder paused it", False, T0 + 1)
    await journal.set_paused("cfo", "budget: spent", True, T0)
    await journal.clear_paused("cfo")
    assert await journal.paused() == {"writer": ("the founder paused it", False)}
    # a quota wall's pause keeps its end; an operator's pause that replaces it has none
    await journal.set_paused("coo", "rate limit until 13:20: 429", False, T0, until=T0 + 900)
    assert await journal.paused_until() == {"coo": T0 + 900}
    await journal.set_paused("coo", "operator", False, T0 + 2)
    assert await journal.paused_until() == {}


async def test_withdrawals_pick_the_same_tasks_on_both_backends(journal: Journal) -> None:
    for t in (
        _task("consult-1"),
        _task("review-2"),
        _task("consultant-3"),  # not a consultation: the prefix ends at its dash
        _task("post-4"),
        _task("gone-5", agent="intern"),
    ):
        await journal.add_task(t, T0)
    await journal.start_run(_task("review-2"), "run-r", 1, T0 + 1)
    await journal.append_step("run-r", 1, "llm", _llm("half a review"), T0 + 2, paid=True)

    assert await journal.withdraw_orphans(("consult", "review"), "restarted", T0 + 3) == 2
    assert await journal.withdraw_unassigned([], "no agents left", T0 + 3) == 0  # NOT IN (NULL)
    assert await journal.withdraw_unassigned(["writer"], "removed", T0 + 3) == 1
    assert await journal.open_tasks() == {"consultant-3", "post-4"}
    assert await journal.unfinished_runs("writer") == []
    shown = await journal.transcript("run-r")
    assert shown is not None
    assert (shown["status"], shown["reason"]) == ("cancelled", "withdrawn: restarted")


async def test_a_consultation_whose_asker_resumes_is_kept_and_found_on_both_backends(
    journal: Journal,
) -> None:
    """At the start a consultation is withdrawn only when its asking run is over; the asking
    run, resumed, finds the task its tool call asked for (docs/desk.md, "Colleagues across
    a restart").
    """
    boss = _task("task-boss", agent="ceo")
    await journal.add_task(boss, T0)
    await journal.start_run(boss, "run-boss", 1, T0)
    waited = _task("consult-a", asked_by="run-boss", asked_in="toolu_1")
    nobody = _task("consult-b", asked_by="run-gone", asked_in="toolu_2")
    for t in (waited, nobody):
        await journal.add_task(t, T0 + 1)
    await journal.start_run(waited, "run-a", 1, T0 + 2)

    n = await journal.withdraw_orphans(("consult",), "restarted", T0 + 3, unless_asker_runs=True)
    assert n == 1
    assert await journal.open_tasks() == {"task-boss", "consult-a"}
    found = await journal.asked_task("run-boss", "toolu_1")
    assert found is not None and found.id == "consult-a"
    assert await journal.asked_task("run-boss", "toolu_9") is None
    assert await journal.asked_task("run-gone", "toolu_2") is None  # withdrawn, never started
    await journal.finish_run(_outcome(waited, "run-a", T0 + 4), TaskState.DONE)
    ended = await journal.asked_task("run-boss", "toolu_1")  # its outcome is the answer
    assert ended is not None and ended.id == "consult-a"


async def test_a_standby_resumes_a_killed_leaders_run_without_paying_again(
    tmp_path: Path, pg_backend: Backend
) -> None:
    """Leader A (its own process) journals a task, a run, a paid model call and a tool call
    on the company's schema, and is killed with SIGKILL mid-run. Journal B — the standby
    that takes over, on another host — finds the task open and the run unfinished with every
    completed step, replays them, and finishes the run.
    """
    with _start_leader(pg_backend, tmp_path) as leader:
        try:
            _wait_for_line(leader, "journaled", deadline=30.0)
        finally:
            leader.send_signal(signal.SIGKILL)
            leader.wait(timeout=10)
    assert leader.returncode == -signal.SIGKILL

    standby = Journal(tmp_path / "standby" / "runs.sqlite", backend=pg_backend)
    await standby.open()
    try:
        assert await standby.open_tasks() == {"task-1"}
        (run,) = await standby.unfinished_runs("writer")
        assert (run.run_id, run.attempt, run.task) == ("run-1", 1, _task("task-1"))
        assert [(s.seq, s.kind, s.key) for s in run.steps] == [
            (1, "llm", None),
            (2, "tool_start", "toolu_1"),
            (3, "tool_result", "toolu_1"),
        ]
        assert run.steps[0].llm() == _llm("checking the calendar")  # replayed, not re-paid
        assert run.steps[2].tool_result()["content"] == "free on Friday"
        # the standby carries on where the leader stopped
        await standby.append_step("run-1", 4, "llm", _llm("Friday it is"), T0 + 4, paid=True)
        await standby.finish_run(_outcome(_task("task-1"), "run-1", T0 + 5), TaskState.DONE)
        assert await standby.open_tasks() == set()
        shown = await standby.transcript("run-1")
        assert shown is not None
        assert [s["kind"] for s in shown["steps"]] == ["model", "tool", "model"]
    finally:
        await standby.close()
    assert not (tmp_path / "standby").exists()  # nothing went to a file


async def test_a_paid_step_the_lost_connection_refused_is_held_and_written_after(
    tmp_path: Path, pg_backend: Backend
) -> None:
    """The server drops the journal's connection (a restart, a network cut) just before a
    paid step: the step is held, as one a full disk refuses is, and written by the next
    journal work on a new connection — a resumed run replays the call, never pays again.
    """
    assert pg_backend.dsn is not None
    journal = Journal(tmp_path / "runs.sqlite", backend=pg_backend)
    await journal.open()
    try:
        t = _task("task-1")
        await journal.add_task(t, T0)
        await journal.start_run(t, "run-1", 1, T0)
        pid = journal.run_sync(lambda db: db.execute("SELECT pg_backend_pid()").fetchone()[0])
        with psycopg.connect(pg_backend.dsn, autocommit=True) as admin:
            gone = admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()
        assert gone == (True,)
        with pytest.raises(psycopg.OperationalError):
            await journal.append_step("run-1", 1, "llm", _llm("paid"), T0 + 1, paid=True)
        assert journal.held == 1
        (run,) = await journal.unfinished_runs("writer")  # a new connection; held first
        assert journal.held == 0
        assert [s.llm() for s in run.steps] == [_llm("paid")]
    finally:
        await journal.close()


_LEADER = """
import asyncio, json, os, sys
from pathlib import Path
from companyd.runs import Journal
from companyd.runs import Task
from companyd.storage import Backend

async def main():
    backend = Backend(kind="postgres", dsn=os.environ["COMPANYD_DATABASE_URL"], schema=sys.argv[1])
    j = Journal(Path(sys.argv[2]), backend=backend)
    await j.open()
    t = Task(id="task-1", agent="writer", prompt="do task-1", source="operator", created=T0)
    await j.add_task(t, T0)
    await j.start_run(t, "run-1", 1, T0)
    await j.append_step("run-1", 1, "llm", json.loads(sys.argv[3]), T0 + 1, paid=True)
    call = {"name": "calendar", "input": {"day": "friday"}}
    await j.append_step("run-1", 2, "tool_start", call, T0 + 2, key="toolu_1")
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "free on Friday"}
    await j.append_step("run-1", 3, "tool_result", result, T0 + 3, key="toolu_1")
    print("journaled", flush=True)
    await asyncio.sleep(600)  # killed here, mid-run

T0 = float(sys.argv[4])
asyncio.run(main())
"""


def _start_leader(backend: Backend, tmp_path: Path) -> subprocess.Popen[str]:
    assert backend.dsn is not None
    env = {**os.environ, "COMPANYD_DATABASE_URL": backend.dsn}
    args = [backend.schema, str(tmp_path / "leader" / "runs.sqlite")]
    args += [json.dumps(_llm("checking the calendar")), repr(T0)]
    return subprocess.Popen(
        [sys.executable, "-c", _LEADER, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for_line(proc: subprocess.Popen[str], line: str, *, deadline: float) -> None:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=deadline):
            raise AssertionError(f"the leader did not print {line!r} within {deadline} s")
    got = proc.stdout.readline().strip()
    assert got == line, f"the leader printed {got!r} (exit {proc.poll()})"


def test_companyd_runs_reads_the_journal_from_postgres_without_creating_it(
    tmp_path: Path, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`companyd runs` with no daemon running reads the company's schema, read-only: before
    any daemon created the journal it shows no runs (and creates nothing), then the runs.
    """
    assert pg_backend.dsn is not None
    monkeypatch.setenv("COMPANYD_DATABASE_URL", pg_backend.dsn)
    doc = yaml.safe_load(company_yaml({"writer": {}}))
    doc["state"] = {"backend": "postgres", "schema": pg_backend.schema}
    config = tmp_path / "company.yaml"
    config.write_text(yaml.safe_dump(doc), encoding="utf-8")
    state = tmp_path / "state"
    argv = ["--config", str(config), "--state-dir", str(state), "--socket", str(tmp_path / "no")]

    assert cli_main(["runs", "--json", *argv]) == 0
    assert json.loads(capsys.readouterr().out) == {"runs": []}
    assert _tables(pg_backend) is None  # not even the schema was created
    # another store made the schema, not yet the journal: still no runs, nothing created
    Ledger(tmp_path / "spend.sqlite", backend=pg_backend).close()
    assert cli_main(["runs", "--json", *argv]) == 0
    assert json.loads(capsys.readouterr().out) == {"runs": []}
    assert "runs" not in (_tables(pg_backend) or set())

    asyncio.run(_one_run(Journal(tmp_path / "daemon" / "runs.sqlite", backend=pg_backend)))
    assert cli_main(["runs", "--json", *argv]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert (row["run_id"], row["status"], row["cost_usd"]) == ("run-1", "ok", 0.25)
    assert cli_main(["runs", "show", "run-1", "--json", *argv]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["steps"][0]["text"] == "hello"
    assert not (state / "runs.sqlite").exists()


def _tables(backend: Backend) -> set[str] | None:
    """The tables of ``backend``'s schema, None when the schema does not exist."""
    assert backend.dsn is not None
    with psycopg.connect(backend.dsn) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (backend.schema,))
        if found.fetchone() is None:
            return None
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (backend.schema,)
        ).fetchall()
    return {r[0] for r in rows}


async def _one_run(j: Journal) -> None:
    """A finished run of one model call, as a daemon journals it."""
    await j.open()
    try:
        t = _task("task-1")
        await j.add_task(t, T0)
        await j.start_run(t, "run-1", 1, T0)
        await j.append_step("run-1", 1, "llm", _llm("hello"), T0 + 1, paid=True)
        await j.finish_run(_outcome(t, "run-1", T0 + 2), TaskState.DONE)
    finally:
        await j.close()
