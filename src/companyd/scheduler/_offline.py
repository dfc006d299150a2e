"""The routines as a reader beside the scheduler sees them: the CLI with no daemon, a
standby (docs/ha.md). Read-only; the history may not exist yet (then nothing has fired).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd.config import CompanyConfig
from companyd.scheduler import _store as db
from companyd.storage import Backend

if TYPE_CHECKING:
    from companyd.scheduler._report import JobView

__all__ = ["read_fires", "read_fires_stopped", "read_jobs"]


def read_jobs(
    config: CompanyConfig,
    path: Path,
    backend: Backend,
    now: float,
    ended_runs: EndedRuns | None = None,
) -> tuple[list[JobView], bool]:
    """Each routine's view as of ``now`` from the stored history (``path`` on SQLite, the
    company's schema on PostgreSQL), and whether there is a history yet.

    ``ended_runs`` (given when no daemon runs for this history: the CLI without one) makes
    a routine's last fire its newest one even while the store still has it open, read as
    :func:`read_fires_stopped` reads it (the journal's outcome, else "interrupted …"),
    never "never fired"; without it (a standby beside a running daemon) the last fire is
    the last finished one.
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
            db.clean_stop(conn),
        ),
        backend=backend,
    )
    if got is not None:
        states, stats, latest, open_, stop = got
        if ended_runs is not None and open_:
            # the newest fire by its time, as `jobs history` orders them (open_ is by id)
            newest = {r.routine: r for r in sorted(open_, key=lambda r: r.scheduled)}
            newer = [
                r
                for slug, r in newest.items()
                if slug not in latest or r.scheduled >= latest[slug].scheduled
            ]
            stopped = _as_stopped(newer, stop, config.timezone, ended_runs)
            latest = {**latest, **{r.routine: r for r in stopped}}
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


#: The outcome shown, with no daemon running, for a fire the store still has open and whose
#: run the journal has not ended (not an Outcome: the next start decides the fire's)
INTERRUPTED = "interrupted"

#: How a run the journal ended looks to :func:`read_fires_stopped`: ``status``, ``reason``,
#: ``ended``, ``cost_usd``, ``run_id`` (a ``companyd runs`` row).
EndedRuns = Callable[[Sequence[str]], Mapping[str, Mapping[str, Any]]]


def read_fires_stopped(
    path: Path, backend: Backend, routine: str, limit: int, tz: str, ended_runs: EndedRuns
) -> list[db.FireRecord]:
    """:func:`read_fires` for when no daemon runs for this history (the CLI without one):
    a fire still open in the store is not "running" — nothing runs it. It reads as what is
    known: the outcome the run journal recorded for its task (``ended_runs``: task id →
    that run, for the task ids asked), which the next start gives the fire; else
    :data:`INTERRUPTED` "interrupted by the stop at <time>" (the clean-stop marker a planned
    stop left) or "interrupted: the daemon is not running" — not an :class:`Outcome` of the
    store: the next start resumes the run (the fire then ends with it) or closes it. Nothing
    is written: the next start owns that. A reader beside a running daemon — a standby —
    uses :func:`read_fires`: there an open fire is running.
    """
    got = db.read_history(
        path,
        lambda conn: (db.recent_fires(conn, routine, limit), db.clean_stop(conn)),
        backend=backend,
    )
    if got is None:
        return []
    records, stop = got
    return _as_stopped(records, stop, tz, ended_runs)


def _as_stopped(
    records: Sequence[db.FireRecord],
    stop: tuple[float, str] | None,
    tz: str,
    ended_runs: EndedRuns,
) -> list[db.FireRecord]:
    """``records`` with each open fire read as no daemon runs it (:func:`read_fires_stopped`):
    the journal's outcome for its task, else :data:`INTERRUPTED` by ``stop`` (the clean-stop
    marker) or by a stop not planned.
    """
    open_ = [r for r in records if r.outcome is None]
    if not open_:
        return list(records)
    # here, not at the top: a standby's daemon imports this module at start (issue 31)
    from companyd.scheduler._jobs_text import local_time

    ended = ended_runs([r.task_id for r in open_ if r.task_id])
    closing = "the next start resumes or closes it"
    if stop is not None:
        gone = f"interrupted by the stop at {local_time(stop[0], tz)}; {closing}"
    else:
        gone = f"interrupted: the daemon is not running (no planned stop recorded); {closing}"
    out = []
    for r in records:
        run = ended.get(r.task_id or "") if r.outcome is None else None
        if r.outcome is not None:
            out.append(r)
        elif run is not None:
            reason = str(run.get("reason") or "")
            note = "the run ended as the daemon stopped; the next start records it"
            out.append(
                dataclasses.replace(
                    r,
                    outcome=str(run.get("status")),
                    ended=_float(run.get("ended")),
                    cost_usd=_float(run.get("cost_usd")) or 0.0,
                    run_id=str(run.get("run_id") or r.run_id or "") or None,
                    reason=f"{reason} ({note})" if reason else note,
                )
            )
        else:
            out.append(dataclasses.replace(r, outcome=INTERRUPTED, reason=gone))
    return out


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
