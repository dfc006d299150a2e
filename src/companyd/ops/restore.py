"""Restoring a backup into a state directory that ``companyd run`` then starts from.

:func:`restore_backup` first verifies the whole archive into a private scratch directory
inside the target (every checksum, every store opened): a damaged backup changes nothing.
It refuses a directory that holds anything but ``daemon.lock`` unless ``force`` is given;
with ``force`` what was there is moved, not deleted, to ``<dir>.before-restore-<time>``
next to it. The members are then renamed into place (same file system: each appears whole),
0600, and the directory fsynced. The caller holds the state directory's lock
(:class:`companyd.daemon.lock.StateLock`) for the whole restore, which is what makes it
refuse a running daemon's state and keeps a daemon from starting half-way through.

The memory graph goes where it was in the state directory. A backup of a company whose
``memory.path`` pointed outside its state directory puts the graph at
``<dir>/<file name>`` and says so: move it to where company.yaml's ``memory.path`` points
on this machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from companyd._fs import fsync_directory, private_dir
from companyd.ops.archive import BackupError, members, verify_archive

__all__ = ["IGNORED", "RestoreResult", "restore_backup"]

#: Entries of a state directory a restore ignores: the lock the caller holds.
IGNORED = frozenset({"daemon.lock"})


@dataclass
class RestoreResult:
    """What a restore did.

    Attributes:
        state_dir: where the state now is.
        restored: the files written, relative to ``state_dir``.
        moved_aside: where the directory's previous contents went (``force``), else None.
        notes: what the operator should know or do next.
        manifest: the backup's manifest.
    """

    state_dir: Path
    restored: list[str] = field(default_factory=list)
    moved_aside: Path | None = None
    notes: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result as ``--json`` prints it."""
        return {
            "state_dir": str(self.state_dir),
            "restored": self.restored,
            "moved_aside": None if self.moved_aside is None else str(self.moved_aside),
            "notes": self.notes,
            "backup": {k: self.manifest.get(k) for k in ("created", "company", "companyd", "host")},
        }


def occupied(state_dir: Path) -> list[str]:
    """The entries of ``state_dir`` a restore would replace (all but :data:`IGNORED`)."""
    try:
        return sorted(p.name for p in state_dir.iterdir() if p.name not in IGNORED)
    except FileNotFoundError:
        return []


def restore_backup(archive: Path, state_dir: Path, *, force: bool = False) -> RestoreResult:
    """Restore ``archive`` into ``state_dir`` (see the module docstring).

    Raises:
        BackupError: the backup is damaged (nothing changed), or ``state_dir`` is not
            empty and ``force`` is False (nothing changed).
    """
    state_dir = state_dir.absolute()
    there = occupied(state_dir)
    if there and not force:
        shown = ", ".join(there[:5]) + (f" and {len(there) - 5} more" if len(there) > 5 else "")
        raise BackupError(
            f"state directory {str(state_dir)!r} is not empty ({shown}); restore into an "
            "empty directory, or add --force to move what is there aside (to "
            f"{state_dir.name}.before-restore-<time> next to it) first"
        )
    private_dir(state_dir)
    result = RestoreResult(state_dir=state_dir)
    scratch = Path(tempfile.mkdtemp(prefix=".companyd-restore-", dir=state_dir))
    try:
        report = verify_archive(archive, extract_to=scratch)
        if not report.ok:
            raise BackupError(
                f"backup {str(archive)!r} is damaged, nothing was restored: "
                + "; ".join(report.problems)
                + " — use another backup (`companyd backup verify FILE` checks one)"
            )
        result.manifest = report.manifest
        there = [n for n in occupied(state_dir) if n != scratch.name]
        if there:
            result.moved_aside = _move_aside(state_dir, there)
        memory_rel = report.manifest.get("memory_in_state_dir")
        for m in members(report.manifest):
            target = _target(state_dir, m.name, m.kind, memory_rel)
            if target is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(scratch / m.name, 0o600)
            os.replace(scratch / m.name, target)
            result.restored.append(str(target.relative_to(state_dir)))
        fsync_directory(state_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if report.manifest.get("memory_in_state_dir") is None and any(
        m.kind == "memory" for m in members(report.manifest)
    ):
        was = report.manifest.get("memory_path")
        result.notes.append(
            f"the memory graph was at {was!r} (company.yaml's memory.path, outside the state "
            f"directory); it is restored to {str(state_dir)!r}: move the memory files there "
            "to where memory.path points on this machine before `companyd run`"
        )
    result.notes.append(
        "company.yaml is in the backup as config/company.yaml: "
        f"`tar -xzf {str(archive)!r} -O config/company.yaml` prints it"
    )
    return result


def _target(state_dir: Path, name: str, kind: str, memory_rel: str | None) -> Path | None:
    base = name.split("/", 1)[1]
    if kind == "sqlite":
        return state_dir / base
    if kind in ("memory", "memory-journal"):
        if memory_rel is not None:
            graph = state_dir / memory_rel
            return graph if kind == "memory" else graph.with_name(graph.name + ".journal")
        return state_dir / base
    return None  # the configuration stays in the archive


def _move_aside(state_dir: Path, names: list[str]) -> Path:
    stamp = datetime.fromtimestamp(time.time(), UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = state_dir.with_name(f"{state_dir.name}.before-restore-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = state_dir.with_name(f"{state_dir.name}.before-restore-{stamp}-{n}")
    aside.mkdir(mode=0o700)
    for name in names:
        try:
            os.replace(state_dir / name, aside / name)
        except OSError:  # another file system (a mount point): copy, then remove
            shutil.move(str(state_dir / name), str(aside / name))
    with contextlib.suppress(OSError):
        fsync_directory(aside.parent)
    return aside
