"""The routines as a reader beside the scheduler sees them: the CLI with no daemon, a
standby (docs/ha.md). Read-only; the history may not exist yet (then nothing has fired).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from companyd.config import CompanyConfig
from companyd.scheduler import _store as db
from companyd.storage import Backend

if TYPE_CHECKING:
    from companyd.scheduler._report import JobView

__all__ = ["read_fires", "read_jobs"]


def read_jobs(
    config: CompanyConfig, path: Path, backend: Backend, now: float
) -> tuple[list[JobView], bool]:
    """Each routine's view as of ``now`` from the stored history (``path`` on SQLite, the
    company's schema on PostgreSQL), and whether there is a history yet.
    """
    # here, not at the top: a standby's daemon imports this module at start (issue 31)
    from companyd.scheduler._report import SUCCESS_WINDOW, job_views, offline_next_fires

    states: dict[str, db.RoutineState] = {}
    stats: dict[str, db.RoutineStats] = {}
    latest: dict[str, db.FireRecord] = {}
    open_: list[db.FireRecord] = []
    got = db.read_history(
        path,
        lambda conn: (
            db.load_states(conn),
            db.routine_stats(conn, now - SUCCESS_WINDOW),
            db.latest_fires(conn),
            db.open_fires(conn),
        ),
        backend=backend,
    )
    if got is not None:
        states, stats, latest, open_ = got
    nexts, pending = offline_next_fires(config, states, now)
    views = job_views(
        config,
        stats=stats,
        latest=latest,
        open_fires=open_,
        next_fires=nexts,
        catch_up_pending=pending,
    )
    return views, got is not None


def read_fires(path: Path, backend: Backend, routine: str, limit: int) -> list[db.FireRecord]:
    """The latest ``limit`` fires of ``routine``, newest first (none: no history yet)."""
    got = db.read_history(path, lambda conn: db.recent_fires(conn, routine, limit), backend=backend)
    return got or []
