"""Restoring a backup into a state directory that ``companyd run`` then starts from.

:func:`restore_backup` first verifies the whole archive into a private scratch directory
inside the target (every checksum, every store opened, the manifest's shape and every
member name checked: :mod:`companyd.ops._archive`): a damaged or crafted backup changes
nothing. It refuses a directory that holds anything but ``daemon.lock`` unless ``force`` is
given; with ``force`` what was there is moved, not deleted, to
``<dir>.before-restore-<time>`` next to it.

All or nothing: every file the restore writes is first laid out, 0600, in the scratch
directory under a name computed from fixed parts (a store's plain file name; the memory
graph at ``memory_in_state_dir``, a relative path of plain names, or its file name) and
checked to stay inside the state directory. Only then is the state directory touched, by
renames on one file system: what was there moves into the scratch directory, the new
entries move in. A failure among those renames moves everything back (the previous state
exactly as it was); only after they all succeeded does the old content go to
``<dir>.before-restore-<time>``. The caller holds the state directory's lock
(:class:`companyd.daemon._lock.StateLock`) for the whole restore, which is what makes it
refuse a running daemon's state and keeps a daemon from starting half-way through.

The memory graph goes where it was in the state directory. A backup of a company whose
``memory.path`` pointed outside its state directory puts the graph at
``<dir>/<file name>`` and says so: move it to where company.yaml's ``memory.path`` points
on this machine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from companyd._fs import fsync_directory, private_dir
from companyd.ops._archive import BackupError, members, verify_archive

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
        timezone: the backed-up company's zone, None if the backup does not say
            (:attr:`~companyd.ops._archive.VerifyReport.timezone`).
    """

    state_dir: Path
    restored: list[str] = field(default_factory=list)
    moved_aside: Path | None = None
    notes: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    timezone: str | None = None

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
        BackupError: the backup is damaged or crafted (nothing changed), ``state_dir`` is not
            empty and ``force`` is False (nothing changed), or the swap failed (rolled back:
            nothing changed, unless the message says otherwise).
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
    real = Path(os.path.realpath(state_dir))  # the operator's path may be a symlink: resolve once
    result = RestoreResult(state_dir=state_dir)
    scratch = Path(tempfile.mkdtemp(prefix=".companyd-restore-", dir=real))
    keep_scratch = False
    try:
        extracted, new, old = scratch / "archive", scratch / "new", scratch / "old"
        for d in (extracted, new, old):
            d.mkdir(mode=0o700)
        try:
            report = verify_archive(archive, extract_to=extracted)
        except BackupError as exc:
            raise BackupError(f"{exc}; nothing was restored") from None
        if not report.ok:
            raise BackupError(
                f"backup {str(archive)!r} is damaged, nothing was restored: "
                + "; ".join(report.problems)
                + " — use another backup (`companyd backup verify FILE` checks one)"
            )
        result.manifest, result.timezone = report.manifest, report.timezone
        plan = _plan(report.manifest, scratch.name)
        for name, rel in plan:  # lay the new state out in the scratch directory
            staged = new / rel
            staged.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(extracted / name, 0o600)
            os.rename(extracted / name, staged)
            # after resolving, still inside: nothing on the way is a symlink
            if not Path(os.path.realpath(staged)).is_relative_to(os.path.realpath(new)):
                raise BackupError(
                    f"the backup would restore {rel!r} outside the state directory; nothing "
                    "was restored"
                )
            result.restored.append(rel)
        moved_old = [n for n in occupied(real) if n != scratch.name]
        _swap(real, new, old, moved_old)
        if moved_old:
            result.moved_aside, keep_scratch = _move_aside(real, old, result)
    finally:
        for part in ("archive", "new"):
            shutil.rmtree(scratch / part, ignore_errors=True)
        # the previous content is never deleted: ``old`` goes only when it is empty (moved
        # aside, or moved back after a failure); otherwise the message or a note names it
        with contextlib.suppress(OSError):
            if not keep_scratch:
                os.rmdir(scratch / "old")
            os.rmdir(scratch)
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


def _plan(manifest: dict[str, Any], scratch_name: str) -> list[tuple[str, str]]:
    """``(archive name, path relative to the state directory)`` of each member restored:
    computed from fixed parts of names :func:`companyd.ops._archive.read_manifest` checked,
    and checked again here: relative, plain names only, no two the same, none where the
    lock or the scratch directory is, none inside another.
    """
    memory_rel = manifest.get("memory_in_state_dir")
    plan: list[tuple[str, str]] = []
    for m in members(manifest):
        base = m.name.split("/", 1)[1]
        if m.kind == "sqlite":
            rel = base
        elif m.kind == "memory":
            rel = memory_rel if memory_rel is not None else base
        elif m.kind == "memory-journal":
            rel = memory_rel if memory_rel is not None else base.removesuffix(".journal")
            rel += ".journal"
        else:
            continue  # the configuration stays in the archive
        plan.append((m.name, rel))
    files = [rel for _, rel in plan]
    dirs = {"/".join(rel.split("/")[:i]) for rel in files for i in range(1, rel.count("/") + 1)}
    for rel in files:
        parts = rel.split("/")
        if (
            os.path.isabs(rel)
            or any(p in ("", ".", "..") for p in parts)
            or os.path.normpath(rel) != rel
            or parts[0] in IGNORED | {scratch_name}
            or files.count(rel) > 1
            or rel in dirs
        ):
            raise BackupError(
                f"the backup would restore {rel!r}, which is not a plain path of its own inside "
                "the state directory: the backup is damaged or crafted; nothing was restored"
            )
    return plan


def _swap(state_dir: Path, new: Path, old: Path, there: list[str]) -> None:
    """Move ``there`` (the state directory's entries) into ``old``, then every entry of
    ``new`` into the state directory, by renames; on any failure undo what was done, in
    reverse, and raise.
    """
    moved: list[str] = []
    placed: list[str] = []
    try:
        for name in there:
            os.rename(state_dir / name, old / name)
            moved.append(name)
        for name in sorted(os.listdir(new)):
            target = state_dir / name
            if os.path.lexists(target):  # never replace: everything was moved out first
                raise FileExistsError(errno.EEXIST, "appeared during the restore", str(target))
            os.rename(new / name, target)
            placed.append(name)
        fsync_directory(state_dir)
    except OSError as exc:
        new_left, old_left = [], []
        for name in reversed(placed):
            try:
                os.rename(state_dir / name, new / name)
            except OSError:
                new_left.append(name)
        for name in reversed(moved):
            try:
                os.rename(old / name, state_dir / name)
            except OSError:
                old_left.append(name)
        with contextlib.suppress(OSError):
            fsync_directory(state_dir)
        what = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
        if new_left or old_left:
            raise BackupError(
                f"the restore into {str(state_dir)!r} failed ({what}) and could not be fully "
                f"undone: the backup's {', '.join(new_left) or 'files'} are still in the state "
                f"directory; the previous {', '.join(old_left) or 'files'} are in {str(old)!r}: "
                "move them back by hand (nothing was deleted)"
            ) from exc
        raise BackupError(
            f"the restore into {str(state_dir)!r} failed ({what}); it was undone: the state "
            "directory is as it was, nothing was restored. Fix the cause (space, permissions, "
            "a mount point inside the state directory) and restore again"
        ) from exc


def _move_aside(state_dir: Path, old: Path, result: RestoreResult) -> tuple[Path, bool]:
    """Move the previous content (now in ``old``) to ``<dir>.before-restore-<time>`` next to
    the state directory; returns where it is and whether it stayed in the scratch directory
    (that move failed: the restore itself is done, nothing is deleted).
    """
    stamp = datetime.fromtimestamp(time.time(), UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = state_dir.with_name(f"{state_dir.name}.before-restore-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = state_dir.with_name(f"{state_dir.name}.before-restore-{stamp}-{n}")
    try:
        try:
            os.rename(old, aside)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.move(str(old), str(aside))  # another file system (a mount point)
    except OSError as exc:
        result.notes.append(
            f"what was there before could not be moved to {str(aside)!r} "
            f"({exc.strerror or exc}): it is in {str(old)!r}"
        )
        return old, True
    with contextlib.suppress(OSError):
        fsync_directory(aside.parent)
    return aside, False
