"""Backups taken by the running daemon: the ``backup`` Admin operation and backup routines.

:class:`Backups` is a part of :class:`~companyd.daemon._main.Daemon` (a mixin, as
:class:`~companyd.daemon._operator.Operator` is): it runs
:func:`companyd.ops._backup.take_backup` in a thread, so the event loop, the agents and the
memory owner go on while the stores are copied (SQLite's online backup API and the memory
file's lock make that safe, see :mod:`companyd.ops._backup`). One backup at a time: a second
request waits for the first. It implements :class:`companyd.scheduler._sink.BackupSink` for
backup routines, whose history rows and ``routine_failed`` alerts the scheduler records.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from companyd._fs import make_dirs
from companyd.admin import AdminError, BackupWritten
from companyd.config import CompanyConfig
from companyd.ops import BackupError, BackupResult, check_destination, take_backup

__all__ = ["Backups"]

log = logging.getLogger("companyd.daemon")


class Backups:
    """The daemon's backups (see the module docstring). The daemon sets the attributes."""

    config: CompanyConfig
    state_dir: Path
    #: one backup at a time (created by the daemon)
    _backup_lock: asyncio.Lock

    async def _take(self, dest: Path, keep: int | None) -> BackupResult:
        async with self._backup_lock:
            config = self.config  # the running configuration, as loaded
            result = await asyncio.to_thread(take_backup, config, self.state_dir, dest, keep=keep)
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
        try:
            result = await self._take(Path(to), None)
        except BackupError as exc:
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
        await asyncio.to_thread(check_destination, self.config, self.state_dir, directory)
        try:
            await asyncio.to_thread(make_dirs, directory)
        except OSError as exc:
            raise BackupError(
                f"cannot create the backup directory {str(directory)!r}: {exc.strerror or exc}; "
                "fix the routine's backup.to, or the unit's ReadWritePaths="
            ) from exc
        result = await self._take(directory, keep)
        pruned = f"; {len(result.pruned)} older removed" if result.pruned else ""
        return (
            f"backup written: {result.path} ({result.size} bytes, {result.seconds:.2f} s){pruned}"
        )
