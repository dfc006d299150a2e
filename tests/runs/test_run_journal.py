"""The run journal as ``companyd runs`` reads it (issue 17): the thread of runs, the filters,
the transcript's size bound, the retention period (on an injected clock) — on both backends
(``state_backend``) — and a journal file written before these existed (SQLite's alone).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companyd.alerts._outbox import AlertStore
from companyd.clock import ManualClock
from companyd.runs import (
    Journal,
    RunOutcome,
    RunRetention,
    RunStatus,
    Task,
    cut,
    full_size,
)
from companyd.runs._journal import MIGRATIONS
from companyd.runs._retention import DAY, PRUNE_EVERY
from companyd.runs._transcript import (
    STORED_VALUE_CHARS,
)
from companyd.storage import Backend
from companyd.supervision._child import StandaloneContext

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0


@pytest.fixture
async def journal(tmp_path: Path, state_backend: Backend) -> AsyncIterator[Journal]:
    """The journal on each backend in turn: runs.sqlite, then a company's PostgreSQL schema."""
    j = Journal(tmp_path / "runs.sqlite", backend=state_backend)
    await j.open()
    try:
        yield j
    finally:
        await j.close()


def task(task_id: str, agent: str = "writer", **kw: object) -> Task:
    fields: dict[str, object] = {"prompt": f"do {task_id}", "source": "operator", "created": T0}
    fields.update(kw)
    return Task(id=task_id, agent=agent, **fields)  # type: ignore[arg-type]


async def finished_run(
    j: Journal,
    t: Task,
    run_id: str,
    started: float,
    *,
    status: RunStatus = RunStatus.OK,
    answer: str = "done",
) -> None:
    await j.add_task(t, started)
    await j.start_run(t, run_id, 1, started)
    await j.append_step(
        run_id,
        1,
        "llm",
        {
            "model": "claude-sonnet-5-5",
            "content": [{"type": "text", "text": answer}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "cost": "0.0001",
            "offline": False,
            "request_id": None,
        },
        started + 1,
    )
    await j.finish_run(
        RunOutcome(
            task_id=t.id,
            run_id=run_id,
            agent=t.agent,
            status=status,
            started=started,
            ended=started + 2,
            answer=answer,
            cost_usd=0.0001,
            steps=1,
            models=("claude-sonnet-5-5",),
        ),
        "done",
    )


def test_cut_keeps_the_full_size_across_cuts() -> None:
    text = "x" * 20_000
    once = cut(text, STORED_VALUE_CHARS)
    assert once.startswith("x" * STORED_VALUE_CHARS)
    assert once.endswith(" … [cut: 20,000 chars in all]")
    assert full_size(once) == 20_000
    twice = cut(once, 300)
    assert twice == "x" * 300 + " … [cut: 20,000 chars in all]"
    assert cut(once, STORED_VALUE_CHARS) == once  # a stored cut is not cut again
    assert cut("short", 300) == "short"


async def test_the_thread_of_runs_and_who_asked(journal: Journal) -> None:
    await finished_run(
        journal, task("task-a", routine="daily-post", source="routine:daily-post"), "run-a", T0
    )
    await finished_run(journal, task("task-b", reply_to="run-a"), "run-b", T0 + 60)
    await finished_run(journal, task("task-c", reply_to="run-b"), "run-c", T0 + 120)

    a = await journal.transcript("run-a")
    b = await journal.transcript("run-b")
    assert a is not None and b is not None
    assert a["asked_by"]["kind"] == "routine" and a["asked_by"]["who"] == "daily-post"
    assert a["thread"]["reply_to"] is None
    assert [r["run_id"] for r in a["thread"]["replies"]] == ["run-b"]
    assert b["asked_by"]["kind"] == "founder"
    assert b["thread"]["reply_to"]["run_id"] == "run-a"
    assert [r["run_id"] for r in b["thread"]["replies"]] == ["run-c"]
    listed = await journal.runs(limit=5)
    assert [(r["run_id"], r["reply_to"]) for r in listed] == [
        ("run-c", "run-b"),
        ("run-b", "run-a"),
        ("run-a", None),
    ]
    assert await journal.transcript("run-nope") is None


async def test_filters_by_agent_routine_status_and_since(journal: Journal) -> None:
    await finished_run(journal, task("t1", routine="daily-post"), "run-1", T0)
    await finished_run(
        journal, task("t2", routine="daily-post"), "run-2", T0 + DAY, status=RunStatus.FAILED
    )
    await finished_run(journal, task("t3", agent="cfo"), "run-3", T0 + 2 * DAY)
    running = task("t4", routine="daily-post")
    await journal.add_task(running, T0 + 3 * DAY)
    await journal.start_run(running, "run-4", 1, T0 + 3 * DAY)

    async def ids(**kw: object) -> list[str]:
        return [r["run_id"] for r in await journal.runs(**kw)]  # type: ignore[arg-type]

    assert await ids(routine="daily-post") == ["run-4", "run-2", "run-1"]
    assert await ids(routine="daily-post", finished=True, limit=1) == ["run-2"]
    assert await ids(agent="cfo") == ["run-3"]
    assert await ids(status="failed") == ["run-2"]
    assert await ids(since=T0 + DAY) == ["run-4", "run-3", "run-2"]
    assert await ids(since=T0 + DAY, routine="daily-post", status="ok") == []


async def test_a_finished_run_keeps_its_long_values_cut_to_the_bound(journal: Journal) -> None:
    t = task("t-big")
    await journal.add_task(t, T0)
    await journal.start_run(t, "run-big", 1, T0)
    huge = "y" * 50_000
    await journal.append_step(
        "run-big", 1, "tool_start", {"name": "read", "input": {"q": huge}}, T0, key="tu-1"
    )
    await journal.append_step(
        "run-big",
        2,
        "tool_result",
        {"type": "tool_result", "tool_use_id": "tu-1", "content": huge},
        T0,
        key="tu-1",
    )
    # while the run is unfinished its steps are whole: a resume replays them
    (unfinished,) = await journal.unfinished_runs("writer")
    assert unfinished.steps[1].payload["content"] == huge
    await journal.finish_run(
        RunOutcome(
            task_id="t-big",
            run_id="run-big",
            agent="writer",
            status=RunStatus.OK,
            started=T0,
            ended=T0 + 1,
            answer="read it",
        ),
        "done",
    )
    shown = await journal.transcript("run-big")
    assert shown is not None
    (call,) = [s for s in shown["steps"] if s["kind"] == "tool"]
    assert call["name"] == "read"
    assert call["result"] == "y" * STORED_VALUE_CHARS + " … [cut: 50,000 chars in all]"
    assert call["input"]["q"].endswith("[cut: 50,000 chars in all]")
    size = journal.run_sync(
        lambda db: db.execute("SELECT SUM(length(payload)) FROM steps").fetchone()[0]
    )
    assert size < 3 * STORED_VALUE_CHARS


async def test_a_run_ended_by_a_withdrawal_or_an_abandon_is_bounded_too(journal: Journal) -> None:
    huge = "z" * 30_000
    for n, agent in enumerate(("cfo", "coo")):
        t = task(f"t-{agent}", agent=agent)
        await journal.add_task(t, T0)
        await journal.start_run(t, f"run-{agent}", 1, T0)
        await journal.append_step(
            f"run-{agent}",
            1,
            "tool_result",
            {"type": "tool_result", "tool_use_id": f"tu-{n}", "content": huge},
            T0,
            key=f"tu-{n}",
        )
    await journal.withdraw_task("t-cfo", "the asker stopped waiting", T0 + 1)
    await journal.abandon_running("coo", "the daemon restarted", T0 + 1)
    for agent in ("cfo", "coo"):
        shown = await journal.transcript(f"run-{agent}")
        assert shown is not None and shown["status"] == "cancelled"
        (call,) = shown["steps"]
        assert call["result"].endswith(" … [cut: 30,000 chars in all]")
        assert len(call["result"]) < STORED_VALUE_CHARS + 40


async def test_retention_deletes_old_finished_runs_on_the_injected_clock(
    journal: Journal,
) -> None:
    clock = ManualClock(start=T0 + 100 * DAY)
    await finished_run(journal, task("old"), "run-old", T0)  # 100 days old
    await finished_run(journal, task("recent"), "run-recent", T0 + 95 * DAY)
    stuck = task("stuck")
    await journal.add_task(stuck, T0)
    await journal.start_run(stuck, "run-stuck", 1, T0)  # unfinished: resumed, never pruned
    days = {"now": 90}
    retention = RunRetention(journal, clock, lambda: days["now"])

    ctx = StandaloneContext("daemon/run-retention")
    loop = asyncio.create_task(retention.run(ctx))
    try:
        async with asyncio.timeout(5):
            while retention.pruned < 1:
                await asyncio.sleep(0.01)
        assert {r["run_id"] for r in await journal.runs()} == {"run-recent", "run-stuck"}
        assert await journal.get_task("old") is None
        assert await journal.get_task("stuck") is not None
        assert await journal.transcript("run-old") is None
        # a reload shortens the period: the next pass, PRUNE_EVERY later, applies it
        days["now"] = 3
        async with asyncio.timeout(5):
            while clock.sleepers == 0:
                await asyncio.sleep(0.01)
        clock.advance(PRUNE_EVERY)
        async with asyncio.timeout(5):
            while retention.pruned < 2:
                await asyncio.sleep(0.01)
        assert [r["run_id"] for r in await journal.runs()] == ["run-stuck"]
        steps = journal.run_sync(lambda db: db.execute("SELECT COUNT(*) FROM steps").fetchone())
        assert steps[0] == 0  # the stuck run journaled none
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop


async def test_retention_prunes_the_telegram_threads_with_the_runs(
    journal: Journal, tmp_path: Path
) -> None:
    store = AlertStore(tmp_path / "alerts.sqlite")
    await store.open()
    clock = ManualClock(start=T0 + 100 * DAY)
    await store.link(111, [1, 2], "run-old", "writer", T0)  # 100 days old
    await store.link(111, [3], "run-recent", "writer", T0 + 95 * DAY)
    days = {"now": 90}
    retention = RunRetention(
        journal, clock, lambda: days["now"], also={"Telegram thread link(s)": store.prune_threads}
    )
    loop = asyncio.create_task(retention.run(StandaloneContext("daemon/run-retention")))
    try:
        async with asyncio.timeout(5):
            while retention.passes < 1:
                await asyncio.sleep(0.01)
        assert await store.thread(111, 1) is None
        assert await store.thread(111, 2) is None
        assert await store.thread(111, 3) == ("run-recent", "writer")
        # the same period as the runs, read at each pass, on the same schedule
        days["now"] = 3
        async with asyncio.timeout(5):
            while clock.sleepers == 0:
                await asyncio.sleep(0.01)
        clock.advance(PRUNE_EVERY)
        async with asyncio.timeout(5):
            while retention.passes < 2:
                await asyncio.sleep(0.01)
        assert await store.thread(111, 3) is None
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
        await store.close()


def _old_journal(path: Path, version: int) -> None:
    """A journal as companyd wrote it before issue 17: migration 1's tables at ``version``
    (0: a file from before schema versions).
    """
    conn = sqlite3.connect(path)
    conn.executescript(str(MIGRATIONS[0]))
    payload = json.dumps(
        {
            "id": "task-old",
            "agent": "writer",
            "prompt": "old work",
            "source": "routine:daily",
            "created": T0,
            "routine": "daily",
            "consult_chain": [],
        }
    )
    conn.execute(
        "INSERT INTO tasks (id, agent, payload, state, created, updated) "
        "VALUES ('task-old', 'writer', ?, 'done', ?, ?)",
        (payload, T0, T0),
    )
    conn.execute(
        "INSERT INTO runs (id, task_id, agent, routine, state, answer, started, ended, cost, "
        "steps, models) VALUES ('run-old', 'task-old', 'writer', 'daily', 'ok', 'the old answer', "
        "?, ?, '0.002', 1, '[\"claude-sonnet-5-5\"]')",
        (T0, T0 + 5),
    )
    conn.execute(
        "INSERT INTO steps (run_id, seq, kind, key, payload, ts) VALUES ('run-old', 1, 'llm', "
        "NULL, ?, ?)",
        (
            json.dumps(
                {
                    "model": "claude-sonnet-5-5",
                    "content": [{"type": "text", "text": "the old answer"}],
                    "usage": {"input_tokens": 7, "output_tokens": 3},
                    "cost": "0.002",
                    "offline": False,
                    "request_id": None,
                }
            ),
            T0 + 4,
        ),
    )
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("version", [0, 1])
async def test_a_journal_from_before_the_transcript_opens_and_reads(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "runs.sqlite"
    _old_journal(path, version)
    j = Journal(path)
    await j.open()
    try:
        assert j.run_sync(lambda db: db.execute("PRAGMA user_version").fetchone()[0]) == len(
            MIGRATIONS
        )
        (old,) = await j.runs(routine="daily")
        assert old["answer"] == "the old answer" and old["reply_to"] is None
        shown = await j.transcript("run-old")
        assert shown is not None
        assert shown["asked_by"]["kind"] == "routine"
        (step,) = shown["steps"]
        assert step["stop_reason"] is None  # not recorded back then
        assert step["input_tokens"] == 7 and step["output_tokens"] == 3
        assert shown["totals"]["cost_usd"] == pytest.approx(0.002)
        await finished_run(j, task("task-new", reply_to="run-old"), "run-new", T0 + 10)
        again = await j.transcript("run-old")
        assert again is not None
        assert [r["run_id"] for r in again["thread"]["replies"]] == ["run-new"]
    finally:
        await j.close()


async def test_asking_chain_leads_from_a_colleague_s_run_back_to_the_routine_s(
    journal: Journal,
) -> None:
    """`run_job` finds the routine whose run asked a colleague (who asked another) by this
    chain: the asking run first, the routine's run last; an unknown run has none.
    """
    await journal.start_run(task("t1", "ceo", routine="daily-post"), "r1", 1, T0)
    await journal.start_run(task("t2", "cfo", asked_by="r1"), "r2", 1, T0 + 1)
    await journal.start_run(task("t3", "marketing", asked_by="r2"), "r3", 1, T0 + 2)
    assert await journal.asking_chain("r3") == [
        ("r3", "marketing", None),
        ("r2", "cfo", None),
        ("r1", "ceo", "daily-post"),
    ]
    assert await journal.asking_chain("r1") == [("r1", "ceo", "daily-post")]
    assert await journal.asking_chain("r3", depth=2) == [
        ("r3", "marketing", None),
        ("r2", "cfo", None),
    ]
    assert await journal.asking_chain("nope") == []
