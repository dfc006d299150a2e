"""Backups taken by the running daemon: the ``backup`` Admin operation and backup routines.

:class:`Backups` is a part of :class:`~companyd.daemon._main.Daemon` (a mixin, as
:class:`~companyd.daemon._operator.Operator` is): it runs
:func:`companyd.ops._backup.take_backup` in a thread, so the event loop, the agents and the
memory owner go on while the stores are copied (SQLite's online backup API and the memory
file's lock make that safe, see :mod:`companyd.ops._backup`). One backup at a time: a second
request waits for the first. It implements :class:`companyd.scheduler._sink.BackupSink` for
backup routines, whose history rows and ``routine_failed`` alerts the scheduler records.

The backup machinery (:mod:`companyd.ops._backup` and the archive format: tarfile, gzip)
is imported by the first backup, in the worker thread that takes it, not at the daemon's
start (issue 31).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd._fs import make_dirs
from companyd.admin import AdminError, AdminStopping, BackupWritten
from companyd.config import CompanyConfig
from companyd.daemon._reload import in_force

if TYPE_CHECKING:
    from companyd.agents import Staff
    from companyd.ops import BackupResult

__all__ = ["Backups"]

log = logging.getLogger("companyd.daemon")

#: What the caller of a backup the daemon's stop ended is told (the CLI's exit 75).
STOPPED_BACKUP = (
    "the daemon stopped before the backup finished; nothing was written; run it again once "
    "the daemon is back (`companyd status`)"
)


def _ops(name: str) -> Any:
    """``companyd.ops``'s ``name``, importing its module (call it in a worker thread)."""
    return getattr(importlib.import_module("companyd.ops"), name)


async def _backup_error() -> type[Exception]:
    error: type[Exception] = await asyncio.to_thread(_ops, "BackupError")
    return error


class Backups:
    """The daemon's backups (see the module docstring). The daemon sets the attributes."""

    config: CompanyConfig
    started_config: CompanyConfig
    state_dir: Path
    #: one backup at a time (created by the daemon)
    _backup_lock: asyncio.Lock
    #: its ``draining`` is set when the daemon begins to stop
    staff: Staff

    def _in_force(self) -> CompanyConfig:
        """What the daemon runs: a backup copies and describes it — the memory file, the
        stores' backend and schema it opened at start — not a change to company.yaml that
        waits for the restart (a reload applied the rest).
        """
        return in_force(self.started_config, self.config)

    async def _take(self, dest: Path, keep: int | None) -> BackupResult:
        """One backup, in a thread. The daemon's stop (``staff.draining``), or the caller's
        cancellation, stops it: the thread is told, and awaited — it removes what it had
        staged and the temporary archive — before this returns (docs/deploy.md).

        Raises:
            AdminStopping: the daemon began to stop first (``done=False``: nothing written).
        """
        halt = threading.Event()
        draining = asyncio.ensure_future(self.staff.draining.wait())
        try:
            async with self._backup_lock:
                if self.staff.draining.is_set():
                    raise AdminStopping(STOPPED_BACKUP, done=False)
                config = self._in_force()
                work = asyncio.ensure_future(
                    asyncio.to_thread(
                        lambda: _ops("take_backup")(
                            config, self.state_dir, dest, keep=keep, stopped=halt.is_set
                        )
                    )
                )
                try:
                    await asyncio.wait((work, draining), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not work.done():
                        halt.set()
                        # the thread sees it within a block of the archive or a look at the
                        # memory lock: its clean-up is awaited, never left running
                        await asyncio.shield(asyncio.wait((work,)))
                try:
                    result: BackupResult = work.result()
                except Exception as exc:
                    if halt.is_set() and isinstance(exc, _ops("BackupStopped")):
                        raise AdminStopping(STOPPED_BACKUP, done=False) from exc
                    raise
        finally:
            draining.cancel()
        log.info(
            "backup written: %s (%d bytes, %d members, %.2f s)",
            result.path,
            result.size,
            len(result.members),
            result.seconds,
        )
        return result

    async def backup(self, to: str) -> BackupWritten:
        """Admin: write a backup to ``to`` (an absolute file name, or a directory for a
        dated file in it); the archive's path, size, members and how long it took.
        """
        if not os.path.isabs(to):
            raise AdminError(
                f"backup destination {to!r} is not an absolute path; the daemon does not share "
                "your working directory: give the full path"
            )
        backup_error = await _backup_error()
        try:
            result = await self._take(Path(to), None)
        except backup_error as exc:
            raise AdminError(str(exc)) from exc
        data = result.to_dict()
        return BackupWritten(
            path=data["path"],
            size=data["size"],
            seconds=data["seconds"],
            members=data["members"],
            pruned=data["pruned"],
        )

    async def scheduled_backup(self, directory: Path, keep: int) -> str:
        """A backup routine's fire: a dated backup in ``directory`` (created 0700 when
        missing), newest ``keep`` kept.

        Raises:
            BackupError, OSError: the backup failed (the fire is recorded ``failed``); a
                ``directory`` inside the state directory is refused before it is created.
        """
        config = self._in_force()
        await asyncio.to_thread(
            lambda: _ops("check_destination")(config, self.state_dir, directory)
        )
        try:
            await asyncio.to_thread(make_dirs, directory)
        except OSError as exc:
            raise (await _backup_error())(
                f"cannot create the backup directory {str(directory)!r}: {exc.strerror or exc}; "
                "fix the routine's backup.to, or the unit's ReadWritePaths="
            ) from exc
        result = await self._take(directory, keep)
        pruned = f"; {len(result.pruned)} older removed" if result.pruned else ""
        return (
            f"backup written: {result.path} ({result.size} bytes, {result.seconds:.2f} s){pruned}"
        )
