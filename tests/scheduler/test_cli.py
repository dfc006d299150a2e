"""``companyd jobs``, ``jobs history`` and ``jobs run`` on a state dir a real scheduler wrote."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from companyd.cli import main
from companyd.clock import ManualClock
from companyd.config import load_config, state_backend
from companyd.events import EventBus
from companyd.runs import RunStatus, Task
from companyd.scheduler._service import RoutineScheduler
from companyd.scheduler._sim import advance
from companyd.storage import Backend

from .conftest import ScriptedSink, company_text

ROUTINES = """\
report:
  assignee: coo
  description: Write the report.
  trigger: {every: 6h}
  catch_up: {policy: run_once, grace: 7h}
later:
  assignee: marketing
  description: Never fired yet.
  trigger: {cron: "0 9 1 1 *", timezone: UTC}
dormant:
  assignee: coo
  description: Switched off.
  trigger: {every: 1h}
  enabled: false
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """company.yaml and a state dir holding three days of 'report': twelve fires, the
    eleventh failed.
    """
    root = tmp_path_factory.mktemp("cli")
    cfg_path = root / "company.yaml"
    # the company in India (no summer time), one routine's schedule in UTC
    cfg_path.write_text(company_text(ROUTINES, timezone="Asia/Kolkata"))
    state = root / "state"
    seen: list[Task] = []

    def script(task: Task) -> tuple[RunStatus, str | None, float]:
        seen.append(task)
        if len(seen) == 11:
            return RunStatus.FAILED, "HTTP 529 overloaded after 3 attempts", 0.0
        return RunStatus.OK, None, 0.25

    # End the history one minute before the latest 6-hour grid point, so that this fire
    # time is owed (run_once, grace 7h) to a daemon starting now.
    grid = time.time() // 21600 * 21600

    async def run() -> None:
        clock = ManualClock(start=grid - 3 * 86400 - 60)
        sink = ScriptedSink(script={"report": script})
        sched = RoutineScheduler(
            load_config(cfg_path),
            sink,
            state_dir=state,
            bus=EventBus(clock),
            clock=clock,
            max_sleep=None,
        )
        async with asyncio.timeout(30):
            await sched.start()
            await advance(sched, clock, 3 * 86400)
            await sched.stop()

    asyncio.run(run())
    assert len(seen) == 12
    return cfg_path, state


def jobs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_jobs_table(written: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cfg, state = written
    rc, out, err = jobs(capsys, "jobs", "--config", str(cfg), "--state-dir", str(state))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split() == [
        "ROUTINE",
        "AGENT",
        "SCHEDULE",
        "NEXT",
        "FIRE",
        "LAST",
        "7-DAY",
        "SUCCESS",
    ]
    report = next(line for line in lines if line.startswith("report"))
    assert "every 6h" in report
    assert "91.7% (11/12)" in report
    assert "ok " in report and " ago" in report
    # The latest fire time (within the last 6 h, after the history ends) is owed at start.
    assert "at start (catch-up of" in report
    later = next(line for line in lines if line.startswith("later"))
    assert "never fired" in later and "— (none due)" in later
    assert "cron '0 9 1 1 *' UTC" in later
    # its next fire on the company's clock, as the founder reads every other time
    assert "-01-01 14:30 IST (in " in later, later
    dormant = next(line for line in lines if line.startswith("dormant"))
    assert "disabled" in dormant


def test_jobs_json(written: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cfg, state = written
    rc, out, _ = jobs(capsys, "jobs", "--json", "--config", str(cfg), "--state-dir", str(state))
    assert rc == 0
    data = json.loads(out)
    assert data["live"] is False
    by = {r["routine"]: r for r in data["routines"]}
    assert by["report"]["success_7d"] == {
        "due": 12,
        "ok": 11,
        "rate": pytest.approx(11 / 12),
        "unverified": 0,
    }
    assert by["report"]["last"]["outcome"] == "ok"
    assert by["report"]["catch_up_pending"] is not None
    assert by["later"]["last"] is None and by["later"]["next_fire"].endswith("T09:00:00+00:00")
    assert by["dormant"]["enabled"] is False and by["dormant"]["next_fire"] is None


def test_history(written: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cfg, state = written
    rc, out, err = jobs(
        capsys,
        "jobs",
        "history",
        "report",
        "--limit",
        "3",
        "--config",
        str(cfg),
        "--state-dir",
        str(state),
    )
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "report (coo) — every 6h"
    assert lines[1].split()[:3] == ["SCHEDULED", "KIND", "OUTCOME"]
    assert len(lines) == 6
    assert lines[5] == "shown: 3 due run(s): 2 ok · 0 unverified · 1 failed"
    assert " ok " in lines[2] and "$0.2500" in lines[2]
    assert " failed " in lines[3] and "HTTP 529 overloaded after 3 attempts" in lines[3]
    # Options may also come before the action.
    rc, out, _ = jobs(
        capsys,
        "jobs",
        "--json",
        "--config",
        str(cfg),
        "--state-dir",
        str(state),
        "history",
        "report",
        "--limit",
        "2",
    )
    fires = json.loads(out)["fires"]
    assert rc == 0 and [f["outcome"] for f in fires] == ["ok", "failed"]
    assert fires[1]["reason"] == "HTTP 529 overloaded after 3 attempts"
    assert fires[0]["run_id"].startswith("run-") and fires[0]["cost_usd"] == 0.25


def test_history_from_the_daemon_reads_the_company_s_clock_as_from_the_files(
    written: tuple[Path, Path],
) -> None:
    # A routine scheduled in UTC ("later") of a company in India: its history is on the
    # company's clock whoever answers — the files (`jobs history` with no daemon) or the
    # running daemon's job_history, printed by format_history_result — as `runs`, the
    # alerts and the jobs table read it; the schedule alone keeps its own zone.
    from companyd.scheduler import format_history, format_history_result, history_data
    from companyd.scheduler._records import FireRecord

    cfg = load_config(written[0])
    at = 1_800_000_000.0  # 2027-01-15 08:00 UTC, 13:30 IST
    fire = FireRecord(
        fire_id="fire-1",
        routine="later",
        agent="marketing",
        kind="manual",
        scheduled=at,
        fired=at,
        started=at,
        ended=at + 4,
        outcome="ok",
        cost_usd=0.25,
        run_id="run-1",
    )
    offline = format_history(cfg.routines["later"], "later", [fire], cfg.timezone)
    live = format_history_result(
        json.loads(json.dumps(history_data(cfg.routines, "later", [fire]))), cfg.timezone
    )
    assert live == offline
    assert live.splitlines()[0] == "later (marketing) — cron '0 9 1 1 *' UTC"
    assert live.splitlines()[2].split()[:6] == [
        "2027-01-15",
        "13:30",
        "IST",
        "manual",
        "ok",
        "13:30:00",
    ], live
    # COST as `companyd runs` prints it (format_usd, one precision for the column, at least
    # four decimals): a run of a thousandth of a cent is not "$0.0000"
    cheap = FireRecord(
        fire_id="fire-2",
        routine="later",
        agent="marketing",
        kind="manual",
        scheduled=at + 60,
        fired=at + 60,
        started=at + 60,
        ended=at + 64,
        outcome="ok",
        cost_usd=0.00001,
        run_id="run-2",
    )
    table = format_history(cfg.routines["later"], "later", [cheap, fire], cfg.timezone)
    assert [line.split()[7] for line in table.splitlines()[2:4]] == ["$0.00001", "$0.25000"]


def test_unknown_routine_and_run_without_daemon(
    written: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, state = written
    base = ["--config", str(cfg), "--state-dir", str(state)]
    rc, out, err = jobs(capsys, "jobs", "history", "reprot", *base)
    assert rc == 1 and out == ""
    assert "no routine 'reprot'" in err and "did you mean 'report'?" in err
    rc, out, err = jobs(capsys, "jobs", "run", "report", *base)
    assert rc == 69
    assert "needs a running daemon" in err and "Traceback" not in err
    rc, _, err = jobs(capsys, "jobs", "run", "dormant", *base)
    assert rc == 1 and "disabled" in err
    with pytest.raises(SystemExit) as exit_:
        main(["jobs", "history", "report", "--limit", "0", *base])
    assert exit_.value.code == 2
    assert "expected a positive whole number, got '0'" in capsys.readouterr().err


def test_no_history_yet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "company.yaml"
    cfg.write_text(company_text(ROUTINES))
    rc, out, _ = jobs(capsys, "jobs", "--config", str(cfg), "--state-dir", str(tmp_path / "s"))
    assert rc == 0
    assert "no routine history yet" in out
    assert not (tmp_path / "s").exists()  # reading never creates the state dir


def test_the_installed_command(written: tuple[Path, Path]) -> None:
    cfg, state = written
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "companyd",
            "jobs",
            "--json",
            "--config",
            str(cfg),
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert {r["routine"] for r in json.loads(proc.stdout)["routines"]} == {
        "report",
        "later",
        "dormant",
    }


def test_jobs_and_history_read_a_postgres_history_without_a_daemon(
    tmp_path: Path,
    pg_backend: Backend,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``state.backend: postgres``: the CLI reads the company's schema (read-only), before
    any daemon wrote (no history yet, nothing created) and after one did.
    """
    assert pg_backend.dsn is not None
    monkeypatch.setenv("COMPANYD_DATABASE_URL", pg_backend.dsn)
    cfg_path = tmp_path / "company.yaml"
    cfg_path.write_text(
        company_text(ROUTINES) + f"state:\n  backend: postgres\n  schema: {pg_backend.schema}\n"
    )
    state = tmp_path / "state"
    base = ["--config", str(cfg_path), "--state-dir", str(state)]
    rc, out, err = jobs(capsys, "jobs", *base)
    assert rc == 0, err
    assert f"no routine history yet in postgres schema {pg_backend.schema!r}" in out

    grid = time.time() // 21600 * 21600

    async def run() -> None:
        clock = ManualClock(start=grid - 12 * 3600 - 60)
        cfg = load_config(cfg_path)
        sched = RoutineScheduler(
            cfg,
            ScriptedSink(),
            state_dir=state,
            bus=EventBus(clock),
            clock=clock,
            max_sleep=None,
            backend=state_backend(cfg),
        )
        async with asyncio.timeout(30):
            await sched.start()
            await advance(sched, clock, 12 * 3600)
            await sched.stop()

    asyncio.run(run())
    rc, out, err = jobs(capsys, "jobs", "--json", *base)
    assert rc == 0, err
    data = json.loads(out)
    by = {r["routine"]: r for r in data["routines"]}
    assert data["history"] == f"postgres schema {pg_backend.schema!r}"
    assert by["report"]["success_7d"] == {"due": 2, "ok": 2, "rate": 1.0, "unverified": 0}
    rc, out, err = jobs(capsys, "jobs", "history", "report", "--json", *base)
    assert rc == 0, err
    assert [f["outcome"] for f in json.loads(out)["fires"]] == ["ok", "ok"]
    assert not state.exists()  # the history is in the database: no routines.sqlite


TWO_AT_14 = """\
cut:
  assignee: coo
  description: Cut short by the stop.
  trigger: {cron: "0 14 * * *", timezone: UTC}
ended:
  assignee: marketing
  description: Ended as the daemon stopped.
  trigger: {cron: "0 14 * * *", timezone: UTC}
"""


def test_history_without_a_daemon_never_says_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon stopped (planned) during two runs: their fires stay open until the next
    start. Offline, ``jobs history`` does not call them running: one says it was interrupted
    by the stop, the other the outcome the journal recorded — and the store is not written
    (the next start owns closing them).
    """
    from companyd.runs import Journal, RunOutcome

    from .conftest import ScriptedSink

    cfg_path = tmp_path / "company.yaml"
    cfg_path.write_text(company_text(TWO_AT_14, timezone="Asia/Kolkata"))
    state = tmp_path / "state"
    start = 1_799_071_170.0  # 2027-01-04 13:59:30 UTC

    async def run() -> None:
        clock = ManualClock(start=start)
        sink = ScriptedSink(hold=True)
        sched = RoutineScheduler(
            load_config(cfg_path),
            sink,
            state_dir=state,
            bus=EventBus(clock),
            clock=clock,
            max_sleep=None,
        )
        async with asyncio.timeout(10):
            await sched.start()
            await advance(sched, clock, 60, runs=False)
            while sink.active < 2:
                await asyncio.sleep(0.01)
            sched.planned_stop("daemon stopped: signal")
            await sched.stop(drain=False)
            [task] = [t for t in sink.tasks if t.routine == "ended"]
            journal = Journal(state / "runs.sqlite")
            await journal.open()
            await journal.start_run(task, "run-ended", 1, start + 31)
            await journal.finish_run(
                RunOutcome(
                    task_id=task.id,
                    run_id="run-ended",
                    agent=task.agent,
                    status=RunStatus.CIRCUIT_BREAKER,
                    started=start + 31,
                    ended=start + 40,
                    cost_usd=0.02,
                    reason="max_seconds 600 reached",
                ),
                "done",
            )
            await journal.close()
        sink.gate.set()

    asyncio.run(run())
    before = (state / "routines.sqlite").read_bytes()
    argv = ("--config", str(cfg_path), "--state-dir", str(state))
    rc, out, err = jobs(capsys, "jobs", "history", "cut", *argv)
    assert rc == 0, err
    assert "running" not in out, out
    assert " interrupted " in out, out
    # on the company's clock (IST): the planned stop at 14:00 UTC is 19:30 IST
    assert "interrupted by the stop at 2027-01-04 19:30 IST" in out, out
    rc, out, err = jobs(capsys, "jobs", "history", "ended", *argv)
    assert rc == 0, err
    assert "running" not in out, out
    assert " circuit_breaker " in out and "run-ended" in out and "$0.0200" in out, out
    assert "max_seconds 600 reached" in out, out
    rc, out, _ = jobs(capsys, "jobs", "--json", "history", "ended", *argv)
    [fire] = json.loads(out)["fires"]
    assert fire["outcome"] == "circuit_breaker" and fire["run_id"] == "run-ended", fire
    rc, out, err = jobs(capsys, "jobs", *argv)  # nor does the jobs table
    assert rc == 0, err
    assert "running" not in out and "1 not closed (no daemon here" in out, out
    # its LAST column says what `jobs history` says of the open fire, not "never fired"
    last = {line.split()[0]: line for line in out.splitlines()[1:3]}
    assert "never fired" not in out, out
    assert " interrupted " in last["cut"] and " circuit_breaker " in last["ended"], out
    assert (state / "routines.sqlite").read_bytes() == before  # nothing written


def test_a_daemons_table_counts_from_the_daemons_own_now(
    written: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # "in 33.2d" is counted from the daemon's now (the answer's `generated`), the clock its
    # next fires are on — a time-scaled benchmark daemon runs days ahead of this process
    import re
    from datetime import datetime, timedelta

    from companyd.cli._scheduler import _print_live_jobs

    cfg, state = written
    rc, out, err = jobs(capsys, "jobs", "--json", "--config", str(cfg), "--state-dir", str(state))
    assert rc == 0, err
    result = json.loads(out)

    def days_to_later(generated: datetime) -> float:
        _print_live_jobs({**result, "generated": generated.isoformat()}, "UTC")
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("later"))
        found = re.search(r"\(in ([\d.]+)d\)", line)
        assert found, line
        return float(found.group(1))

    # a daemon 10 and 20 days behind this process (so the yearly fire is days away in both,
    # whatever today's date): ten days apart in its table too
    now = datetime.fromisoformat(result["generated"])
    assert days_to_later(now - timedelta(days=10)) == pytest.approx(
        days_to_later(now - timedelta(days=20)) - 10, abs=0.11
    )
