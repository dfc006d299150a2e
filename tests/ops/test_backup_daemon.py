"""Backups of a running company.

* Under load — agents writing memory through their runs, a second process writing the same
  memory file through its lock (and compacting it), routines firing every second — a backup
  taken through the control socket restores into a state that ``companyd run`` starts from
  and that holds every write acknowledged before the backup began.
  (A real ``companyd run`` subprocess, restored into another.)
* Scheduled backups: a routine kind that calls no model, recorded in the routine history,
  pruned to ``keep``, and alerted on Telegram when it fails. (The daemon in this process on
  a manual clock: :class:`~companyd.testing.inprocess.InProcessDaemon`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.memory._store import GraphStore
from companyd.ops._archive import verify_archive
from companyd.testing.bot_api import BotApiServer
from companyd.testing.daemon_process import CliResult, DaemonProcess
from companyd.testing.inprocess import InProcessDaemon, cli_in_thread

from .opskit import CHAT, TOKEN

WRITER = Path(__file__).resolve().parents[1] / "memory" / "_crash_writer.py"


def company(tmp: Path, routines: dict[str, Any], alerts: dict[str, Any] | None = None) -> Path:
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Acme Ops", "timezone": "UTC", "budget": {"daily_usd": 100}},
        "defaults": {"budget": {"daily_usd": 50}},
        "agents": {
            "ceo": {"title": "CEO", "instructions": "lead"},
            "cfo": {"title": "CFO", "reports_to": "ceo", "instructions": "money"},
            "coo": {"title": "COO", "reports_to": "ceo", "instructions": "run"},
        },
        "routines": routines,
    }
    if alerts is not None:
        doc["alerts"] = alerts
    path = tmp / "company.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@contextlib.asynccontextmanager
async def memory_writer(graph: Path) -> AsyncIterator[list[str]]:
    """A second process writing the memory file through its lock; yields the names it has
    acknowledged so far (a growing list).
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(WRITER), str(graph), "7", stdout=asyncio.subprocess.PIPE
    )
    acked: list[str] = []

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            parts = line.decode().split()
            if parts and parts[0] == "E":
                acked.append(parts[1])

    reader = asyncio.create_task(read())
    try:
        async with asyncio.timeout(30):
            while not acked:
                await asyncio.sleep(0.05)
        yield acked
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        async with asyncio.timeout(30):
            await proc.wait()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


def rows(db: Path, sql: str) -> set[Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute(sql)}
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_backup_under_load_restores_every_acknowledged_write(tmp_path: Path) -> None:
    config = company(
        tmp_path,
        {
            "tick": {
                "assignee": "cfo",
                "description": "Note the time.",
                "trigger": {"every": "1s"},
            },
            "tock": {"assignee": "coo", "description": "Check on it.", "trigger": {"every": "1s"}},
        },
    )
    state = tmp_path / "s"
    archive = tmp_path / "live.tar.gz"
    daemon = DaemonProcess(config, state, log=tmp_path / "daemon.log", forked=True)
    async with daemon:  # starts it
        async with memory_writer(state / "memory.jsonl") as acked:
            # agents write memory through their runs while the second process writes too
            asks: list[asyncio.Task[dict[str, Any]]] = [
                asyncio.create_task(daemon.call("ask", agent="ceo", question=f"remember item {i}"))
                for i in range(6)
            ]
            await asyncio.sleep(3.0)
            async with asyncio.timeout(60):
                while len(rows(state / "routines.sqlite", "SELECT fire_id FROM fires")) < 2:
                    await asyncio.sleep(0.1)
            # everything acknowledged before the backup begins:
            mem_before = list(acked)
            asks_before = [t.result() for t in asks if t.done()]
            fires_before = rows(
                state / "routines.sqlite", "SELECT fire_id FROM fires WHERE outcome IS NOT NULL"
            )
            runs_before = rows(state / "runs.sqlite", "SELECT id FROM runs WHERE ended IS NOT NULL")
            more = [
                asyncio.create_task(daemon.call("ask", agent="cfo", question=f"later item {i}"))
                for i in range(3)
            ]
            done = await _companyd(
                "backup", "--to", str(archive), "--config", str(config), "--state-dir", str(state)
            )
            assert done.rc == 0, done.err
            assert "by the running daemon" in done.out
            await asyncio.sleep(1.0)  # writes go on after the backup
            async with asyncio.timeout(120):
                await asyncio.gather(*asks, *more)
        assert await daemon.stop() == 0
    assert asks_before, "no ask finished before the backup: the load did not happen"
    assert len(mem_before) > 5 and fires_before and runs_before
    report = verify_archive(archive)
    assert report.ok, report.problems

    restored = tmp_path / "r"
    put_back = await _companyd("restore", str(archive), "--state-dir", str(restored))
    assert put_back.rc == 0, put_back.err
    again = DaemonProcess(config, restored, log=tmp_path / "restored.log", forked=True)
    async with again:  # the restored state starts
        status = await again.call("status")
        assert status["daemon"]["state_dir"] == str(restored)
        assert await again.stop() == 0

    # every write acknowledged before the backup began is there
    with GraphStore(restored / "memory.jsonl", readonly=True) as store:
        names = store.read(lambda g: {e.name for e in g.entities()})
        ceo = store.read(lambda g: g.entity("ceo log"))
    assert ceo is not None
    ceo_notes = list(ceo.observations)
    assert set(mem_before) <= names, sorted(set(mem_before) - names)[:5]
    assert len([n for n in ceo_notes if "remember item" in n]) >= len(asks_before)
    assert fires_before <= rows(restored / "routines.sqlite", "SELECT fire_id FROM fires")
    restored_runs = rows(restored / "runs.sqlite", "SELECT id FROM runs")
    assert runs_before <= restored_runs
    assert {a["run_id"] for a in asks_before} <= restored_runs


async def _companyd(*argv: str) -> CliResult:
    """``companyd ARGV`` by the CLI's entry point in a thread of this process: what the
    command does and says is the point, not its process (a second interpreter's start-up).
    """
    async with asyncio.timeout(120):
        return await asyncio.to_thread(cli_in_thread, list(argv))


@pytest.mark.anyio
async def test_scheduled_backups_are_recorded_pruned_and_alerted_when_they_fail(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the backup directory should be")
    backups = tmp_path / "backups"
    async with BotApiServer(token=TOKEN) as bot:
        config = company(
            tmp_path,
            {
                "nightly": {"backup": {"every": "2s", "keep": 2, "to": str(backups)}},
                "broken": {"backup": {"every": "3s", "to": str(blocker / "sub")}},
                "inside": {"backup": {"every": "3s", "to": str(tmp_path / "s" / "bk")}},
            },
            alerts={
                "min_severity": "warning",
                "telegram": {
                    "bot_token_env": "TELEGRAM_BOT_TOKEN",
                    "chat_ids_env": "TELEGRAM_CHAT_ID",
                    "api_url": bot.url,
                },
            },
        )
        env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": str(CHAT)}
        # the daemon in this process, on a manual clock: the 2 s and 3 s schedules come
        # round as the test moves the clock a second at a time
        async with InProcessDaemon(config, tmp_path / "s", env=env) as daemon:
            async with asyncio.timeout(90):
                while True:
                    history = (await daemon.call("job_history", routine="nightly"))["fires"]
                    if len([f for f in history if f.get("outcome") == "ok"]) >= 3:
                        break
                    await daemon.advance(1.0)
                    await asyncio.sleep(0.05)
                while not any("broken" in m.text for m in bot.messages):
                    await daemon.advance(1.0)
                    await asyncio.sleep(0.05)
            # `companyd jobs run` answers with the outcome (seen failing first: exit 70,
            # AssertionError, though the backup was written)
            ran = await daemon.cli("jobs", "run", "nightly")
            ran_broken = await daemon.cli("jobs", "run", "broken")
            failed = (await daemon.call("job_history", routine="broken"))["fires"]
            inside = await daemon.cli("jobs", "run", "inside")
            jobs = await daemon.cli("jobs")
            doctor = await daemon.cli("doctor", "--offline")
    ok = [f for f in history if f.get("outcome") == "ok"]
    assert all("backup written" in (f.get("reason") or "") for f in ok), ok
    assert all(f.get("cost_usd") in (0, 0.0, None) for f in ok)  # no model was called
    kept = sorted(backups.iterdir())
    assert len(kept) == 2, kept  # keep: 2
    assert all(verify_archive(p).ok for p in kept)
    assert failed and failed[0]["outcome"] == "failed"
    assert "cannot create the backup directory" in failed[0]["reason"]
    alert = next(m.text for m in bot.messages if "broken" in m.text)
    assert "backup directory" in alert or "failed" in alert
    assert jobs.rc == 0 and "nightly" in jobs.out
    assert ran.rc == 0 and ran.out.startswith(f"backup written: {backups}/"), (ran.out, ran.err)
    assert ran_broken.rc == 1 and "cannot create the backup directory" in ran_broken.err
    # a routine's backup.to inside the state directory is refused before it is created
    assert inside.rc == 1 and "inside the state directory" in inside.err, inside.err
    assert not (tmp_path / "s" / "bk").exists()
    # doctor asked the running daemon which company.yaml it loaded, and when
    config_line = doctor.out.splitlines()[0]
    assert config_line.startswith("ok       config"), doctor.out
    assert "the running daemon loaded this version" in config_line


@pytest.mark.anyio
async def test_backups_the_stop_comes_under_write_nothing_and_say_run_it_again(
    tmp_path: Path,
) -> None:
    """A deploy restarts the daemon while the scheduled backup runs and ``companyd backup``
    waits its turn: each is stopped with nothing half-written in the directory (no archive,
    no staging, no temporary file); the founder is told so at once, exit 75 — not cut off
    after the control socket's 5 s drain while the copy goes on unseen — and the routine's
    history says cancelled and nothing written (no failure alerted, no archive appearing
    after the record). The restart takes the routine's backup at once, and once: one
    archive, recorded as a ``catch_up`` fire saying what it makes up for.

    The backups are slow because another process holds the memory file's lock (as a
    ``serve-mcp`` compaction of a large memory would): the test holds it with the same
    ``flock`` the store takes.
    """
    import filelock

    dest = tmp_path / "backups"
    dest.mkdir()
    config = company(tmp_path, {"nightly": {"backup": {"every": "2s", "keep": 2, "to": str(dest)}}})
    state = tmp_path / "s"

    def staging() -> bool:
        return any(p.name.startswith(".companyd-backup-") for p in dest.iterdir())

    async with InProcessDaemon(config, state) as daemon:
        memory = state / "memory.jsonl"
        if not memory.exists():
            memory.write_text("")
        held = filelock.FileLock(str(memory.with_name(memory.name + ".lock")))
        held.acquire(timeout=10)
        try:
            # the routine's backup: its stores are staged, it waits for the memory
            await daemon.advance_until(staging, limit=10.0, step=1.0)
            backup = asyncio.create_task(daemon.cli("backup", "--to", str(dest)))
            await asyncio.sleep(0.3)  # the CLI's backup waits for the routine's (one at a time)
            stopping = asyncio.create_task(daemon.stop())
            async with asyncio.timeout(4):  # at once: well inside the control's 5 s drain
                answered = await backup
        finally:
            held.release()
        await stopping
    assert answered.rc == 75, (answered.rc, answered.out, answered.err)
    assert "the daemon stopped before the backup finished" in answered.err, answered.err
    assert "nothing was written; run it again" in answered.err, answered.err
    await asyncio.sleep(0.3)  # an unseen copy going on would show by now
    assert sorted(p.name for p in dest.iterdir()) == []
    conn = sqlite3.connect(f"file:{state / 'routines.sqlite'}?mode=ro", uri=True)
    try:
        fires = conn.execute(
            "SELECT outcome, reason FROM fires WHERE routine = 'nightly'"
        ).fetchall()
    finally:
        conn.close()
    assert len(fires) == 1, fires
    assert fires[0][0] == "cancelled" and "nothing was written" in fires[0][1], fires
    assert "it is taken again when the daemon starts" in fires[0][1], fires

    # the restart (on the same clock: no fire time passed meanwhile) takes it again
    def archives() -> list[str]:
        return sorted(p.name for p in dest.iterdir() if p.name.endswith(".tar.gz"))

    async with InProcessDaemon(config, state, clock=daemon.clock) as again:
        async with asyncio.timeout(30):
            while not archives():
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a second backup would have begun by now
        history = (await again.call("job_history", routine="nightly"))["fires"]
    assert len(archives()) == 1, archives()
    assert all(verify_archive(dest / name).ok for name in archives())
    assert [(f["kind"], f["outcome"]) for f in history] == [
        ("catch_up", "ok"),
        ("scheduled", "cancelled"),
    ], history
    assert "interrupted by the stop; taken again at start" in history[0]["reason"], history
