"""Operator tools: the health check (``companyd doctor``) and verified backup / restore.

* :mod:`companyd.ops._archive` — the backup archive: manifest, atomic write, verify;
* :mod:`companyd.ops._backup` — taking a consistent snapshot of a company's state;
* :mod:`companyd.ops._restore` — putting a verified backup into a state directory;
* :mod:`companyd.ops._doctor` — the checks of ``companyd doctor`` and its safe fixes;
* :mod:`companyd.ops._upgrade` — before a start: refuse a newer state, back up before a
  store migrates (docs/upgrade.md).

A layer of its own between the services (it reads the memory, spend, scheduler and alert
stores' files, and asks Telegram and the Anthropic API through ``alerts`` and ``llm``) and
the daemon, which calls it for the ``backup`` Admin operation and scheduled backups
(docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.ops._archive import BackupError, BackupStopped, verify_archive
    from companyd.ops._backup import BackupResult, backup_name, check_destination, take_backup
    from companyd.ops._doctor import DoctorReport, RunningDaemon, run_doctor
    from companyd.ops._restore import restore_backup
    from companyd.ops._upgrade import UpgradeRefused, prepare_upgrade


__all__ = [
    "BackupError",
    "BackupResult",
    "BackupStopped",
    "DoctorReport",
    "RunningDaemon",
    "UpgradeRefused",
    "backup_name",
    "check_destination",
    "prepare_upgrade",
    "restore_backup",
    "run_doctor",
    "take_backup",
    "verify_archive",
]


_HOMES: dict[str, str] = {
    "check_destination": "companyd.ops._backup",
    "BackupError": "companyd.ops._archive",
    "BackupResult": "companyd.ops._backup",
    "BackupStopped": "companyd.ops._archive",
    "DoctorReport": "companyd.ops._doctor",
    "RunningDaemon": "companyd.ops._doctor",
    "backup_name": "companyd.ops._backup",
    "restore_backup": "companyd.ops._restore",
    "run_doctor": "companyd.ops._doctor",
    "take_backup": "companyd.ops._backup",
    "verify_archive": "companyd.ops._archive",
    "UpgradeRefused": "companyd.ops._upgrade",
    "prepare_upgrade": "companyd.ops._upgrade",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
