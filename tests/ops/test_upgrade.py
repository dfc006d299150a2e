"""Upgrades that cannot brick the company (docs/upgrade.md), with a real ``companyd run``.

* A state made by the previous schema version — ``runs.sqlite`` built by running only the
  journal's first migration step, as the companyd before the ``threads`` step left it — is
  backed up (``<state>/backups/pre-upgrade-<version>-<time>.tar.gz``, verified, holding the
  store at its old step) before the daemon migrates it, and the migration is logged.
* A state from a "future" companyd (a store at a step this code does not know) is refused
  with exit 78 and a message naming the way back; the file is left untouched.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from companyd import __version__
from companyd._sqlite import apply_migrations
from companyd.errors import EX_CONFIG
from companyd.ops._archive import verify_archive
from companyd.ops._upgrade import KNOWN_STORES, StateTooNew, inspect_state, prepare_upgrade
from companyd.runs._schema import MIGRATIONS as JOURNAL_STEPS
from companyd.testing.daemon_process import DaemonProcess
from companyd.testing.inprocess import cli_in_thread

from .opskit import write_company

pytestmark = pytest.mark.anyio


def old_runs_store(state: Path) -> Path:
    """``runs.sqlite`` as the previous schema version left it: only the first step applied,
    with one run recorded.
    """
    assert len(JOURNAL_STEPS) >= 2, "the journal must have a step the old state lacks"
    state.mkdir(mode=0o700, exist_ok=True)
    path = state / "runs.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        apply_migrations(conn, JOURNAL_STEPS[:1], path=path)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert tables, "the first step made the journal's tables"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    finally:
        conn.close()
    return path


def future_store(state: Path, name: str = "spend.sqlite") -> Path:
    """A store at a schema step this companyd does not know (a newer one wrote it)."""
    state.mkdir(mode=0o700, exist_ok=True)
    path = state / name
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE from_the_future (x)")
        conn.execute(f"PRAGMA user_version = {KNOWN_STORES[name] + 7}")
    finally:
        conn.close()
    return path


def version_of(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


async def test_an_old_state_is_backed_up_and_verified_before_it_is_migrated(
    tmp_path: Path,
) -> None:
    config = write_company(tmp_path)
    state = tmp_path / "s"
    runs = old_runs_store(state)
    daemon = DaemonProcess(config, state, log=tmp_path / "daemon.log")
    async with daemon:
        status = await daemon.call("status")
        assert status["daemon"]["state_dir"] == str(state)
        assert await daemon.stop() == 0

    backups = sorted((state / "backups").glob("pre-upgrade-*.tar.gz"))
    assert len(backups) == 1, daemon.log_text()[-3000:]
    backup = backups[0]
    assert backup.name.startswith(f"pre-upgrade-{__version__}-")
    report = verify_archive(backup)
    assert report.ok, report.problems
    listed = {m["name"]: m for m in report.manifest["members"]}
    assert listed["state/runs.sqlite"]["schema_version"] == 1  # the state before migrating
    # the daemon then migrated the live store to the current step
    assert version_of(runs) == len(JOURNAL_STEPS)
    messages = [r.get("msg", "") for r in daemon.records()]
    migrating = f"migrating runs.sqlite from schema step 1 to {len(JOURNAL_STEPS)}"
    assert any(migrating in m for m in messages), messages[:40]
    assert any("pre-upgrade backup written and verified" in m for m in messages)
    # a second start has nothing to migrate: no second backup
    again = DaemonProcess(config, state, log=tmp_path / "again.log")
    async with again:
        assert await again.stop() == 0
    assert len(list((state / "backups").glob("pre-upgrade-*.tar.gz"))) == 1


def test_a_state_from_a_newer_companyd_is_refused_with_78_and_the_way_back(
    tmp_path: Path,
) -> None:
    config = write_company(tmp_path)
    state = tmp_path / "s"
    spend = future_store(state)
    before = spend.read_bytes()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "companyd",
            "run",
            "--offline",
            "--config",
            str(config),
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == EX_CONFIG, proc.stderr
    err = proc.stderr
    assert "written by a newer companyd" in err
    assert "spend.sqlite at schema step" in err
    assert "upgrade companyd" in err
    assert "companyd restore" in err and "--force" in err
    assert "Traceback" not in err
    assert spend.read_bytes() == before  # untouched
    assert not (state / "backups").exists()


def test_the_way_back_names_the_newest_pre_upgrade_backup(tmp_path: Path) -> None:
    from companyd.config import load_config

    config = load_config(write_company(tmp_path))
    state = tmp_path / "s"
    old_runs_store(state)
    first = prepare_upgrade(config, state, now=1_700_000_000)
    assert first is not None and first.is_file()
    # a newer companyd migrated it further; this one must refuse and point at the backup
    future_store(state, "runs.sqlite").unlink()
    future_store(state, "runs.sqlite")
    with pytest.raises(StateTooNew) as caught:
        prepare_upgrade(config, state)
    text = str(caught.value)
    assert f"companyd restore {str(first)!r}" in text
    assert [s.name for s in inspect_state(state) if s.too_new] == ["runs.sqlite"]
    # and the way back works as written: restore the pre-upgrade backup over the state
    words = shlex.split(text[text.index("`companyd restore") + 1 :].split("`", 1)[0])
    assert words[0] == "companyd"
    done = cli_in_thread(words[1:])  # the CLI's entry point, in this process
    assert done.rc == 0, done.err
    assert version_of(state / "runs.sqlite") == 1  # the state from before the upgrade
    assert not [s for s in inspect_state(state) if s.too_new]


def test_the_systemd_units_do_not_restart_on_78() -> None:
    units = Path(__file__).resolve().parents[2] / "src/companyd/daemon/unit_files"
    for unit in sorted(units.glob("*.service")):
        text = unit.read_text()
        if "\nRestart=" not in text:
            continue  # a one-shot alert unit: nothing restarts it
        lines = [ln for ln in text.splitlines() if ln.startswith("RestartPreventExitStatus=")]
        assert lines and "78" in lines[0].split("=", 1)[1].split(), unit.name


def test_the_manifest_is_json(tmp_path: Path) -> None:
    from companyd.config import load_config

    config = load_config(write_company(tmp_path))
    state = tmp_path / "s"
    old_runs_store(state)
    path = prepare_upgrade(config, state, now=1_700_000_000)
    assert path is not None
    assert path.name == f"pre-upgrade-{__version__}-20231114T221320Z.tar.gz"
    with tarfile.open(path) as tar:
        f = tar.extractfile("manifest.json")
        assert f is not None
        assert json.load(f)["companyd"]


def test_a_store_refusing_a_newer_file_at_open_is_told_apart_from_a_crash() -> None:
    # behind the check at start (e.g. a PostgreSQL store, which is not inspected before it
    # opens): the daemon exits 78, not 1, when a child failed on a store from a newer
    # companyd — restarting could not help
    from companyd._sqlite import SchemaTooNew
    from companyd.daemon._main import _written_by_newer
    from companyd.spend import LedgerError

    try:
        try:
            raise SchemaTooNew("spend.sqlite", 9, 1, "spend ledger", "")
        except SchemaTooNew as exc:
            raise LedgerError(str(exc)) from exc
    except LedgerError as wrapped:
        assert _written_by_newer(wrapped)
    assert not _written_by_newer(RuntimeError("boom"))
    assert not _written_by_newer(None)
