"""Issue 15 item 8 for the run journal, on a real full disk (a small tmpfs): the step of a
call that was already paid for is kept when the journal cannot write it, and written once
space returns, so a resumed run replays it instead of paying for the call again.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkit import running_company, write_company
from companyd._fs import DiskAlarm, is_disk_failure
from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.runs import Journal, LlmStep, Task
from companyd.testing.disk import DiskUnavailable, fill, small_disk
from companyd.testing.messages_api import MessagesAPIServer, RecordedRequest, Reply, reply_text

pytestmark = pytest.mark.anyio


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with small_disk(tmp_path / "disk", "16m") as d:
            yield d
    except DiskUnavailable as exc:
        pytest.skip(f"no real full disk here: {exc}")


def _llm_steps(path: Path, run_id: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT payload FROM steps WHERE run_id = ? AND kind = 'llm' ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


async def test_a_paid_step_the_full_disk_refused_is_written_when_space_returns(
    disk: Path,
) -> None:
    """Chaos run (seed 1): a call was served and paid, its ledger row was held, but its
    journal step was lost (25 calls served, 24 journaled): a restart would pay it again.
    """
    state = disk / "state"
    state.mkdir()
    journal = Journal(state / "runs.sqlite")
    await journal.open()
    try:
        task = Task(
            id="task-1", agent="cfo", prompt="close the month", source="operator", created=0.0
        )
        await journal.add_task(task, 0.0)
        await journal.start_run(task, "run-1", 1, 0.0)
        filler = fill(disk)
        padding = "x" * 200_000  # more than SQLite can squeeze into free pages
        with pytest.raises(Exception) as refused:
            payload: LlmStep = {
                "model": "claude-x",
                "content": [{"type": "text", "text": padding}],
                "usage": {"input_tokens": 1, "output_tokens": 1},
                "cost": "0.01",
                "offline": False,
                "request_id": "req_1",
            }
            await journal.append_step("run-1", 1, "llm", payload, 1.0, paid=True)
        assert is_disk_failure(refused.value), refused.value
        assert _llm_steps(state / "runs.sqlite", "run-1") == []
        os.unlink(filler)
        await journal.update_run_totals("run-1", cost="0.01", steps=1, models=[], offline=False)
        [step] = _llm_steps(state / "runs.sqlite", "run-1")
        assert '"req_1"' in step
    finally:
        await journal.close()


async def test_the_journal_reports_its_outage_and_its_recovery_to_the_disk_alarm(
    disk: Path,
) -> None:
    """Chaos review: the run journal reported ``failed`` (through staff and agents) but never
    ``recovered``, so an outage seen by the journal alone never cleared, and no later outage
    raised an alert.
    """
    state = disk / "state"
    state.mkdir()
    bus = EventBus(ManualClock(start=0.0))
    journal = Journal(state / "runs.sqlite", alarm=DiskAlarm.of(bus))
    await journal.open()
    try:
        task = Task(id="task-1", agent="cfo", prompt="p" * 200_000, source="operator", created=0)
        filler = fill(disk)
        with pytest.raises(Exception) as refused:
            await journal.add_task(task, 0.0)
        assert is_disk_failure(refused.value), refused.value
        assert [e.kind for e in bus.recent({"state_disk_full", "state_disk_recovered"})] == [
            "state_disk_full"
        ]
        assert DiskAlarm.of(bus).failing == {"run journal"}
        await journal.queued_tasks("cfo")  # a read is not a write that succeeded
        assert DiskAlarm.of(bus).failing == {"run journal"}
        os.unlink(filler)
        await journal.add_task(task, 1.0)
        kinds = [e.kind for e in bus.recent({"state_disk_full", "state_disk_recovered"})]
        assert kinds == ["state_disk_full", "state_disk_recovered"]
        assert not DiskAlarm.of(bus).failing
    finally:
        await journal.close()


async def test_a_call_served_as_the_disk_fills_is_journaled_once_space_returns(
    tmp_path: Path, disk: Path
) -> None:
    """The chaos run's shape against the real daemon: the disk fills while a model call is
    in flight; the call is served (paid), its ledger row is held and its journal step
    refused. Once space returns every served call is a journaled step, none twice.
    """
    cfg = write_company(tmp_path, {"ceo": {"title": "CEO", "instructions": "You lead."}})
    filler: list[Path] = []

    def model(request: RecordedRequest) -> Reply:
        if not filler and len(srv.requests) == 2:  # the second call: fill while it is served
            filler.append(fill(disk))
        return reply_text("Done.")

    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, disk / "state", srv) as d:
            first = await d.ask("ceo", "Before the disk fills?")
            assert first.status == "ok", first
            failed = await d.ask("ceo", "And now?")
            assert failed.status == "failed", failed
            assert "state disk full" in (failed.reason or ""), failed
            os.unlink(filler[0])
            await d.resume("ceo")
            again = await d.ask("ceo", "Space is back?")
            assert again.status == "ok", again
        served = [
            f"req_standin_{r.response['id'].removeprefix('msg_standin_')}"
            for r in srv.requests
            if r.outcome == "served" and r.response
        ]
    conn = sqlite3.connect(disk / "state" / "runs.sqlite")
    try:
        rows = conn.execute("SELECT payload FROM steps WHERE kind = 'llm'").fetchall()
    finally:
        conn.close()
    journaled = [json.loads(p).get("request_id") for (p,) in rows]
    assert len(served) == 3
    assert sorted(journaled) == sorted(served)
