"""Upgrades that cannot brick the company: what ``companyd run`` checks before any store opens.

Every store in the state directory versions its schema with ``PRAGMA user_version``
(:mod:`companyd._sqlite`): version N means the first N steps of the store's ``STEPS`` have
been applied, and the store applies the missing ones itself when it opens. Before that
happens, :func:`prepare_upgrade` (called by ``companyd run`` once it holds the state
directory's lock, before the daemon is built) looks at every store file it knows:

* a store at a **higher** version than this code knows was written by a newer companyd:
  the start is refused with :class:`StateTooNew` (exit 78, ``EX_CONFIG``: systemd does not
  restart-loop on it), the message naming the way back — upgrade companyd again, or restore
  the pre-upgrade backup that was taken before the newer one migrated the state. Nothing is
  changed.
* a store at a **lower** (non-zero) version is about to be migrated: first a backup of the
  whole state is written with the ordinary backup machinery
  (:func:`companyd.ops._backup.take_backup`) to
  ``<state>/backups/pre-upgrade-<companyd version>-<UTC time>.tar.gz``, then verified
  (:func:`companyd.ops._archive.verify_archive`: every checksum, every store opened); only a
  verified backup lets the start go on, and each store's step is logged. A backup that
  cannot be written or verified refuses the start the same way (exit 78), with nothing
  migrated.

A new store (no file yet, or version 0) needs nothing. The PostgreSQL backend is not
inspected here (its schema is the database server's; take ``pg_dump`` before upgrading —
docs/upgrade.md); its stores still refuse a newer schema themselves.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from companyd import __version__
from companyd._sqlite import connect_readonly, user_version
from companyd.alerts import STORE_STEPS as ALERT_STEPS
from companyd.config import CompanyConfig
from companyd.desk import PROPOSAL_STORE_STEPS, TOOL_STORE_STEPS
from companyd.desk import STORE_STEPS as DESK_STEPS
from companyd.errors import EX_CONFIG, CompanydError
from companyd.runs import STORE_STEPS as RUN_STEPS
from companyd.scheduler import STORE_STEPS as ROUTINE_STEPS
from companyd.spend import STORE_STEPS as SPEND_STEPS

__all__ = [
    "BACKUPS_DIR",
    "KNOWN_STORES",
    "StateTooNew",
    "StoreVersion",
    "UpgradeRefused",
    "inspect_state",
    "pre_upgrade_backups",
    "prepare_upgrade",
]

log = logging.getLogger("companyd.ops.upgrade")

#: Where the pre-upgrade backups go, inside the state directory.
BACKUPS_DIR = "backups"

#: Every store file of the state directory → how many schema steps this code knows.
#: (Each store's package says it: ``STORE_STEPS`` on its face.)
KNOWN_STORES: dict[str, int] = {
    **RUN_STEPS,
    **DESK_STEPS,
    **PROPOSAL_STORE_STEPS,
    **TOOL_STORE_STEPS,
    **ROUTINE_STEPS,
    **SPEND_STEPS,
    **ALERT_STEPS,
}


class UpgradeRefused(CompanydError):
    """The daemon must not start on this state; exit 78 (the operator must act)."""

    exit_code = EX_CONFIG


class StateTooNew(UpgradeRefused):
    """A store was written by a newer companyd; the message says the way back."""


@dataclass(frozen=True)
class StoreVersion:
    """One store file and its schema step.

    Attributes:
        name: the file name (``runs.sqlite``).
        path: the file.
        version: its ``PRAGMA user_version``.
        known: the number of steps this code knows.
    """

    name: str
    path: Path
    version: int
    known: int

    @property
    def too_new(self) -> bool:
        """Written by a newer companyd."""
        return self.version > self.known

    @property
    def needs_migration(self) -> bool:
        """An existing store this code will migrate at open."""
        return 0 < self.version < self.known

    def describe(self) -> str:
        """``runs.sqlite at schema step 1 of 2``."""
        return f"{self.name} at schema step {self.version} (this companyd knows {self.known})"


#: SQLite's primary result codes for a disk that is full or failing.
_DISK_ERRORS = frozenset({sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL})


def inspect_state(state_dir: Path, stores: dict[str, int] | None = None) -> list[StoreVersion]:
    """The schema step of every known store file in ``state_dir`` (read-only, no change).

    A store whose version cannot be read because the disk is full or failing is left out
    (logged): the store reports that itself when it opens.

    Raises:
        UpgradeRefused: a store file exists but cannot be read as SQLite.
    """
    out: list[StoreVersion] = []
    for name, known in sorted((stores or KNOWN_STORES).items()):
        path = state_dir / name
        if not path.is_file():
            continue
        try:
            conn = connect_readonly(path)
            try:
                version = user_version(conn)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF in _DISK_ERRORS:
                # A full or failing disk, not a store from elsewhere: the store's own open
                # says so and the daemon starts degraded (docs/daemon.md) — refusing here
                # would turn a full disk into a crash loop.
                log.warning("cannot read the schema version of %s (%s); not checked", path, exc)
                continue
            raise UpgradeRefused(
                f"cannot read the schema version of {str(path)!r}: {exc}; check the file's "
                "owner and mode (the daemon's user must read it), or restore a backup "
                "(docs/upgrade.md)"
            ) from exc
        out.append(StoreVersion(name=name, path=path, version=version, known=known))
    return out


def pre_upgrade_backups(state_dir: Path) -> list[Path]:
    """The pre-upgrade backups in ``<state>/backups``, oldest first."""
    try:
        return sorted((state_dir / BACKUPS_DIR).glob("pre-upgrade-*.tar.gz"))
    except OSError:
        return []


def _way_back(state_dir: Path) -> str:
    backups = pre_upgrade_backups(state_dir)
    restore = (
        f"restore the state from before that upgrade with `companyd restore "
        f"{str(backups[-1])!r} --state-dir {str(state_dir)!r} --force` (it moves the newer "
        "state aside, not away)"
        if backups
        else "restore a backup taken with this version (`companyd restore FILE --state-dir "
        f"{str(state_dir)!r} --force`)"
    )
    return f"upgrade companyd to the version that wrote it (docs/upgrade.md), or {restore}"


def prepare_upgrade(
    config: CompanyConfig,
    state_dir: Path,
    *,
    now: float | None = None,
    stores: dict[str, int] | None = None,
) -> Path | None:
    """Check the state before the daemon opens it; back it up first if it will migrate.

    Returns the verified pre-upgrade backup when one was written, else None. Only the
    SQLite backend is inspected (see the module docstring).

    Raises:
        StateTooNew: a store was written by a newer companyd (nothing changed).
        UpgradeRefused: the pre-upgrade backup could not be written or verified (nothing
            migrated).
    """
    if config.spec.state.backend != "sqlite":
        return None
    found = inspect_state(state_dir, stores)
    newer = [s for s in found if s.too_new]
    if newer:
        raise StateTooNew(
            f"the state in {str(state_dir)!r} was written by a newer companyd ("
            + "; ".join(s.describe() for s in newer)
            + f"); this is companyd {__version__} and will not touch it. "
            + _way_back(state_dir)
        )
    pending = [s for s in found if s.needs_migration]
    if not pending:
        return None
    # imported only when a store will migrate: every start runs this check, and the backup
    # machinery (tarfile, gzip, the archive format) is not needed otherwise (issue 31)
    from companyd.ops._archive import BackupError, verify_archive
    from companyd.ops._backup import take_backup

    now = time.time() if now is None else now
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = state_dir / BACKUPS_DIR
    dest = folder / f"pre-upgrade-{__version__}-{stamp}.tar.gz"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        result = take_backup(config, state_dir, dest, now=now, pre_upgrade=True)
    except (BackupError, OSError) as exc:
        raise UpgradeRefused(
            f"companyd {__version__} must migrate {_names(pending)} but could not write the "
            f"pre-upgrade backup {str(dest)!r}: {exc}; nothing was migrated — free some "
            "space or fix the directory's owner, then start again"
        ) from exc
    report = verify_archive(result.path)
    if not report.ok:
        raise UpgradeRefused(
            f"the pre-upgrade backup {str(result.path)!r} did not verify ("
            + "; ".join(report.problems)
            + "); nothing was migrated — check the disk, then start again"
        )
    log.warning(
        "upgrade: pre-upgrade backup written and verified: %s (%d members); restore it with "
        "`companyd restore %s --state-dir %s --force` to go back",
        result.path,
        len(result.members),
        result.path,
        state_dir,
    )
    for s in pending:
        log.warning(
            "upgrade: migrating %s from schema step %d to %d (companyd %s)",
            s.name,
            s.version,
            s.known,
            __version__,
        )
    return result.path


def _names(stores: Sequence[StoreVersion]) -> str:
    return ", ".join(s.describe() for s in stores)
