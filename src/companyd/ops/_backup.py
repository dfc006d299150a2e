"""Taking a backup: a consistent snapshot of everything the company has, in one archive.

:func:`take_backup` works the same whether a daemon runs on the state directory or not,
because nothing it reads needs the daemon's cooperation to be consistent:

* **every SQLite store** (each ``*.sqlite`` in the state directory: the spend ledger, the
  run journal, the routine history, the alert outbox, the improver's proposals) is copied
  with SQLite's online backup API (``sqlite3.Connection.backup``) from a read-only
  connection, all pages in one step, i.e. inside one read transaction: the copy is the
  database as of one commit, whatever the owner writes meanwhile (WAL lets it go on);
* **the memory graph and its journal** are read together under the memory file's
  cross-process lock (:meth:`companyd.memory._store.GraphStore.snapshot`) — the lock every
  writer (the daemon's memory owner, ``serve-mcp``, ``memory repair``) holds for each write,
  so the pair is one acknowledged state;
* **the configuration**: company.yaml as loaded, and the validated file with its defaults.

Each part is taken after the backup began, so the archive holds every write acknowledged
before that moment (different stores may hold writes from a few milliseconds later than
others; each store is whole). The parts are staged in a private temporary directory next
to the destination and written as one archive (:func:`companyd.ops._archive.write_archive`).
When a daemon runs, ``companyd backup`` asks it over the control socket (the ``backup``
Admin operation) so that the file is written by the daemon's user; the function is the
same. It blocks (file and SQLite work): async callers run it in a thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sqlite3
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from companyd import __version__
from companyd._fs import is_disk_failure
from companyd._sqlite import connect_readonly, user_version
from companyd.config import CompanyConfig, company_schema
from companyd.memory import GraphStore, MemoryLocked
from companyd.ops._archive import (
    FORMAT,
    MANIFEST,
    MANIFEST_LIMIT,
    BackupError,
    BackupStopped,
    Member,
    member_dict,
    write_archive,
)

__all__ = [
    "BackupResult",
    "backup_name",
    "check_destination",
    "company_tag",
    "prune_backups",
    "state_stores",
    "take_backup",
]

_STAMP = r"\d{8}T\d{6}Z(?:-\d+)?\.tar\.gz"


@dataclass(frozen=True)
class BackupResult:
    """A backup that was written.

    Attributes:
        path: the archive.
        size: its size in bytes.
        members: what it holds.
        seconds: how long taking it took (wall clock).
        pruned: older backups removed by ``keep`` (scheduled backups).
    """

    path: Path
    size: int
    members: tuple[Member, ...]
    seconds: float
    pruned: tuple[Path, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The result as ``--json`` and the ``backup`` Admin operation give it."""
        return {
            "path": str(self.path),
            "size": self.size,
            "seconds": round(self.seconds, 3),
            "members": [member_dict(m) for m in self.members],
            "pruned": [str(p) for p in self.pruned],
        }


#: How long a backup waits for the memory file's lock (another process writing it).
MEMORY_LOCK_WAIT = 30.0
#: How often that wait asks whether the backup was stopped.
_LOCK_LOOK = 0.2


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "company"


def company_tag(name: str) -> str:
    """``<slug>-<8 hex digits>``: the company's name made file-safe, and the start of the
    SHA-256 of the exact name, so "Acme" and "ACME!" (one slug) never share a prefix.
    """
    return f"{_slug(name)}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def backup_name(config: CompanyConfig, now: float) -> str:
    """``companyd-<slug>-<hash>-<UTC time>.tar.gz`` (:func:`company_tag`): sortable by
    time, one company per prefix.
    """
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"companyd-{company_tag(config.name)}-{stamp}.tar.gz"


def check_destination(config: CompanyConfig, state_dir: Path, dest: Path) -> None:
    """Refuse a backup destination (the archive, or the directory for it) inside the state
    directory or the memory file's directory: a backup there would be swept into the next
    backup, moved aside by a restore, or clobber the state it backs up.

    Raises:
        BackupError: it is (the message names both and what to do).
    """
    where = Path(os.path.realpath(dest if dest.is_dir() else dest.parent))
    memory = config.memory_path(state_dir)
    for label, forbidden in (
        ("the state directory", state_dir),
        ("the memory file's directory", memory.parent),
    ):
        inside = Path(os.path.realpath(forbidden))
        if where == inside or inside in where.parents:
            raise BackupError(
                f"refusing to write a backup to {str(dest)!r}: it is inside {label} "
                f"{str(forbidden)!r}; choose a directory outside it (e.g. "
                "/var/backups/companyd) with --to or the routine's backup.to"
            )


def state_stores(state_dir: Path) -> list[Path]:
    """The SQLite stores in ``state_dir`` (regular ``*.sqlite`` files), by name."""
    try:
        entries = sorted(state_dir.iterdir())
    except FileNotFoundError:
        return []
    return [p for p in entries if p.suffix == ".sqlite" and p.is_file() and not p.is_symlink()]


def take_backup(
    config: CompanyConfig,
    state_dir: Path,
    dest: Path,
    *,
    keep: int | None = None,
    now: float | None = None,
    pre_upgrade: bool = False,
    stopped: Callable[[], bool] | None = None,
) -> BackupResult:
    """Snapshot ``state_dir`` (and the memory graph, wherever company.yaml puts it) into the
    archive ``dest`` — a file, or an existing directory to put a dated file in. With
    ``keep``, older backups of this company in the same directory beyond the newest
    ``keep`` are removed afterwards.

    ``pre_upgrade``: the one exception to :func:`check_destination` — the backup
    ``companyd run`` takes before a store migrates (companyd.ops._upgrade) is the file
    ``<state>/backups/pre-upgrade-*.tar.gz``, where the way back names it: a subdirectory is
    never swept into a backup (only the top-level stores are), never pruned (no ``keep``),
    and a restore reads it before it moves the state aside (docs/upgrade.md).

    ``stopped``: asked between the steps (after each store, during the wait for the memory
    file's lock, each block of the archive); once it says True the backup ends with
    nothing written (the daemon's stop, docs/deploy.md).

    Raises:
        BackupError: the state or the destination cannot be read or written (the message
            names the path and what to do); nothing is left behind.
        BackupStopped: ``stopped()`` said so first; nothing is left behind either.
    """
    halt = stopped or (lambda: False)
    started = time.monotonic()
    now = time.time() if now is None else now
    state_dir = state_dir.absolute()
    if not state_dir.is_dir():
        raise BackupError(
            f"state directory {str(state_dir)!r} does not exist; nothing to back up (check "
            "--state-dir, or company.yaml's state_dir)"
        )
    dest = dest.absolute()
    if not (
        pre_upgrade
        and dest.parent == state_dir / "backups"
        and dest.name.startswith("pre-upgrade-")
        and keep is None
    ):
        check_destination(config, state_dir, dest)
    if dest.is_dir():
        name = backup_name(config, now)
        dest = dest / name
        n = 1
        while dest.exists():  # two backups within one second
            n += 1
            dest = dest.with_name(name.replace(".tar.gz", f"-{n}.tar.gz"))
    elif not dest.parent.is_dir():
        raise BackupError(
            f"cannot write backup {str(dest)!r}: directory {str(dest.parent)!r} does not "
            "exist; create it or choose another --to"
        )
    memory = config.memory_path(state_dir)
    try:
        with tempfile.TemporaryDirectory(prefix=".companyd-backup-", dir=dest.parent) as tmp:
            stage = Path(tmp)
            files: dict[str, Path] = {}
            listed: list[Member] = []
            for store in state_stores(state_dir):
                name = f"state/{store.name}"
                staged = stage / name
                version = _copy_store(store, staged, halt)
                files[name] = staged
                listed.append(Member.of(name, "sqlite", staged, version))
            graph, journal = _memory_snapshot(memory, halt)
            for name, kind, data in (
                (f"memory/{memory.name}", "memory", graph),
                (f"memory/{memory.name}.journal", "memory-journal", journal),
                ("config/company.yaml", "config", config.text.encode()),
                ("config/resolved.json", "resolved-config", _resolved(config)),
            ):
                if data is None:
                    continue
                staged = stage / name
                staged.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                staged.write_bytes(data)
                files[name] = staged
                listed.append(Member.of(name, kind, staged))
            manifest = _manifest(config, state_dir, memory, listed, now)
            size = write_archive(dest, manifest, files, stopped=halt)
    except sqlite3.Error as exc:
        if is_disk_failure(exc):  # the stores are only read: the full disk is the staging's
            raise BackupError(
                f"cannot write backup {str(dest)!r}: {exc} in {str(dest.parent)!r}; free some "
                "space or choose another --to; nothing was written"
            ) from exc
        raise BackupError(
            f"cannot back up a store in {str(state_dir)!r}: {exc}; nothing was written"
        ) from exc
    except OSError as exc:
        raise BackupError(
            f"cannot write backup {str(dest)!r}: {exc.strerror or exc}; check that the "
            "directory exists, is writable by this user and has room; nothing was written"
        ) from exc
    pruned = tuple(prune_backups(dest.parent, keep, config.name)) if keep else ()
    return BackupResult(
        path=dest,
        size=size,
        members=tuple(listed),
        seconds=time.monotonic() - started,
        pruned=pruned,
    )


def _copy_store(src_path: Path, staged: Path, stopped: Callable[[], bool]) -> int:
    """The online backup of one store into ``staged``; returns its schema version.

    Raises:
        BackupStopped: ``stopped()`` said so (asked after every block of pages).
    """

    def progress(status: int, remaining: int, total: int) -> None:
        if stopped():
            raise BackupStopped

    staged.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    src = connect_readonly(src_path, timeout=30.0)
    try:
        dst = sqlite3.connect(staged, isolation_level=None)
        try:
            # pages=-1: every page in one step, one read transaction; the progress callback
            # comes after it (a stop is seen before the next store)
            src.backup(dst, progress=progress)
            version = user_version(dst)
        finally:
            dst.close()
    finally:
        src.close()
    os.chmod(staged, 0o600)
    return version


def _memory_snapshot(path: Path, stopped: Callable[[], bool]) -> tuple[bytes | None, bytes | None]:
    """The memory graph and journal read under its lock (waited for up to
    ``MEMORY_LOCK_WAIT`` s, asking ``stopped()`` every ``_LOCK_LOOK`` s).
    """
    journal = path.with_name(path.name + ".journal")
    if not path.exists() and not journal.exists():
        return None, None
    deadline = time.monotonic() + MEMORY_LOCK_WAIT
    while True:
        left = deadline - time.monotonic()
        wait = max(0.0, min(_LOCK_LOOK, left))
        try:
            with GraphStore(path, readonly=True, lock_timeout=wait) as store:
                return store.snapshot()
        except MemoryLocked:
            if left <= _LOCK_LOOK:
                raise
        if stopped():
            raise BackupStopped


def _resolved(config: CompanyConfig) -> bytes:
    spec = config.spec.model_dump(mode="json")
    return (json.dumps(spec, indent=2, ensure_ascii=False) + "\n").encode()


def _library_versions() -> dict[str, str]:
    out = {}
    for dist in ("anthropic", "python-telegram-bot", "pydantic", "APScheduler", "mcp"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def _manifest(
    config: CompanyConfig, state_dir: Path, memory: Path, listed: list[Member], now: float
) -> dict[str, Any]:
    try:
        memory_rel: str | None = str(memory.relative_to(state_dir))
    except ValueError:
        memory_rel = None
    return {
        "format": FORMAT,
        "created": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
        "created_ts": now,
        "companyd": __version__,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "libraries": _library_versions(),
        "platform": sys.platform,
        "host": platform.node(),
        "company": config.name,
        "config_path": str(config.path),
        "state_dir": str(state_dir),
        "memory_path": str(memory),
        "memory_in_state_dir": memory_rel,
        "members": [member_dict(m) for m in listed],
        # the stores kept in PostgreSQL are not in the archive (docs/storage.md: pg_dump)
        "database": (
            None
            if config.spec.state.backend == "sqlite"
            else {
                "backend": "postgres",
                "schema": company_schema(config),
                "in_archive": False,
                "back_up_with": f"pg_dump --schema={company_schema(config)} <database URL>",
            }
        ),
    }


def prune_backups(directory: Path, keep: int, company: str) -> list[Path]:
    """Remove ``company``'s backups in ``directory`` beyond the newest ``keep`` (by the time
    in their names). A file counts as the company's only when both say so: its name is
    :func:`backup_name`'s for this company (or the name before the hash was added,
    ``companyd-<slug>-<time>.tar.gz``), and its manifest's ``company`` is exactly
    ``company``. Anything else (another company's backup, a file whose manifest cannot be
    read) is never touched.
    """
    tag, slug = company_tag(company), _slug(company)
    named = re.compile(rf"^companyd-(?:{re.escape(tag)}|{re.escape(slug)})-{_STAMP}$")
    mine = []
    for p in directory.iterdir():
        ours = named.match(p.name) and p.is_file() and not p.is_symlink()
        if ours and _archive_company(p) == company:
            mine.append(p)
    mine.sort(key=lambda p: _stamp_key(p.name))
    gone = mine[: max(0, len(mine) - keep)]
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def _stamp_key(name: str) -> tuple[str, int]:
    """Sort by the time in the name, then the ``-<n>`` of two backups in one second."""
    m = re.search(r"-(\d{8}T\d{6}Z)(?:-(\d+))?\.tar\.gz$", name)
    assert m is not None  # matched by the pattern above
    return m.group(1), int(m.group(2) or 1)


def _archive_company(path: Path) -> str | None:
    """The ``company`` in the manifest of the backup at ``path`` (its first entry, as
    :func:`companyd.ops._archive.write_archive` writes it; only that entry is read), or None.
    """
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isreg():
                return None
            if first.size > MANIFEST_LIMIT:
                return None
            f = tar.extractfile(first)
            if f is None:
                return None
            manifest = json.loads(f.read(MANIFEST_LIMIT))
    except Exception:  # not a readable backup: never ours to delete
        return None
    company = manifest.get("company") if isinstance(manifest, dict) else None
    return company if isinstance(company, str) else None
