"""``companyd backup``, ``backup verify`` and ``restore`` on a stopped company.

The archive and its manifest, a flipped byte in any member caught, restores that refuse
what they must and move instead of delete. (A backup taken while the company runs under chaos is
test_backup_chaos.py.)
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sqlite3
import stat
import tarfile
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companyd.cli import main
from companyd.config import load_config
from companyd.daemon._lock import StateLock
from companyd.errors import EX_TEMPFAIL
from companyd.ops._archive import BackupError, verify_archive, write_archive
from companyd.ops._backup import company_tag, prune_backups, take_backup
from companyd.ops._restore import restore_backup
from companyd.testing.disk import DiskUnavailable, fill, small_disk

from .opskit import write_company


@pytest.fixture(scope="module")
def company(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A company whose state holds real runs, spend and memory (two offline asks)."""
    tmp = tmp_path_factory.mktemp("company")
    config = write_company(tmp)
    for question in ("record the plan", "record the budget"):
        rc = main(["ask", "ceo", question, "--offline", "--config", str(config)])
        assert rc == 0
    return config


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def rewrite(src: Path, dst: Path, member: str, offset: int = 0) -> None:
    """Copy the archive with one byte of ``member`` flipped (recompressed: the gzip layer
    is intact, only the member's content differs).
    """
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for info in tin.getmembers():
            f = tin.extractfile(info)
            assert f is not None
            data = bytearray(f.read())
            if info.name == member:
                data[min(offset, len(data) - 1)] ^= 0x01
            tout.addfile(info, io.BytesIO(bytes(data)))


def test_backup_holds_every_store_memory_and_config_with_a_manifest(
    company: Path, tmp_path: Path
) -> None:
    config = load_config(company)
    state = config.state_dir()
    result = take_backup(config, state, tmp_path)
    assert result.path.parent == tmp_path and result.path.name.startswith("companyd-acme-ops-")
    assert stat.S_IMODE(result.path.stat().st_mode) == 0o600
    names = {m.name for m in result.members}
    assert {"state/runs.sqlite", "state/spend.sqlite", "memory/memory.jsonl"} <= names
    assert {"config/company.yaml", "config/resolved.json"} <= names
    with tarfile.open(result.path, "r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert tar.extractfile("config/company.yaml").read() == company.read_bytes()  # type: ignore[union-attr]
    assert manifest["format"] == "companyd-backup/1" and manifest["company"] == "Acme Ops"
    assert manifest["python"] and manifest["sqlite"] and "anthropic" in manifest["libraries"]
    assert manifest["database"] is None  # every store is a file in the archive
    runs = next(m for m in manifest["members"] if m["name"] == "state/runs.sqlite")
    assert runs["schema_version"] >= 1 and len(runs["sha256"]) == 64 and runs["size"] > 0
    # nothing left behind next to the archive (the staging directory is gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == [result.path.name]
    report = verify_archive(result.path)
    assert report.ok and sorted(report.checked) == sorted(names), report.problems


def test_restore_gives_back_the_same_state(company: Path, tmp_path: Path) -> None:
    config = load_config(company)
    state = config.state_dir()
    archive = take_backup(config, state, tmp_path / "b.tar.gz").path
    target = tmp_path / "restored"
    result = restore_backup(archive, target)
    assert sorted(result.restored) == sorted(
        p.name
        for p in state.iterdir()
        if p.suffix == ".sqlite" or p.name in ("memory.jsonl", "memory.jsonl.journal")
    )
    for name in ("runs.sqlite", "spend.sqlite"):
        for table in ("sqlite_master",):
            assert rows(target / name, f"SELECT * FROM {table}") == rows(
                state / name, f"SELECT * FROM {table}"
            )
    assert rows(target / "runs.sqlite", "SELECT * FROM runs") == rows(
        state / "runs.sqlite", "SELECT * FROM runs"
    )
    assert (target / "memory.jsonl").read_bytes() == (state / "memory.jsonl").read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    for p in target.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert not [p for p in target.iterdir() if p.name.startswith(".companyd-restore-")]


@pytest.mark.parametrize(
    "member",
    [
        "manifest.json",
        "manifest.sha256",
        "state/runs.sqlite",
        "state/spend.sqlite",
        "memory/memory.jsonl",
        "config/company.yaml",
        "config/resolved.json",
    ],
)
def test_verify_catches_a_flipped_byte_in_any_member(
    company: Path, tmp_path: Path, member: str
) -> None:
    config = load_config(company)
    good = take_backup(config, config.state_dir(), tmp_path / "good.tar.gz").path
    for offset in (0, 100, 10**9):  # the first byte, one inside, the last one
        bad = tmp_path / f"bad-{offset}.tar.gz"
        rewrite(good, bad, member, offset=offset)
        if member.startswith("manifest"):
            with pytest.raises(BackupError, match=r"manifest\.json does not match manifest\.sha"):
                verify_archive(bad)
        else:
            report = verify_archive(bad)
            assert not report.ok
            assert [p.split(":")[0] for p in report.problems] == [member], report.problems
            assert "SHA-256" in report.problems[0] and "damaged" in report.problems[0]
        # and the command says so with exit 1, never a traceback
        assert main(["backup", "verify", str(bad)]) == 1


def test_verify_catches_a_flipped_byte_in_the_compressed_file(
    company: Path, tmp_path: Path
) -> None:
    config = load_config(company)
    good = take_backup(config, config.state_dir(), tmp_path / "good.tar.gz").path
    data = bytearray(good.read_bytes())
    for i, where in enumerate((len(data) // 3, len(data) // 2, len(data) - 12, len(data) - 1)):
        damaged = bytearray(data)
        damaged[where] ^= 0x10
        bad = tmp_path / f"bad{i}.tar.gz"
        bad.write_bytes(bytes(damaged))
        try:
            report = verify_archive(bad)
        except BackupError:
            continue
        assert not report.ok, where


def test_restore_of_a_damaged_backup_changes_nothing(company: Path, tmp_path: Path) -> None:
    config = load_config(company)
    good = take_backup(config, config.state_dir(), tmp_path / "good.tar.gz").path
    bad = tmp_path / "bad.tar.gz"
    rewrite(good, bad, "state/spend.sqlite", offset=5000)
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(BackupError, match="damaged, nothing was restored"):
        restore_backup(bad, target)
    assert list(target.iterdir()) == []


def test_restore_refuses_a_non_empty_directory_unless_forced_and_then_moves_it_aside(
    company: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(company)
    archive = take_backup(config, config.state_dir(), tmp_path / "b.tar.gz").path
    target = tmp_path / "state"
    target.mkdir()
    (target / "spend.sqlite").write_text("the old ledger")
    (target / "spend.sqlite-wal").write_text("its stale WAL")
    rc = main(["restore", str(archive), "--state-dir", str(target)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "is not empty (spend.sqlite, spend.sqlite-wal)" in err and "--force" in err
    assert (target / "spend.sqlite").read_text() == "the old ledger"
    rc = main(["restore", str(archive), "--state-dir", str(target), "--force"])
    assert rc == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("state.before-restore-")]
    assert len(aside) == 1 and str(aside[0]) in out
    assert (aside[0] / "spend.sqlite").read_text() == "the old ledger"
    assert (aside[0] / "spend.sqlite-wal").read_text() == "its stale WAL"
    assert not (target / "spend.sqlite-wal").exists()  # a stale WAL never meets the copy
    assert rows(target / "spend.sqlite", "PRAGMA quick_check") == [("ok",)]


def test_verify_and_restore_say_when_the_backup_was_taken_in_the_company_s_zone(
    company: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The founder reads when a backup was taken on the company's clock, as every other
    time companyd shows (``format_when``), not ISO UTC; ``--json`` keeps the ISO form.
    """
    berlin = write_company(
        tmp_path,
        company={"name": "Acme Ops", "timezone": "Europe/Berlin", "budget": {"daily_usd": 10}},
    )
    config = load_config(berlin)
    archive = take_backup(config, load_config(company).state_dir(), tmp_path / "b.tar.gz").path
    with tarfile.open(archive, "r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    at = datetime.fromtimestamp(manifest["created_ts"], ZoneInfo("Europe/Berlin"))
    taken = at.strftime("%Y-%m-%d %H:%M:%S ") + str(at.tzname())
    assert taken.endswith((" CET", " CEST"))
    assert main(["backup", "verify", str(archive)]) == 0
    out = capsys.readouterr().out
    assert f"'Acme Ops', taken {taken}; ok:" in out and "+00:00" not in out
    assert main(["backup", "verify", str(archive), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["created"] == manifest["created"]
    assert main(["restore", str(archive), "--state-dir", str(tmp_path / "restored")]) == 0
    out = capsys.readouterr().out
    assert f"restored the backup of 'Acme Ops' taken {taken} into" in out
    assert "+00:00" not in out


def test_restore_refuses_the_state_of_a_running_daemon(
    company: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(company)
    archive = take_backup(config, config.state_dir(), tmp_path / "b.tar.gz").path
    target = tmp_path / "live"
    with StateLock.acquire(target):  # what a running daemon holds
        rc = main(["restore", str(archive), "--state-dir", str(target), "--force"])
    assert rc == EX_TEMPFAIL
    err = capsys.readouterr().err
    assert err == (
        f"companyd: refusing to restore into the state of a running daemon (pid {os.getpid()}, "
        f"on {str(target)!r}): stop it first (`systemctl stop companyd`), then restore again "
        "— or restore into another --state-dir\n"
    )  # not "start this one with a different --state-dir": this one is a restore
    assert sorted(p.name for p in target.iterdir()) == ["daemon.lock"]


def test_the_backup_command_writes_where_asked_and_refuses_a_missing_directory(
    company: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "x.tar.gz"
    assert main(["backup", "--config", str(company), "--to", str(dest)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"backup written: {dest} (") and "no daemon running" in out
    assert verify_archive(dest).ok
    rc = main(["backup", "--config", str(company), "--to", str(tmp_path / "nope" / "x.tar.gz")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "nope").exists()


def _named_backup(directory: Path, name: str, company: str) -> None:
    """A minimal archive called ``name`` whose manifest says it is ``company``'s."""
    write_archive(directory / name, {"format": "companyd-backup/1", "company": company}, {})


def test_prune_keeps_the_newest_of_this_company_only(tmp_path: Path) -> None:
    tag = company_tag("Acme Ops")
    names = [f"companyd-{tag}-2026010{d}T000000Z.tar.gz" for d in range(2, 6)]
    legacy = "companyd-acme-ops-20260101T000000Z.tar.gz"  # named before the hash was added
    for n in [legacy, *names]:
        _named_backup(tmp_path, n, "Acme Ops")
    # same slug, another company; one whose manifest cannot be read; a file that is not ours
    _named_backup(tmp_path, "companyd-acme-ops-20260101T000001Z.tar.gz", "ACME ops!")
    (tmp_path / f"companyd-{tag}-20260101T000002Z.tar.gz").write_bytes(gzip.compress(b""))
    (tmp_path / "notes.txt").write_text("mine")
    others = sorted(p.name for p in tmp_path.iterdir() if p.name not in [legacy, *names])
    gone = prune_backups(tmp_path, 2, "Acme Ops")
    assert sorted(p.name for p in gone) == [legacy, *names[:2]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names[2:], *others])


def test_two_companies_whose_names_slug_alike_keep_their_own_backups(tmp_path: Path) -> None:
    """Companies named "Acme" and "ACME!" slug to one name; each backup routine's keep
    prunes only its own company's archives (seen failing first: the second company's keep
    deleted the first's).
    """
    backups = tmp_path / "backups"
    backups.mkdir()
    written: dict[str, list[Path]] = {"Acme": [], "ACME!": []}
    for name in written:
        work = tmp_path / _slug_dir(name)
        work.mkdir()
        config = load_config(
            write_company(
                work, company={"name": name, "timezone": "UTC", "budget": {"daily_usd": 1}}
            )
        )
        config.state_dir().mkdir(mode=0o700)
        for i in range(2):
            result = take_backup(config, config.state_dir(), backups, keep=1, now=1e9 + i)
            written[name].append(result.path)
    kept = sorted(backups.iterdir())
    assert kept == sorted([written["Acme"][-1], written["ACME!"][-1]]), kept
    assert written["Acme"][-1].name != written["ACME!"][-1].name
    assert all(verify_archive(p).ok for p in kept)


def _slug_dir(name: str) -> str:
    return "upper" if name.isupper() or "!" in name else "lower"


@pytest.mark.parametrize("where", ["state", "state/sub", "memory-dir", "state-symlink"])
def test_a_backup_into_the_state_or_memory_directory_is_refused(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path = write_company(tmp_path, memory={"path": "mem/memory.jsonl"})
    config = load_config(config_path)
    state = config.state_dir()
    state.mkdir(mode=0o700)
    (tmp_path / "mem").mkdir()
    (tmp_path / "mem" / "memory.jsonl").write_text("")
    dest = {
        "state": state,
        "state/sub": state / "sub" / "b.tar.gz",
        "memory-dir": tmp_path / "mem" / "b.tar.gz",
        "state-symlink": tmp_path / "link" / "b.tar.gz",
    }[where]
    (tmp_path / "link").symlink_to(state)
    (state / "sub").mkdir()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(BackupError, match=r"refusing to write a backup to .* inside"):
        take_backup(config, state, dest)
    rc = main(["backup", "--config", str(config_path), "--to", str(dest)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "inside" in err and "Traceback" not in err
    after = sorted(str(p) for p in tmp_path.rglob("*") if p.name != "daemon.lock")
    assert after == before  # (the lock is the command's: it backs up a stopped company)


def test_a_backup_onto_a_full_disk_leaves_nothing(company: Path, tmp_path: Path) -> None:
    config = load_config(company)
    try:
        with small_disk(tmp_path / "disk", size="64k") as disk:
            fill(disk)
            with pytest.raises(BackupError, match="cannot write backup") as info:
                take_backup(config, config.state_dir(), disk / "b.tar.gz")
            assert "nothing was written" in str(info.value)
            assert [p.name for p in disk.iterdir()] == [".filler"]
    except DiskUnavailable as exc:
        pytest.skip(str(exc))


def test_restore_of_a_missing_file_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "new-state"
    assert main(["restore", str(tmp_path / "nope.tar.gz"), "--state-dir", str(target)]) == 1
    assert "no backup at" in capsys.readouterr().err
    assert not target.exists()  # seen failing first: the lock created the directory


def test_a_postgres_company_s_manifest_says_its_database_is_not_in_the_archive(
    tmp_path: Path,
) -> None:
    config = load_config(write_company(tmp_path, state={"backend": "postgres", "schema": "acme"}))
    (tmp_path / "state").mkdir(mode=0o700)  # the memory file and the unported stores live here
    result = take_backup(config, tmp_path / "state", tmp_path / "b.tar.gz")
    with tarfile.open(result.path, "r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert verify_archive(result.path).ok  # its manifest's shape holds too
    assert manifest["database"] == {
        "backend": "postgres",
        "schema": "acme",
        "in_archive": False,
        "back_up_with": "pg_dump --schema=acme <database URL>",
    }
